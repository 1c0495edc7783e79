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
