"""Scalar mix against a numpy expectation, and the frozen-feature probe end to end on the tiny model."""

import json

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.extract.scalar_mix import ScalarMix

from .test_ner import write_conll


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
    assert 0 <= result["f1"] <= 1 and result["layers"] == [1, 2] and len(result["history"]) == 2
    if combine == "scalar-mix":
        assert len(result["layer_weights"]) == 2 and sum(result["layer_weights"]) == pytest.approx(1.0)
    else:
        assert result["layer_weights"] is None
    assert '"f1"' in capsys.readouterr().out


def test_probe_refuses_a_non_tagging_recipe(tiny_bert, capsys):
    assert main(["probe", "sst2", "--model", str(tiny_bert)]) == 2
    assert "needs a tagging recipe" in capsys.readouterr().err
