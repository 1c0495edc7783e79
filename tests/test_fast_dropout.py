"""The CPU fast dropout: right drop rate and scale, seeded, and a training pass equal to torch's dropout and attention
given the same masks."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification

from bertkit.cpu import dropout as fd
from bertkit.training.changes import set_dropout


def test_drop_rate_scale_and_expectation():
    torch.manual_seed(0)
    keep, scale = fd.keep_mask((1000, 1000), 0.1, "cpu")
    assert keep.shape == (1000, 1000) and keep.dtype == torch.bool
    assert abs(keep.float().mean().item() - 0.9) < 0.002
    assert scale == pytest.approx(1 / 0.9, rel=1e-4)
    out = fd.drop(torch.ones(1000, 1000), 0.1)
    assert abs(out.mean().item() - 1.0) < 0.003  # inverted dropout keeps the expectation
    values = torch.unique(out).tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(scale)
    x = torch.randn(5, 7)
    assert fd.drop(x, 0.1, training=False) is x and fd.drop(x, 0.0) is x


def test_masks_follow_the_seed():
    torch.manual_seed(3)
    a, _ = fd.keep_mask((17, 5), 0.3, "cpu")  # odd sizes: the last int64 word is only partly used
    torch.manual_seed(3)
    b, _ = fd.keep_mask((17, 5), 0.3, "cpu")
    c, _ = fd.keep_mask((17, 5), 0.3, "cpu")
    assert torch.equal(a, b) and not torch.equal(b, c)


def test_swapped_model_drops_as_torch_does_with_the_same_masks(tiny_bert, tmp_path, monkeypatch):
    """Every nn.Dropout becomes a FastDropout of its rate and attention takes the unfused path; a training forward
    pass draws one mask at each dropout site (embeddings, attention probabilities, two per layer after it, the
    classifier) and equals transformers' own model (nn.Dropout, eager attention) given those same masks."""
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    reference = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2,
                                                                   attn_implementation="eager")
    reference.load_state_dict(model.state_dict())
    for m in (model, reference):  # 8192 of 65536: the fast scale is torch's 1 / (1 - p) exactly
        set_dropout(m, hidden=0.125, attention=0.125)
    ids = torch.randint(1000, 5000, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0  # padding, so the attention mask matters
    rates = {name: m.p for name, m in model.named_modules() if type(m) is nn.Dropout}
    fd.fast_dropout(model)
    assert not any(type(m) is nn.Dropout for m in model.modules())
    assert {name: m.p for name, m in model.named_modules() if type(m) is fd.FastDropout} == rates
    assert model.config._attn_implementation == fd.ATTN
    drawn, keep_mask = [], fd.keep_mask

    def recorded(shape, p, device):
        drawn.append(keep_mask(shape, p, device))
        return drawn[-1]

    monkeypatch.setattr(fd, "keep_mask", recorded)
    dropped = model.train()(input_ids=ids, attention_mask=mask).logits
    sites = 1 + 3 * model.config.num_hidden_layers + 1
    assert len(drawn) == sites and all(not keep.all() and scale == 8 / 7 for keep, scale in drawn)
    replay = iter(drawn)

    def replayed(x, p=0.5, training=True, inplace=False):  # torch's dropout with the fast path's masks, in order
        keep, scale = next(replay)
        assert keep.shape == x.shape and p == 0.125 and training
        return x * (keep.to(x.dtype) * scale)

    monkeypatch.setattr(torch.nn.functional, "dropout", replayed)
    torch.testing.assert_close(dropped, reference.train()(input_ids=ids, attention_mask=mask).logits, atol=1e-5,
                               rtol=1e-5)
    assert next(replay, None) is None
    assert not torch.allclose(dropped, model.eval()(input_ids=ids, attention_mask=mask).logits, atol=1e-3)
    model.save_pretrained(tmp_path / "saved")
    assert fd.ATTN not in (tmp_path / "saved" / "config.json").read_text()
    fd.restore_dropout(model)
    assert not any(type(m) is fd.FastDropout for m in model.modules())
    assert model.config._attn_implementation == "sdpa"
    json.loads((tmp_path / "saved" / "config.json").read_text())


def test_training_really_drops(tiny_bert):
    torch.manual_seed(0)
    model = fd.fast_dropout(AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)).train()
    ids = torch.randint(1000, 5000, (2, 9))
    a, b = model(input_ids=ids).logits, model(input_ids=ids).logits
    assert not torch.allclose(a, b)  # fresh masks each call


def test_cpu_training_attention_is_unfused_even_without_dropout(tiny_bert, monkeypatch):
    """torch's fused SDPA backward is several times slower on short rows (docs/speed.md), so CPU
    training takes the unfused path at attention dropout 0 too; evaluation keeps SDPA."""
    import transformers.integrations.sdpa_attention as sdpa

    model = fd.fast_dropout(AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2))
    set_dropout(model, hidden=0.0, attention=0.0)
    ids = torch.randint(1000, 5000, (2, 9))
    reference = model.eval()(input_ids=ids).logits
    calls = []
    real = sdpa.sdpa_attention_forward
    monkeypatch.setattr(sdpa, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.testing.assert_close(model.train()(input_ids=ids).logits, reference)
    assert calls == []
    model.eval()(input_ids=ids)
    assert calls


@pytest.mark.slow
def test_compiled_fast_dropout_does_not_recompile_per_call(tiny_bert):
    """Counting calls (the check that the patch took effect) must not become a guard of torch.compile: each new count
    failed it, a recompile per call until dynamo's cache limit (then the model ran eagerly). The model's frames are
    compiled by the first call and never again."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert), num_labels=2).train()
    fd.fast_dropout(model)
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter)
    ids = torch.randint(1000, 2000, (2, 7))
    compiled(input_ids=ids)
    first = counter.frame_count
    for _ in range(4):
        compiled(input_ids=ids)
    assert first > 0 and counter.frame_count == first
