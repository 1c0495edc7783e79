"""The contract every task passes: train a few steps → save → load with plain transformers → same predictions;
and resume after an interruption ends exactly like an uninterrupted run."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from .conftest import fit, small_config

TEXTS = ["the film was wonderful and funny", "a dull , tedious plot", "null", "its cast is really superb"]


def test_train_save_load_with_plain_transformers(tiny_bert, sst2_dir, tmp_path):
    task, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run"))
    assert result["dev"]["accuracy"] >= 0.75  # the tiny model learns the sentiment words
    ours = task.predict_rows([{"text": t} for t in TEXTS], probs=True)

    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run").eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "run")
    assert model.config.id2label == {0: "negative", 1: "positive"}
    with torch.no_grad():
        probs = model(**tok(TEXTS, padding=True, return_tensors="pt")).logits.softmax(-1).numpy()
    for p, o in zip(probs, ours, strict=True):
        assert o["label"] == model.config.id2label[int(p.argmax())]
        np.testing.assert_allclose([o["probabilities"]["negative"], o["probabilities"]["positive"]], p, atol=1e-5)
    assert (tmp_path / "run" / "model.safetensors").is_file() and not list((tmp_path / "run").glob("*.bin"))


class Interrupt(Exception):
    pass


def test_resume_after_interruption_equals_uninterrupted_run(tiny_bert, sst2_dir, tmp_path, capsys):
    # 256 examples / 16 = 16 steps per epoch, 32 steps; checkpoints every 5 steps and at evaluations (every 8)
    _, full = fit(tiny_bert, small_config(sst2_dir, tmp_path / "full", save_every=5))

    def stop_at_13(trainer, state):  # mid-epoch, three steps after the checkpoint of step 10
        if state["global_step"] == 13:
            raise Interrupt

    cfg = small_config(sst2_dir, tmp_path / "cut", save_every=5)
    with pytest.raises(Interrupt):
        fit(tiny_bert, cfg, callbacks=[stop_at_13])
    assert (tmp_path / "cut" / "checkpoints" / "latest").read_text().strip() == "step-0000010"
    capsys.readouterr()
    _, resumed = fit(tiny_bert, cfg, resume=True)
    err = capsys.readouterr().err
    assert "resumed from" in err and "step-0000010" in err  # it did resume: the run went on from step 10

    assert resumed["dev"] == full["dev"] and resumed["best_step"] == full["best_step"]
    a, b = load_file(tmp_path / "full" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    logs = [(tmp_path / d / "eval_metrics.jsonl").read_text() for d in ("full", "cut")]
    assert logs[0] == logs[1]  # no duplicated or missing evaluation lines after the resume
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text())["train"]["steps"] == 32


def test_early_stopping_stops_after_evaluations_without_improvement(tiny_bert, sst2_dir, tmp_path):
    # lr 0: the metric cannot improve after the first evaluation, so patience 2 stops at the third (step 12)
    _, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", lr=0.0, eval_every="4", early_stopping=2))
    evals = (tmp_path / "run" / "eval_metrics.jsonl").read_text().splitlines()
    assert result["train"]["steps"] == 12 and len(evals) == 3 and result["best_step"] == 4
