"""A model that cannot run under bf16 or fp16 autocast (DeBERTa v1, model type `deberta`, outside the families'
table: its attention adds fp32 biases to bf16 projections and fills the mask with fp32's minimum) is found by one
probe forward before anything is written: `--precision auto` takes fp32 and says why; an asked-for bf16 is one line
and exit 2 (was a traceback at the first training step, config.yaml already written, or midway through predict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.cli import main

from .conftest import on_the_cpu, vocab_path, write_sst2


@pytest.fixture(scope="module")
def tiny_deberta(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide random DeBERTa (v1) with the real uncased WordPiece vocabulary."""
    import torch
    from transformers import BertTokenizerFast, DebertaConfig, DebertaModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-deberta")
    config = DebertaConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=128, type_vocab_size=0,
                           relative_attention=True, pos_att_type=["p2c", "c2p"])
    DebertaModel(config).save_pretrained(path)
    BertTokenizerFast(vocab=str(vocab_path()), do_lower_case=True).save_pretrained(path)
    return path


def test_auto_takes_fp32_and_an_asked_bf16_is_refused(tiny_deberta, tiny_bert):
    from transformers import AutoModel

    from bertkit.device import PrecisionChoice, model_precision
    from bertkit.errors import BertkitError

    deberta, bert = AutoModel.from_pretrained(tiny_deberta), AutoModel.from_pretrained(tiny_bert)
    bf16 = PrecisionChoice("bf16", "native bf16")
    auto = model_precision(bf16, "auto", deberta)
    assert auto.precision == "fp32"
    assert auto.reason.startswith("auto: DebertaModel of transformers ") and "cannot run under bf16 autocast" in \
        auto.reason
    with pytest.raises(BertkitError, match="--precision fp16: DebertaModel .* cannot run under fp16 autocast "
                                           r"\(RuntimeError: .*\); use --precision fp32"):
        model_precision(PrecisionChoice("fp16", "requested"), "fp16", deberta)
    assert model_precision(bf16, "auto", bert) is bf16  # a model of the families' table keeps the choice, unprobed
    bert.forward = None  # (a probe would call it)
    assert model_precision(PrecisionChoice("fp16", "requested"), "fp16", bert).precision == "fp16"
    assert deberta.training is False and bert.training is False  # from_pretrained's eval mode, as it was


def test_finetune_predict_and_extract_say_it_up_front(tiny_deberta, tmp_path, capsys):
    data, out = write_sst2(tmp_path / "sst2", n_train=16, n_dev=8), tmp_path / "run"
    common = ["finetune", "sst2", "--model", str(tiny_deberta), "--data-dir", str(data), "--max-steps", "1",
              "--batch-size", "8", "--max-length", "32"]
    with on_the_cpu():
        assert main([*common, "--precision", "bf16", "--output-dir", str(tmp_path / "bf16")]) == 2
        err = capsys.readouterr().err
        assert "--precision bf16: DebertaForSequenceClassification of transformers" in err
        assert "Traceback" not in err and not (tmp_path / "bf16").exists()  # nothing half-written
        assert main([*common, "--precision", "fp32", "--output-dir", str(out)]) == 0
        capsys.readouterr()
        assert main(["predict", "--model", str(out), "--input", str(data / "dev.tsv"), "--precision", "bf16",
                     "--output", str(tmp_path / "p.jsonl")]) == 2
        assert "cannot run under bf16 autocast" in capsys.readouterr().err
        assert not (tmp_path / "p.jsonl").exists()
        sentences = tmp_path / "s.txt"
        sentences.write_text("the film was good\n")
        assert main(["extract", "--model", str(tiny_deberta), "--input", str(sentences), "--output",
                     str(tmp_path / "x"), "--layers", "last", "--precision", "bf16"]) == 2
        assert "--precision bf16: DebertaModel" in capsys.readouterr().err
        assert main(["extract", "--model", str(tiny_deberta), "--input", str(sentences), "--output",
                     str(tmp_path / "x"), "--layers", "last", "--precision", "auto"]) == 0
