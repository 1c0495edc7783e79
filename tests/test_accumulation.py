"""Gradient accumulation is the run's, however it was set: every optimiser step trains on exactly the effective batch
(micro-batch × accumulation), so `examples_seen` = steps × effective batch."""

from __future__ import annotations

import json

import pytest

from .conftest import fit, small_config

STEPS = 3


def metrics(run) -> dict:
    return json.loads((run / "metrics.json").read_text())["train"]


@pytest.mark.usefixtures("cpu_only")  # the budget's plans are the CPU's (resident memory); a GPU's is plan_cuda
@pytest.mark.parametrize("flags, micro, accum", [
    (["--batch-size", "8", "--grad-accum", "2"], 8, 2),  # the flag (a recipe's `grad_accum` is the same field)
    (["--batch-size", "8", "--grad-accum", "2", "--memory-budget", "16GB"], 16, 1),  # a plan that lowers it
    (["--batch-size", "16", "--memory-budget", "16GB", "plan 4"], 4, 4),  # a plan that raises it
])
def test_every_step_trains_the_effective_batch(flags, micro, accum, tiny_bert, sst2_dir, tmp_path, monkeypatch):
    from bertkit.cli import main
    from bertkit.training import budget

    if "plan 4" in flags:  # the probe finds that only micro-batches of 4 fit
        flags = [f for f in flags if f != "plan 4"]
        monkeypatch.setattr(budget, "_largest_fitting", lambda task, model, features, sizes, *a: (4, False))
    out = tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--precision", "fp32",
                 "--max-steps", str(STEPS), "--max-length", "32", *flags, "--output-dir", str(out)]) == 0
    train = metrics(out)
    assert train["steps"] == STEPS and train["examples_seen"] == STEPS * micro * accum
    assert f"batch_size: {micro}\ngrad_accum: {accum}\n" in (out / "config.yaml").read_text()


def test_a_given_accelerator_accumulates_the_runs_count(tiny_bert, sst2_dir, tmp_path):
    from accelerate import Accelerator

    from bertkit import SequenceClassification, Trainer

    cfg = small_config(sst2_dir, tmp_path / "run", batch_size=8, grad_accum=2, max_steps=STEPS)
    train, evals, names = SequenceClassification.load_data(cfg)
    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=names)
    result = Trainer(task, cfg, accelerator=Accelerator(gradient_accumulation_steps=1)).fit(train, evals)
    assert result["train"]["steps"] == STEPS and result["train"]["examples_seen"] == STEPS * 16


@pytest.mark.usefixtures("cpu_only")  # to 1e-5 on the CPU; the GPU's graphed accumulation: tests/test_gpu.py
def test_accumulated_steps_match_one_big_batch(tiny_bert, sst2_dir, tmp_path):
    """Two micro-batches of 8 accumulated give the weights one batch of 16 gives (up to rounding): the loss of each
    micro-batch is divided by the accumulation count."""
    import torch
    from safetensors.torch import load_file

    kw = dict(max_steps=STEPS, dropout=0.0, attention_dropout=0.0, eval_every="100", group_by_length=False)
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "big", batch_size=16, **kw))
    fit(tiny_bert, small_config(sst2_dir, tmp_path / "acc", batch_size=8, grad_accum=2, **kw))
    big, acc = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("big", "acc"))
    for k in big:
        assert torch.allclose(big[k], acc[k], atol=1e-5), k
