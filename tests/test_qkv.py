"""Query, key and value in one matmul (bertkit/training/qkv.py, a GPU's training change), checked on a CPU: the same
outputs and gradients as the model's three linears, the same parameters, undone on the way out."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from bertkit.training.qkv import CALLS, Projection, fused_qkv


def loss_and_grads(model, ids, mask, labels):
    model.zero_grad()
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture
def pair(tiny_bert):
    torch.manual_seed(0)
    reference = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert), num_labels=2,
                                                                   hidden_dropout_prob=0.0,
                                                                   attention_probs_dropout_prob=0.0).train()
    return reference, copy.deepcopy(reference)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_fused_projection_gives_the_three_linears_outputs_and_gradients(attention, pair):
    reference, model = pair
    ids = torch.randint(1000, 5000, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0  # padding: the mask matters
    labels = torch.tensor([0, 1, 1])
    reference.set_attn_implementation(attention)
    model.set_attn_implementation(attention)
    want_loss, want = loss_and_grads(reference, ids, mask, labels)
    names = list(model.state_dict())
    params = dict(model.named_parameters())
    with fused_qkv(model, log=pytest.fail) as applied:
        assert applied == ["fused_qkv"]
        layers = model.config.num_hidden_layers
        assert sum(isinstance(m, Projection) for m in model.modules()) == 3 * layers
        assert list(model.state_dict()) == names and dict(model.named_parameters()) == params  # the same tensors
        before = CALLS["fused"]
        loss, grads = loss_and_grads(model, ids, mask, labels)
        assert CALLS["fused"] - before == layers  # every layer's projection went through one matmul
    torch.testing.assert_close(loss, want_loss, atol=1e-6, rtol=1e-5)
    assert grads.keys() == want.keys()  # query, key and value each get their own gradient
    for name, grad in want.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)
    assert not any(isinstance(m, Projection) for m in model.modules())  # the model's own linears again
    assert dict(model.named_parameters()) == params


def test_the_linears_come_back_when_training_raises(pair):
    _, model = pair
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    with pytest.raises(RuntimeError, match="stop"), fused_qkv(model) as applied:
        assert applied == ["fused_qkv"]
        raise RuntimeError("stop")
    assert [m for m in model.modules() if isinstance(m, torch.nn.Linear)] == linears


def test_a_projection_called_on_another_input_is_its_own_linear(pair):
    _, model = pair
    attention = model.bert.encoder.layer[0].attention.self
    linear = attention.key
    x, other = torch.randn(2, 4, linear.in_features), torch.randn(2, 4, linear.in_features)
    with fused_qkv(model):
        attention.query(x)
        torch.testing.assert_close(attention.key(other), linear(other))  # not the query's input: no shared part
        torch.testing.assert_close(attention.key(x), linear(x))


def test_a_model_without_bert_attention_is_left_alone(tmp_path):
    from transformers import DistilBertConfig, DistilBertModel

    model = DistilBertModel(DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64))
    with fused_qkv(model, log=pytest.fail) as applied:
        assert applied == []


def test_model_changes_fuse_on_a_gpu_only(pair, tmp_path):
    from types import SimpleNamespace

    from bertkit.training.changes import model_changes

    from .conftest import small_config

    _, model = pair
    task = SimpleNamespace(model=model, uses_pooler=True)
    cfg = small_config(tmp_path, tmp_path / "run", fast_dropout=False)
    for gpu, want in ((True, ["fused_qkv"]), (False, [])):
        with model_changes(task, cfg, cpu=not gpu, gpu=gpu, log=pytest.fail) as applied:
            assert applied == want
    with model_changes(task, small_config(tmp_path, tmp_path / "run", peft="lora"), gpu=True, log=print) as applied:
        assert "fused_qkv" not in applied  # peft wraps the projections itself


def test_under_bf16_autocast_the_loss_is_the_three_linears(pair):
    reference, model = pair
    ids = torch.randint(1000, 5000, (4, 12))
    mask = torch.ones_like(ids)
    labels = torch.tensor([0, 1, 0, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, _ = loss_and_grads(reference, ids, mask, labels)
        with fused_qkv(model):
            loss, grads = loss_and_grads(model, ids, mask, labels)
    torch.testing.assert_close(loss, want, atol=1e-2, rtol=1e-2)  # bf16: one matmul's rounding, not three's
    assert all(g.dtype == torch.float32 for g in grads.values())


@pytest.mark.usefixtures("cpu_only")  # on a GPU the plain run would have the change too
def test_a_run_with_the_fused_projection_trains_as_one_without(monkeypatch, tiny_bert, sst2_dir, tmp_path, capsys):
    """A GPU run's change, forced on a CPU run: 20 steps end at the plain run's weights up to rounding; the saved
    model has the checkpoint's own names (plain `AutoModel...` loads it); the training line names the change."""
    from safetensors.torch import load_file

    from bertkit.training import loop

    from .conftest import fit, small_config

    kw = dict(max_steps=20, eval_every="10", fast_dropout=False)
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "plain", **kw))
    real = loop.model_changes
    monkeypatch.setattr(loop, "model_changes", lambda *args: real(*args[:5], True))
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "fused", **kw))
    assert "model changes: fused_qkv" in capsys.readouterr().err
    a, b = (load_file(str(tmp_path / k / "model.safetensors")) for k in ("plain", "fused"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
    AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "fused"))
