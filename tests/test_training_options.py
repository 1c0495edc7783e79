"""Optional training tweaks: frozen word embeddings, a re-initialised pooler, layer-wise learning-rate decay."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from bertkit.config import load_recipe
from bertkit.errors import BertkitError
from bertkit.optim import build_optimizer, reinit_pooler

from .test_contract import fit, small_config

WORDS = "bert.embeddings.word_embeddings.weight"


def test_freeze_word_embeddings_keeps_them_and_trains_the_rest(tiny_bert, sst2_dir, tmp_path):
    before = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2).state_dict()
    adapter, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", freeze_word_embeddings=True, epochs=1))
    after = load_file(str(tmp_path / "run" / "model.safetensors"))
    assert torch.equal(after[WORDS], before[WORDS])
    for key in ("bert.embeddings.position_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight"):
        assert not torch.equal(after[key], before[key])
    assert adapter.model.get_input_embeddings().weight.requires_grad  # unfrozen again for later use


def test_reinit_pooler_is_seeded_and_needs_a_pooler(tiny_bert):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    dense = model.bert.pooler.dense
    torch.nn.init.constant_(dense.weight, 0.5)
    torch.nn.init.constant_(dense.bias, 0.5)
    torch.manual_seed(1)
    reinit_pooler(model)
    first = dense.weight.detach().clone()
    assert dense.bias.abs().sum() == 0
    assert first.std().item() == pytest.approx(model.config.initializer_range, rel=0.2)
    torch.manual_seed(1)
    reinit_pooler(model)
    assert torch.equal(dense.weight, first)
    with pytest.raises(BertkitError, match="no pooler"):
        reinit_pooler(AutoModelForTokenClassification.from_pretrained(tiny_bert, num_labels=3))
    with pytest.raises(BertkitError, match="reinit_pooler' applies to sequence-classification only"):
        load_recipe("conll2003", {"reinit_pooler": True})


def test_layer_lr_decay_groups(tiny_bert, sst2_dir, tmp_path):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    layers = model.config.num_hidden_layers
    lr_of = {}
    for cfg_decay in (1.0, 0.5):
        opt = build_optimizer(model, small_config(sst2_dir, tmp_path, lr=1.0, layer_lr_decay=cfg_decay))
        lr_of[cfg_decay] = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
        assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))
    params = dict(model.named_parameters())
    assert set(lr_of[1.0].values()) == {1.0}
    assert lr_of[0.5][id(params["classifier.weight"])] == 1.0
    assert lr_of[0.5][id(params["bert.pooler.dense.weight"])] == 1.0
    top = f"bert.encoder.layer.{layers - 1}.output.dense.weight"
    assert lr_of[0.5][id(params[top])] == 0.5
    assert lr_of[0.5][id(params["bert.encoder.layer.0.output.dense.weight"])] == 0.5 ** layers
    assert lr_of[0.5][id(params[WORDS])] == 0.5 ** (layers + 1)
    wd = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert wd[id(params["bert.encoder.layer.0.output.dense.bias"])] == 0.0 and wd[id(params[top])] == 0.01


def test_train_log_has_gradient_norms(tiny_bert, sst2_dir, tmp_path):
    import json

    fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", epochs=1))
    rows = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert rows and all(r["grad_norm"] > 0 and 0 <= r["clipped_steps"] <= r["step"] for r in rows)
