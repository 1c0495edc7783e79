"""`precast`: linear weights cast to bf16 once for inference; the same outputs as autocast's casting at every call,
tied and non-linear weights left alone, and everything put back where the check fails."""

import copy

import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

from bertkit.device import autocast
from bertkit.precast import precast

CPU = torch.device("cpu")


def tiny(cls=BertForSequenceClassification):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=3)
    return cls(config).eval()


def logits(model, precision="bf16"):
    ids = torch.randint(1, 120, (4, 11), generator=torch.Generator().manual_seed(1))  # [4, 11]
    with torch.no_grad(), autocast(precision, CPU):
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()


def test_same_outputs_with_weights_cast_once():
    model, reference = tiny(), tiny()
    n = precast(model, "bf16")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert n == len(linears) > 0
    assert all(m.weight.dtype == torch.bfloat16 and m.bias.dtype == torch.bfloat16 for m in linears)
    assert model.bert.embeddings.word_embeddings.weight.dtype == torch.float32
    assert model.bert.embeddings.LayerNorm.weight.dtype == torch.float32
    assert torch.equal(logits(model), logits(reference))


def test_fp32_and_training_models_untouched():
    model = tiny()
    assert precast(model, "fp32") == 0
    model.train()
    assert precast(model, "bf16") == 0
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_tied_decoder_stays_with_its_embedding():
    model = tiny(BertForMaskedLM)
    decoder = model.cls.predictions.decoder
    assert decoder.weight is model.bert.embeddings.word_embeddings.weight  # tied
    assert precast(model, "bf16") > 0
    assert decoder.weight.dtype == torch.float32 and decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.bert.encoder.layer[0].attention.self.query.weight.dtype == torch.bfloat16


def test_put_back_where_outputs_change(caplog):
    model = tiny()
    reference = copy.deepcopy(model)
    query = model.bert.encoder.layer[0].attention.self.query

    def reads_dtype(module, args, output):  # a family whose code depends on its weights' dtype
        return output + float(query.weight.dtype == torch.bfloat16)

    model.bert.encoder.layer[0].output.register_forward_hook(reads_dtype)
    assert precast(model, "bf16") == 0
    assert "left in fp32" in caplog.text and "outputs changed" in caplog.text
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert torch.equal(logits(model), logits(reference))


def _packs() -> bool:
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def logits_of_shapes(model):
    """Logits on batches of several shapes: oneDNN picks its kernels by the number of rows."""
    g = torch.Generator().manual_seed(2)
    out = []
    for batch, length in ((1, 3), (5, 17), (17, 40), (64, 9)):
        ids = torch.randint(1, 120, (batch, length), generator=g)  # [batch, length]
        with torch.no_grad(), autocast("bf16", CPU):
            out.append(model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float())
    return out


def test_packed_for_onednn_same_outputs():
    if not _packs():
        import pytest

        pytest.skip("this torch has no oneDNN bf16 linear")
    from bertkit import precast as module

    model, plain, reference = tiny(), tiny(), tiny()
    precast(plain, "bf16", pack=False)
    calls = module.PACKED_CALLS[0]
    assert precast(model, "bf16") > 0
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(hasattr(m, "_bertkit_packed") for m in linears)
    assert not any(hasattr(m, "_bertkit_packed") for m in plain.modules())
    assert module.PACKED_CALLS[0] > calls  # the check's forward passes ran the packed layers
    calls = module.PACKED_CALLS[0]
    for a, b, c in zip(logits_of_shapes(model), logits_of_shapes(plain), logits_of_shapes(reference), strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert module.PACKED_CALLS[0] > calls
    # with gradients on (training, a probe), a packed layer runs nn.Linear's own forward
    layer = linears[0]
    x = torch.randn(2, layer.in_features, dtype=torch.bfloat16)
    calls = module.PACKED_CALLS[0]
    assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert module.PACKED_CALLS[0] == calls


def test_packing_undone_where_outputs_change(monkeypatch, caplog):
    if not _packs():
        import pytest

        pytest.skip("this torch has no oneDNN bf16 linear")
    import logging

    from bertkit import precast as module

    packed_forward = module._packed_forward
    monkeypatch.setattr(module, "_packed_forward", lambda self, x: packed_forward(self, x) + 1e-2)
    model, reference = tiny(), tiny()
    with caplog.at_level(logging.INFO, logger="bertkit.precast"):
        assert precast(model, "bf16") > 0  # still cast once: that part changed nothing
    assert "not laid out for oneDNN" in caplog.text
    assert not any(hasattr(m, "_bertkit_packed") or "forward" in vars(m) for m in model.modules())
    assert torch.equal(logits(model), logits(reference))
