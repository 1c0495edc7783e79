"""Scalar mix against a numpy expectation, and the frozen-feature probe end to end on the tiny model."""

import json

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.extract.scalar_mix import ScalarMix

from .conftest import write_conll


def test_scalar_mix_matches_numpy():
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.5)
    layers = np.random.default_rng(0).normal(size=(4, 3, 5)).astype(np.float32)  # [words, layers, H]
    w = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
    expected = 1.5 * (layers * w[None, :, None]).sum(1)
    np.testing.assert_allclose(mix(torch.from_numpy(layers)).detach().numpy(), expected, rtol=1e-5)
    assert sum(mix.normalized_weights()) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def conll(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe") / "conll2003"
    d.mkdir()
    write_conll(d / "train.txt", 96, seed=0, long_every=32)
    write_conll(d / "valid.txt", 32, seed=1, long_every=16)
    (d / "test.txt").write_text((d / "valid.txt").read_text())
    return d


@pytest.mark.parametrize("combine, tagger", [("scalar-mix", "bilstm"), ("concat", "linear")])
def test_probe_trains_on_frozen_features_and_reports_f1(conll, tiny_bert, tmp_path, capsys, combine, tagger):
    out = tmp_path / "probe.json"
    assert main(["probe", "conll2003", "--model", str(tiny_bert), "--data-dir", str(conll), "--layers", "all",
                 "--combine", combine, "--tagger", tagger, "--epochs", "2", "--hidden", "16", "--lr", "1e-2",
                 "--precision", "fp32", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["layers"] == [1, 2] and [h["epoch"] for h in result["history"]] == [1, 2]
    best = result["history"][result["best_epoch"] - 1]  # the epoch kept is the one with the best F1
    assert result["f1"] == best["f1"] == max(h["f1"] for h in result["history"])
    assert (result["precision"], result["recall"]) == (best["precision"], best["recall"])
    p, r = result["precision"], result["recall"]
    assert result["f1"] == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)
    if combine == "scalar-mix":
        assert len(result["layer_weights"]) == 2 and sum(result["layer_weights"]) == pytest.approx(1.0)
        assert result["layer_weights"] == best["layer_weights"]  # the weights of the epoch kept
    else:
        assert result["layer_weights"] is None
    printed = json.loads(capsys.readouterr().out)  # the result without its history
    assert printed == {k: v for k, v in result.items() if k != "history"}


def test_probe_caps_its_training_and_validation_sentences(conll, tiny_bert, capsys):
    assert main(["probe", "conll2003", "--model", str(tiny_bert), "--data-dir", str(conll), "--layers", "all",
                 "--tagger", "linear", "--epochs", "1", "--max-train-samples", "40", "--max-eval-samples", "10"]) == 0
    assert "for 40 + 10 sentences" in capsys.readouterr().err


def test_probe_refuses_a_non_tagging_recipe(tiny_bert, sst2_dir, tmp_path, capsys):
    assert main(["probe", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir)]) == 2
    assert "needs a tagging recipe" in capsys.readouterr().err
    # said before its data is looked for (was: where to find SST-2's data, then this)
    assert main(["probe", "sst2", "--model", str(tiny_bert), "--data-dir", str(tmp_path / "none")]) == 2
    assert "probe needs a tagging recipe (words and their tags); sst2 is a sequence-classification recipe" in \
        capsys.readouterr().err
