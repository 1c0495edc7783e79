"""The CPU fast dropout: right drop rate and scale, seeded, and attention identical to SDPA when nothing drops."""

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


def test_swapped_model_matches_sdpa_when_nothing_drops(tiny_bert, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    ids = torch.randint(1000, 5000, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0  # padding, so the attention mask matters
    model.eval()
    reference = model(input_ids=ids, attention_mask=mask).logits
    fd.fast_dropout(model)
    assert not any(type(m) is nn.Dropout for m in model.modules())
    assert model.config._attn_implementation == fd.ATTN
    monkeypatch.setattr(fd, "keep_mask", lambda shape, p, device: (torch.ones(shape, dtype=torch.bool), 1.0))
    model.train()  # training path: our attention with the (all-keep) mask
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).logits, reference, atol=1e-5, rtol=1e-5)
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
