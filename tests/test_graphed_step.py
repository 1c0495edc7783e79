"""The graphed training step, checked on a CPU (the capture itself is a thin CUDA layer, tests/test_gpu.py): length
buckets; the static step (what a CUDA graph replays) giving the eager step's weights bit for bit; its tensor
learning rate; the graph layer's bookkeeping with a stand-in capture that calls the step again on its static inputs
(as a replay does); the fallbacks, said on the training line."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from bertkit.buckets import batch_longest, bucket_for, choose_buckets, extra_padding, pad_to_length
from bertkit.graphs import signature

from .conftest import fit, small_config

TINY = dict(max_steps=20, length_buckets=3, eval_every="100")


def weights(run):
    from safetensors.torch import load_file

    return load_file(str(run / "model.safetensors"))


def assert_same_weights(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


# --- buckets --------------------------------------------------------------------------------------------------------
def brute_force(longest, count):
    values = sorted(set(longest))
    best = None
    for k in range(1, min(count, len(values)) + 1):
        for chosen in itertools.combinations(values[:-1], k - 1):
            buckets = [*chosen, values[-1]]
            cost = sum(bucket_for(n, buckets) for n in longest)
            best = cost if best is None else min(best, cost)
    return best


def test_buckets_add_the_fewest_padded_positions():
    rng = random.Random(0)
    for _ in range(40):
        longest = [rng.choice([8, 16, 24, 32, 40, 48, 64, 128]) for _ in range(rng.randint(1, 30))]
        count = rng.randint(1, 4)
        buckets = choose_buckets(longest, count)
        assert len(buckets) <= count and buckets == sorted(set(buckets)) and buckets[-1] == max(longest)
        assert sum(bucket_for(n, buckets) for n in longest) == brute_force(longest, count)
    assert choose_buckets([16, 16, 32], 8) == [16, 32]  # no more buckets than lengths
    assert extra_padding([16, 16, 32], [32]) == pytest.approx(32 * 3 / 64 - 1)
    assert batch_longest([3, 9, 17, 5], [[0, 1], [2, 3]], 8) == [16, 24]


def test_padding_to_a_bucket_keeps_every_target():
    ids = torch.tensor([[101, 7, 102], [101, 102, 0]])  # [batch 2, pieces 3]
    mask = (ids != 0).long()
    single = pad_to_length({"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([1, 0])}, 5, 0,
                           ("labels",))
    assert single["input_ids"].tolist() == [[101, 7, 102, 0, 0], [101, 102, 0, 0, 0]]
    assert single["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert single["labels"].tolist() == [1, 0]
    tags = torch.tensor([[-100, 3, -100], [-100, -100, -100]])
    ner = pad_to_length({"input_ids": ids, "labels": tags}, 4, 0, ("labels",), sequence_labels=True)
    assert ner["labels"].tolist() == [[-100, 3, -100, -100], [-100, -100, -100, -100]]
    multi = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])  # 3 labels per text, as many as the pieces
    assert pad_to_length({"input_ids": ids, "labels": multi}, 4, 0, ("labels",))["labels"] is multi
    choices = ids.unsqueeze(0).repeat(2, 1, 1)  # [batch 2, choices 2, pieces 3]
    mc = pad_to_length({"input_ids": choices, "labels": torch.tensor([0, 1])}, 6, 9, ("labels",))
    assert mc["input_ids"].shape == (2, 2, 6) and mc["input_ids"][0, 0, 3:].tolist() == [9, 9, 9]


# --- the static step: the eager step's weights, bit for bit ---------------------------------------------------------
@pytest.mark.usefixtures("cpu_only")  # bit for bit on a CPU (a GPU's graphed run: tests/test_gpu.py)
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_the_static_step_trains_to_the_eager_steps_weights_bit_for_bit(grad_accum, tiny_bert, sst2_dir, tmp_path):
    """fp32 on a CPU, dropout on, 20 steps over an epoch's end, with the same buckets: the same losses and weights."""
    runs = {}
    for kind in ("eager", "static"):
        runs[kind] = tmp_path / kind
        task, result = fit(tiny_bert, small_config(sst2_dir, runs[kind], train_step=kind, grad_accum=grad_accum,
                                                   batch_size=16 // grad_accum, **TINY))
        assert result["train"]["step"]["kind"] == kind and result["train"]["step"]["buckets"]
        assert result["train"]["examples_seen"] == 20 * 16
    assert_same_weights(runs["eager"], runs["static"])
    logs = [[json.loads(line) for line in (runs[k] / "train_log.jsonl").read_text().splitlines()] for k in runs]
    assert [r["loss"] for r in logs[0]] == [r["loss"] for r in logs[1]]
    assert [r["lr"] for r in logs[0]] == [r["lr"] for r in logs[1]]


@pytest.mark.usefixtures("cpu_only")
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_clipping_folded_into_the_fused_adamw_trains_as_clipping_first(grad_accum, monkeypatch, tiny_bert, sst2_dir,
                                                                        tmp_path):
    """What a CUDA graphed step does (`fold_clipping`), here on a CPU: the gradients divided by max(1, norm / max)
    inside the fused AdamW give clipping's weights up to rounding, every step clipped, the same norms logged."""
    from bertkit.training import step

    assert step.fold_clipping(torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), fused=True))
    assert not step.fold_clipping(torch.optim.AdamW(torch.nn.Linear(2, 2).parameters()))
    results = {}  # kind → the fit's result
    for kind in ("eager", "folded"):
        if kind == "folded":
            monkeypatch.setattr(step.StaticStep, "fold_clip", True)
        _, results[kind] = fit(tiny_bert, small_config(
            sst2_dir, tmp_path / kind, train_step="eager" if kind == "eager" else "static", grad_accum=grad_accum,
            batch_size=16 // grad_accum, max_grad_norm=0.05, **TINY))
    logs = {k: [json.loads(line) for line in (tmp_path / k / "train_log.jsonl").read_text().splitlines()]
            for k in results}
    assert sum(r["clipped_steps"] for r in logs["eager"]) == sum(r["clipped_steps"] for r in logs["folded"]) == 20
    assert [r["grad_norm"] for r in logs["folded"]] == pytest.approx([r["grad_norm"] for r in logs["eager"]],
                                                                     rel=1e-4)
    wa, wb = weights(tmp_path / "eager"), weights(tmp_path / "folded")
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


class Interrupt(Exception):
    pass


@pytest.mark.usefixtures("cpu_only")  # bit for bit on a CPU
def test_a_static_run_resumed_ends_as_the_uninterrupted_one(tiny_bert, sst2_dir, tmp_path):
    """The tensor learning rates go through a checkpoint (the schedule's state as numbers, the optimizer's as it is)
    and come back as tensors on the device."""
    kw = dict(train_step="static", max_steps=20, length_buckets=3, eval_every="8")
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "whole", **kw))

    def stop(trainer, state):
        if state["global_step"] == 11:
            raise Interrupt

    with pytest.raises(Interrupt):
        fit(tiny_bert, small_config(sst2_dir, tmp_path / "cut", **kw), callbacks=[stop])
    task, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "cut", **kw), resume=True)
    assert result["train"]["steps"] == 20
    last = "checkpoints/step-0000020"  # the run folder has the best model, which may be step 8's
    assert_same_weights(tmp_path / "whole" / last, tmp_path / "cut" / last)


def test_the_learning_rate_is_a_device_tensor_the_schedule_fills_in_place():
    from transformers import get_linear_schedule_with_warmup

    from bertkit.training.step import tensor_learning_rates

    weight = torch.nn.Parameter(torch.ones(4))
    optimizer = torch.optim.AdamW([{"params": [weight], "lr": 0.1}], lr=0.1, fused=True)
    schedule = get_linear_schedule_with_warmup(optimizer, 3, 10)
    expected = [0.1 * min(s / 3, (10 - s) / 7) for s in range(1, 10)]
    tensor_learning_rates(optimizer, torch.device("cpu"))
    lr = optimizer.param_groups[0]["lr"]
    for want in expected:
        weight.grad = torch.ones(4)
        optimizer.step()
        schedule.step()
        assert optimizer.param_groups[0]["lr"] is lr  # the tensor a captured step reads, filled in place
        assert lr.item() == want
    tensor_learning_rates(optimizer, torch.device("cpu"))
    assert optimizer.param_groups[0]["lr"] is lr  # already right: left as it is


# --- the graph layer, with a stand-in capture ------------------------------------------------------------------------
class ReplayCapture:
    """A CPU stand-in for GraphCapture: a "graph" that calls the captured function again on its static inputs."""

    captured: list = []  # the captured inputs' names, in order
    warmups: Counter = Counter()  # eager warm-ups per shape (signature), "update" for the update's
    warmups_before: list = []  # a capture's shape's warm-ups before it, in capture order

    def __init__(self):
        pass

    def run(self, fn, *args):
        type(self).warmups[signature(args[0]) if args else "update"] += 1
        return fn(*args)

    def __call__(self, fn, inputs):
        type(self).captured.append(sorted(inputs))
        type(self).warmups_before.append(self.warmups[signature(inputs) if inputs else "update"])
        return lambda: fn(inputs)


class FailingCapture(ReplayCapture):
    """A capture that fails after backward ran under it: as on a GPU, the gradients are then tensors of the graph's
    pool that no kernel ever filled (here: NaN)."""

    def __call__(self, fn, inputs):
        for p in getattr(fn, "__self__", None).trained:
            p.grad = torch.full_like(p, float("nan"))
        raise RuntimeError("operation not permitted when stream is capturing\nmore")


@pytest.fixture
def graphed_on_cpu(monkeypatch):
    from bertkit.training import graphed, step

    def use(capture):  # from here on, runs take the graphed step with `capture`
        monkeypatch.setattr(step, "_step_kind", lambda cfg, accelerator, precision: ("graphed", "test"))
        monkeypatch.setattr(graphed, "GraphCapture", capture)

    ReplayCapture.captured, ReplayCapture.warmups, ReplayCapture.warmups_before = [], Counter(), []
    return use


@pytest.mark.usefixtures("cpu_only")  # the stand-in capture on a CPU (the CUDA one: tests/test_gpu.py)
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_the_graph_layer_replays_the_static_step(grad_accum, graphed_on_cpu, tiny_bert, sst2_dir, tmp_path):
    """Batches of 24: 10 full ones and a short one per epoch (eager); the full ones replay per-bucket graphs on
    copies of their inputs, each holding the whole step (no accumulation) or forward and backward beside one graph
    of the update (accumulation); the weights are the static step's, bit for bit."""
    kw = dict(batch_size=24 // grad_accum, grad_accum=grad_accum, **TINY)
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "static", train_step="static", **kw))
    graphed_on_cpu(ReplayCapture)
    _, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "graphed", **kw))
    step = result["train"]["step"]
    assert step["kind"] == "graphed" and step["capture_failed"] is None
    update_graph = grad_accum > 1  # an update graph has no inputs
    assert ([] in ReplayCapture.captured) == update_graph
    captured_shapes = len(ReplayCapture.captured) - update_graph
    assert 1 <= captured_shapes <= 3  # at most one per bucket
    assert step["graphs"] == captured_shapes + update_graph and step["replays"] > 10
    assert 0 < step["setup_seconds"] < result["train"]["train_seconds"]  # the shapes' warm-ups and captures
    assert 0 <= step["capture_seconds"] <= step["setup_seconds"]  # a stand-in capture takes no time
    warmed = list(zip(ReplayCapture.captured, ReplayCapture.warmups_before, strict=True))
    assert sorted(n for names, n in warmed if names) == [1] * (captured_shapes - 1) + [2]  # 2 for the first shape seen
    assert [n for names, n in warmed if not names] == [2] * update_graph  # and two before the update's
    assert_same_weights(tmp_path / "static", tmp_path / "graphed")


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_only")  # the stand-in capture on a CPU (a GPU's: tests/test_gpu.py)
def test_a_compiled_model_is_graphed_as_it_steps(graphed_on_cpu, tiny_bert, sst2_dir, tmp_path, monkeypatch):
    """--compile on one CUDA device takes the graphed step: a shape's eager warm-up compiles (dynamo's tracing alone
    here, inductor on a GPU: tests/test_gpu.py; dynamic lengths, one compile for the buckets) and its graph holds the
    compiled step; the weights are the static compiled step's, bit for bit."""
    import accelerate.utils

    plugin = accelerate.utils.TorchDynamoPlugin  # eager: dynamo's tracing without inductor's minutes on a CPU
    monkeypatch.setattr(accelerate.utils, "TorchDynamoPlugin", lambda **kw: plugin(**{**kw, "backend": "eager"}))
    kw, counters = dict(batch_size=24, compile=True, **TINY), torch._dynamo.utils.counters
    try:
        fit(tiny_bert, small_config(sst2_dir, tmp_path / "static", train_step="static", **kw))
        graphed_on_cpu(ReplayCapture)
        torch._dynamo.reset()  # (else the graphed run finds the static run's compiled frames)
        counters.clear()
        _, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "graphed", **kw))
        assert counters["frames"]["ok"] > 0  # frames compiled in the graphed run
    finally:
        torch._dynamo.reset()
    step = result["train"]["step"]
    assert step["kind"] == "graphed" and step["capture_failed"] is None and step["replays"] > 10
    assert_same_weights(tmp_path / "static", tmp_path / "graphed")


@pytest.mark.usefixtures("cpu_only")  # the stand-in capture on a CPU
def test_a_failed_capture_goes_on_eagerly_and_says_so(graphed_on_cpu, tiny_bert, sst2_dir, tmp_path, capsys):
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "static", train_step="static", **TINY))
    graphed_on_cpu(FailingCapture)
    _, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "graphed", **TINY))
    assert result["train"]["step"]["capture_failed"].startswith("RuntimeError: operation not permitted")
    assert "CUDA graph capture failed (RuntimeError: operation not permitted when stream is capturing); the step " \
           "runs eagerly from here" in capsys.readouterr().err
    assert_same_weights(tmp_path / "static", tmp_path / "graphed")


# --- fp16's loss scaling ---------------------------------------------------------------------------------------------
OVERFLOWED = (2, 9)  # fp16_training's steps whose loss is infinite


def fp16_training(kind: str, grad_accum: int, fold_clip: bool = False, capture=None):
    """A linear layer trained 16 steps under fp16's dynamic loss scaling with torch's fused AdamW (on a CPU): by the
    static step, the graphed one (with `capture`, a stand-in), or as accelerate trains one (`Accelerator.backward`:
    the loss divided by the accumulation, then GradScaler.scale; `clip_grad_norm_`: GradScaler.unscale_, then torch's
    clipping; `AcceleratedOptimizer.step`: GradScaler.step and update). The steps OVERFLOWED overflow (inputs of
    1e38); the scale starts at 2**16 and grows after 3 finite steps. (weights, the scale after each step, the step)"""
    import contextlib
    from unittest import mock

    from bertkit.training import graphed
    from bertkit.training.step import StaticStep

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=3)
    batches = [torch.randn(4, 8, generator=torch.Generator().manual_seed(i)) for i in range(16 * grad_accum)]
    for step in OVERFLOWED:
        batches[step * grad_accum] *= 1e38  # an infinite loss: every gradient of its step inf or NaN

    def loss_of(model, batch):
        return (model(batch["input_ids"]) ** 2).mean()

    scales, step = [], None
    if kind == "eager":
        for i, x in enumerate(batches):
            scaler.scale(loss_of(model, {"input_ids": x}) / grad_accum).backward()
            if (i + 1) % grad_accum == 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                scales.append(scaler.get_scale())
        return model.state_dict(), scales, step
    accelerator = SimpleNamespace(device=torch.device("cpu"), gradient_accumulation_steps=grad_accum, scaler=scaler)
    task = SimpleNamespace(compute_loss=loss_of)
    with mock.patch.object(graphed, "GraphCapture", capture) if capture else contextlib.nullcontext():
        if kind == "graphed":
            step = graphed.GraphedStep(accelerator, model, optimizer, task, 0.5, batch_size=4, log=print)
        else:
            step = StaticStep(accelerator, model, optimizer, task, 0.5)
        step.fold_clip = fold_clip
        for i, x in enumerate(batches):
            step.backward({"input_ids": x})
            if (i + 1) % grad_accum == 0:
                assert step.update()
                scales.append(scaler.get_scale())
    return model.state_dict(), scales, step


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_fp16_loss_scaling_in_the_static_step_is_accelerates_bit_for_bit(grad_accum):
    """The static step's fp16 loss scaling (what a CUDA graph holds: GradScaler with a fused AdamW reads nothing on
    the host) against accelerate's, on a CPU: the same weights bit for bit and the same scale after every step,
    through two overflowed steps (skipped, the scale halved) and the growth after three finite ones; with clipping
    inside the fused AdamW (a GPU's graphed step), the same weights to rounding. The overflowed steps are counted
    apart from the finite gradient norms the log lines average."""
    eager, eager_scales, _ = fp16_training("eager", grad_accum)
    static, static_scales, step = fp16_training("static", grad_accum)
    assert static_scales == eager_scales
    norms, clipped, finite, nonfinite = step.grad_stats.tolist()  # what the log lines report
    assert (finite, nonfinite) == (16 - len(OVERFLOWED), len(OVERFLOWED)) and 0 < norms < float("inf")
    backed_off = [i for i in range(1, len(eager_scales)) if eager_scales[i] < eager_scales[i - 1]]
    grown = [i for i in range(1, len(eager_scales)) if eager_scales[i] > eager_scales[i - 1]]
    assert backed_off == list(OVERFLOWED) and len(grown) >= 2
    for k in eager:
        assert torch.equal(static[k], eager[k]), k
    folded, folded_scales, _ = fp16_training("static", grad_accum, fold_clip=True)
    assert folded_scales == eager_scales
    for k in eager:
        assert torch.allclose(folded[k], eager[k], rtol=0, atol=1e-6), k


class FailingInUpdate:
    """A capture that fails after GradScaler.unscale_ ran under it (as a host read in AdamW would inside a whole-step
    graph), leaving GradScaler's step half-way."""

    def run(self, fn, *args):
        return fn(*args)

    def __call__(self, fn, inputs):
        step = fn.__self__  # the first capture is a shape's (`GraphedStep._work`), with or without accumulation
        step.scaler.unscale_(step.optimizer)
        raise RuntimeError("operation not permitted when stream is capturing")


@pytest.mark.parametrize("grad_accum", [1, 2])
@pytest.mark.parametrize("capture", [ReplayCapture, FailingInUpdate])
def test_the_graph_layer_replays_fp16_loss_scaling(grad_accum, capture):
    """The graphed step in fp16 through a stand-in capture (a "graph" that calls the step again on its static inputs,
    or one that fails half-way through the update, after which the step goes on eagerly): the static step's weights
    and loss scales, bit for bit."""
    static, static_scales, _ = fp16_training("static", grad_accum)
    ReplayCapture.captured, ReplayCapture.warmups, ReplayCapture.warmups_before = [], Counter(), []
    got, scales, step = fp16_training("graphed", grad_accum, capture=capture)
    assert scales == static_scales
    for k in static:
        assert torch.equal(got[k], static[k]), k
    if capture is ReplayCapture:
        assert step.failed is None and step.replays > 10
    else:
        assert step.failed.startswith("RuntimeError") and step.replays == 0


# --- which step, and why ---------------------------------------------------------------------------------------------
def accelerator(device="cuda", processes=1, kind="NO"):
    return SimpleNamespace(device=torch.device(device), num_processes=processes,
                           distributed_type=SimpleNamespace(name=kind))


@pytest.mark.parametrize("acc, precision, flags, kind, reason", [
    (accelerator(), "bf16", {}, "graphed", "one CUDA device: a CUDA graph per batch shape"),
    (accelerator("cpu"), "bf16", {}, "eager", "no CUDA device (cpu)"),
    (accelerator(processes=2, kind="MULTI_GPU"), "bf16", {}, "eager", "2 processes"),
    (accelerator(kind="FSDP"), "bf16", {}, "eager", "FSDP"),
    (accelerator(), "fp16", {}, "eager", "fp16: its loss scaling is graphed with --train-step graphed"),
    (accelerator(), "fp16", {"train_step": "graphed"}, "graphed", "one CUDA device: a CUDA graph per batch shape"),
    (accelerator(), "bf16", {"peft": "lora"}, "eager", "--peft lora"),
    (accelerator(), "bf16", {"compile": True}, "graphed",
     "one CUDA device: a CUDA graph per batch shape, of regions --compile compiled"),
    (accelerator(processes=2, kind="MULTI_GPU"), "bf16", {"compile": True}, "eager", "2 processes"),
    (accelerator(), "bf16", {"gradient_checkpointing": True}, "eager",
     "gradient checkpointing saves random states on the host"),
    (accelerator("cpu"), "fp32", {"train_step": "graphed"}, "eager", "--train-step graphed, but no CUDA device (cpu)"),
    (accelerator(), "bf16", {"train_step": "eager"}, "eager", "--train-step eager"),
    (accelerator("cpu"), "fp32", {"train_step": "static"}, "static", "--train-step static"),
])
def test_each_run_takes_the_step_it_can_and_says_why(acc, precision, flags, kind, reason, tmp_path):
    from bertkit.training.step import AUTO_BUCKETS, plan_step

    cfg = small_config(tmp_path, tmp_path / "run", **flags)
    lengths = list(range(5, 105))
    batches = [list(range(i, i + 10)) for i in range(0, 100, 10)]
    plan = plan_step(cfg, acc, precision, lengths, batches, 8)
    assert (plan.kind, plan.reason) == (kind, reason)
    bucketed = kind == "graphed" or flags.get("compile")  # where each shape costs a capture or a compile
    assert len(plan.buckets) == (AUTO_BUCKETS if bucketed else 0)
    assert all(b % 8 == 0 for b in plan.buckets)
    two = plan_step(cfg.replace("test", length_buckets=2), acc, precision, lengths, batches, 8)
    assert len(two.buckets) == 2 and two.buckets[-1] == 104 and two.extra_padding > 0


@pytest.mark.usefixtures("cpu_only")  # a CPU's step (eager); one GPU's is graphed
def test_the_training_line_names_the_step_and_its_buckets(tiny_bert, sst2_dir, tmp_path, capsys):
    from bertkit.cli import main

    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--precision", "fp32",
                 "--max-steps", "2", "--length-buckets", "2", "--output-dir", str(tmp_path / "run")]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("training:"))
    assert "; step eager (no CUDA device (cpu)); length buckets " in line and "% padded positions)" in line


def test_a_short_graphed_step_attends_without_cudnn():
    """A graphed step's (or forward's) warm-ups and capture choose attention kernels by its length
    (graphs.attention_for)."""
    from bertkit.graphs import SHORT, attention_for

    before = torch.backends.cuda.cudnn_sdp_enabled()
    with attention_for({"input_ids": torch.zeros(2, 4, SHORT)}):  # [batch, choices, positions]
        assert not torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    for longer in ({"input_ids": torch.zeros(2, SHORT + 1)}, {"x": torch.zeros(2, 8)}):
        with attention_for(longer):
            assert torch.backends.cuda.cudnn_sdp_enabled() == before
