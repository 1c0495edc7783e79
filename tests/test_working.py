"""bf16 working copies of the linear layers' weights (bertkit/training/working.py, a GPU's graphed-step change),
checked on a CPU under bf16 autocast: the same loss and fp32 gradients as autocast's own casts, bit for bit; a static
run with them ends at the weights of one without, also resumed; undone on the way out."""

from __future__ import annotations

import copy
import json
from contextlib import nullcontext

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from bertkit.training.working import (
    CALLS,
    WorkingLinear,
    collect,
    refresh,
    working_bytes,
    working_modules,
    working_weights,
)

from .conftest import fit, small_config


def loss_and_grads(model, ids, mask, labels):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    collect(working_modules(model))  # nothing where the model has no working copies
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture
def pair(tiny_bert):
    torch.manual_seed(0)
    reference = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert), num_labels=2).train()
    return reference, copy.deepcopy(reference)


def batch():
    ids = torch.randint(1000, 5000, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    return ids, mask, torch.tensor([0, 1, 1])


@pytest.mark.parametrize("fused", [False, True])
def test_working_copies_give_autocasts_loss_and_gradients_bit_for_bit(fused, pair):
    """With and without the fused q/k/v projection (which concatenates the working copies instead of the weights)."""
    from bertkit.training.qkv import fused_qkv

    reference, model = pair
    ids, mask, labels = batch()
    names, params = list(model.state_dict()), dict(model.named_parameters())
    with fused_qkv(reference) if fused else nullcontext():
        torch.manual_seed(1)  # the same dropout masks
        want_loss, want = loss_and_grads(reference, ids, mask, labels)
    with fused_qkv(model) if fused else nullcontext(), working_weights(model, log=pytest.fail) as applied:
        assert applied == ["bfloat16_working_weights"]
        assert list(model.state_dict()) == names and dict(model.named_parameters()) == params  # the same tensors
        linears = sum(type(m) is torch.nn.Linear for m in pair[0].modules())
        assert len(working_modules(model)) == linears
        before = CALLS["working"]
        torch.manual_seed(1)
        loss, grads = loss_and_grads(model, ids, mask, labels)
        assert CALLS["working"] - before == linears  # every linear (and fused projection) computed with its copies
        assert all(w.grad is None for m in working_modules(model) for w in m._work if w is not None)
    assert torch.equal(loss, want_loss)
    assert grads.keys() == want.keys()
    for name, grad in want.items():
        assert grad.dtype == torch.float32 and torch.equal(grads[name], grad), name
    assert not any(isinstance(m, WorkingLinear) or hasattr(m, "_work") for m in model.modules())


def test_outside_training_mode_or_autocast_the_layers_use_their_own_weights(pair):
    _, model = pair
    layer = model.bert.encoder.layer[0].output.dense
    x = torch.randn(2, layer.in_features)
    with working_weights(model):
        with torch.no_grad():
            layer.weight.add_(1.0)  # the working copy is now stale: only the parameter has it
        with torch.autocast("cpu", dtype=torch.bfloat16):
            stale = layer(x)
            model.eval()
            assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        model.train()
        assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))  # fp32: no autocast
        refresh(working_modules(model))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fresh = layer(x)
        assert not torch.equal(stale, fresh)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.testing.assert_close(fresh, torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_the_layers_come_back_when_training_raises_and_a_tied_weight_is_left_alone(pair):
    _, model = pair
    tied = model.bert.encoder.layer[0].output.dense
    model.extra = torch.nn.Linear(tied.in_features, tied.out_features)
    model.extra.weight = tied.weight  # one parameter, two users: its gradient comes from both
    with pytest.raises(RuntimeError, match="stop"), working_weights(model) as applied:
        assert applied and type(tied) is torch.nn.Linear and not hasattr(tied, "_work")
        assert type(model.bert.encoder.layer[0].intermediate.dense) is WorkingLinear
        raise RuntimeError("stop")
    assert not any(isinstance(m, WorkingLinear) or hasattr(m, "_work") for m in model.modules())


@pytest.mark.parametrize("fused", [False, True])
def test_a_memory_plan_counts_the_bytes_the_copies_take(fused, pair):
    """`working_bytes` (what a GPU's memory plan adds, budget.py) on the model as the plan sees it: the copies made
    later, with the fused q/k/v projection or without, and a tied weight (no copy)."""
    from bertkit.training.qkv import fused_qkv

    _, model = pair
    model.extra = torch.nn.Linear(64, 32)
    model.extra.weight = model.bert.encoder.layer[0].output.dense.weight
    planned = working_bytes(model)
    with fused_qkv(model, log=lambda m: None) if fused else nullcontext(), working_weights(model) as applied:
        assert applied
        made = sum(t.numel() * t.element_size() for m in working_modules(model) for t in m._work if t is not None)
    assert planned == made > 0


def test_the_eager_step_refuses_working_copies(pair):
    from types import SimpleNamespace

    from bertkit.training.step import EagerStep

    _, model = pair
    acc = SimpleNamespace(device=torch.device("cpu"))
    with working_weights(model), pytest.raises(RuntimeError, match="static step alone"):
        EagerStep(acc, model, None, None, 1.0)


class Interrupt(Exception):
    pass


@pytest.mark.usefixtures("cpu_only")  # bf16 autocast on a CPU, bit for bit
def test_a_static_run_with_working_copies_trains_to_the_same_weights_also_resumed(tiny_bert, sst2_dir, tmp_path,
                                                                                  capsys, monkeypatch):
    """20 steps in bf16 with dropout over an epoch's end; evaluations between steps (which use the parameters); the
    working run cut at step 11 and resumed (the copies made from the loaded weights) ends where the plain run does."""
    from safetensors.torch import load_file

    kw = dict(train_step="static", precision="bf16", max_steps=20, length_buckets=3, eval_every="8")
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "plain", **kw))
    assert "working_weights" not in capsys.readouterr().err
    from bertkit.training import loop

    real = loop.model_changes  # from here on, as for a GPU's graphed step: `model_changes` told the step is graphed
    monkeypatch.setattr(loop, "model_changes", lambda *args: real(*args[:6], True))
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "working", **kw))
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("training:"))
    assert line.endswith(", bfloat16_working_weights")  # the last of the model changes
    changes = json.loads((tmp_path / "working" / "metrics.json").read_text())["train"]["model_changes"]
    assert changes[-1] == "bfloat16_working_weights"

    def stop(trainer, state):
        if state["global_step"] == 11:
            raise Interrupt

    with pytest.raises(Interrupt):
        fit(tiny_bert, small_config(sst2_dir, tmp_path / "cut", **kw), callbacks=[stop])
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "cut", **kw), resume=True)
    last = "checkpoints/step-0000020/model.safetensors"  # (the run folder has the best model: step 8's maybe)
    plain = load_file(str(tmp_path / "plain" / last))
    for run in ("working", "cut"):
        got = load_file(str(tmp_path / run / last))
        assert got.keys() == plain.keys() and all(torch.equal(got[k], plain[k]) for k in plain), run
    logs = {k: [json.loads(line)["loss"] for line in (tmp_path / k / "train_log.jsonl").read_text().splitlines()]
            for k in ("plain", "working")}
    assert logs["plain"] == logs["working"]
    AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "working"))


def test_working_copies_only_for_a_graphed_bf16_step_without_accumulation(pair, tmp_path):
    from types import SimpleNamespace

    from bertkit.training.changes import model_changes

    _, model = pair
    task = SimpleNamespace(model=model, uses_pooler=True)
    for precision, graphed, accum, want in (("bf16", True, 1, True), ("fp32", True, 1, False),
                                            ("bf16", False, 1, False), ("bf16", True, 2, False)):
        cfg = small_config(tmp_path, tmp_path / "run", fast_dropout=False, keep_heap=False, grad_accum=accum)
        with model_changes(task, cfg, precision=precision, log=pytest.fail, graphed=graphed) as applied:
            assert ("bfloat16_working_weights" in applied) == want, (precision, graphed, accum)


@pytest.mark.usefixtures("cpu_only")  # the stand-in capture on a CPU (the CUDA one: tests/test_gpu.py)
def test_the_graph_layer_with_working_copies_trains_to_the_static_steps_weights(tiny_bert, sst2_dir, tmp_path,
                                                                                 monkeypatch, capsys):
    """The whole-step graph's path (gradients dropped after each step, so the parameters' come new from the working
    copies' each time), replayed by a stand-in capture: the plain static run's weights, bit for bit."""
    from safetensors.torch import load_file

    from bertkit.training import graphed, loop, step

    class ReplayCapture:  # a "graph" that calls the captured function again on its static inputs, as a replay does
        def run(self, fn, *args):
            return fn(*args)

        def __call__(self, fn, inputs):
            return lambda: fn(inputs)

    kw = dict(precision="bf16", batch_size=24, max_steps=20, length_buckets=3, eval_every="100")
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "static", train_step="static", **kw))
    real = loop.model_changes
    monkeypatch.setattr(loop, "model_changes", lambda *args: real(*args[:6], True))
    monkeypatch.setattr(step, "_step_kind", lambda cfg, accelerator, precision: ("graphed", "test"))
    monkeypatch.setattr(graphed, "GraphCapture", ReplayCapture)
    capsys.readouterr()
    _, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "graphed", **kw))
    assert result["train"]["step"]["capture_failed"] is None and result["train"]["step"]["replays"] > 10
    assert "bfloat16_working_weights" in next(x for x in capsys.readouterr().err.splitlines() if "training:" in x)
    a, b = (load_file(str(tmp_path / k / "model.safetensors")) for k in ("static", "graphed"))
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.usefixtures("cpu_only")
def test_with_a_gpus_other_step_changes_the_working_copies_change_no_bit(tiny_bert, sst2_dir, tmp_path, monkeypatch,
                                                                         capsys):
    """What a graphed bf16 run on a GPU combines, forced on a CPU through the stand-in capture: the fused q/k/v
    projection and clipping inside the fused AdamW (every step clipped), with and without the working copies: the
    same weights after 20 steps, bit for bit. (Against the plain static step both of the other two differ by bf16's
    rounding, which 20 steps at a rate of 1e-2 grow to ~1e-2.)"""
    from safetensors.torch import load_file

    from bertkit.training import graphed, loop, step

    class ReplayCapture:
        def run(self, fn, *args):
            return fn(*args)

        def __call__(self, fn, inputs):
            return lambda: fn(inputs)

    real, init = loop.model_changes, graphed.GraphedStep.__init__

    def folding(self, *args, **kw):
        init(self, *args, **kw)
        self.fold_clip = True  # as on CUDA

    monkeypatch.setattr(step, "_step_kind", lambda cfg, accelerator, precision: ("graphed", "test"))
    monkeypatch.setattr(graphed, "GraphCapture", ReplayCapture)
    monkeypatch.setattr(graphed.GraphedStep, "__init__", folding)
    kw = dict(precision="bf16", batch_size=24, max_steps=20, length_buckets=3, eval_every="100", max_grad_norm=0.05)
    for working in (False, True):  # the model changes of a GPU (gpu=True), with the CPU's as well
        monkeypatch.setattr(loop, "model_changes", lambda task, cfg, cpu, precision, log, gpu, graphed, w=working:
                            real(task, cfg, cpu, precision, log, True, w))
        capsys.readouterr()
        fit(tiny_bert, small_config(sst2_dir, tmp_path / str(working), **kw))
        line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("training:"))
        assert line.endswith("fused_qkv" + ", bfloat16_working_weights" * working), line
        clipped = [json.loads(x)["clipped_steps"] for x in (tmp_path / str(working) / "train_log.jsonl").open()]
        assert sum(clipped) == 20
    a, b = (load_file(str(tmp_path / k / "model.safetensors")) for k in ("False", "True"))
    assert all(torch.equal(a[k], b[k]) for k in a)
