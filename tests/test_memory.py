"""Peak memory per phase: measured (a phase that holds 256 MiB shows it, the next one does not), recorded in every
run's metrics.json and report.md, positive and below what the machine has."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.memory import MemoryLog, peak_rss_gib, reset_peak, rss_gib

from .conftest import fit, small_config


def mem_total_gib() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024**2
    raise AssertionError("no MemTotal")


@pytest.mark.skipif(not reset_peak(), reason="the kernel offers no per-phase peak (not Linux)")
def test_each_phase_has_its_own_peak():
    log = MemoryLog()
    with log.phase("quiet"):
        pass
    with log.phase("big"):
        block = np.ones(256 * 1024**2 // 8)  # 256 MiB, touched
        assert rss_gib() >= 0.25
        del block
    with log.phase("after"):
        pass
    phases = log.summary()["phases"]
    assert phases["big"]["peak_rss_gib"] - phases["quiet"]["peak_rss_gib"] >= 0.24
    assert phases["after"]["peak_rss_gib"] < phases["big"]["peak_rss_gib"] - 0.2  # the peak was reset
    assert log.summary()["peak_rss_gib"] == phases["big"]["peak_rss_gib"] and log.summary()["per_phase"]
    assert "(in big)" in log.line()
    assert peak_rss_gib() >= rss_gib() > 0


def test_every_run_records_its_peak_memory_per_phase(tiny_bert, sst2_dir, tmp_path):
    _, result = fit(tiny_bert, small_config(sst2_dir, tmp_path / "run", epochs=1))
    memory = json.loads((tmp_path / "run" / "metrics.json").read_text())["memory"]
    assert memory == result["memory"]
    assert {"encode", "training", "evaluation", "post-processing", "checkpoint", "save"} <= set(memory["phases"])
    assert 0 < memory["peak_rss_gib"] < mem_total_gib()
    assert memory["peak_rss_gib"] == max(p["peak_rss_gib"] for p in memory["phases"].values())
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Memory" in report and "| training |" in report


def test_memory_sizes_parse_and_bad_ones_are_refused():
    from bertkit.errors import BertkitError
    from bertkit.memory import parse_size
    from bertkit.training.budget import divisors

    assert parse_size("8GB") == parse_size("8 GiB") == parse_size("8") == 8 * 2**30
    assert parse_size("512MB") == 2**29 and parse_size("1.5G") == 3 * 2**29
    with pytest.raises(BertkitError, match="'lots' is not a memory size"):
        parse_size("lots")
    assert divisors(32) == [1, 2, 4, 8, 16, 32]


@pytest.mark.usefixtures("cpu_only")  # the resident-memory plan; a GPU plans by its allocated memory (plan_cuda)
def test_a_budget_keeps_the_effective_batch_and_a_run_that_cannot_fit_stops_before_training(tiny_bert, sst2_dir,
                                                                                             tmp_path, capsys):
    from bertkit.cli import main

    args = ["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--precision", "fp32",
            "--batch-size", "8", "--grad-accum", "2", "--max-steps", "4", "--max-length", "32"]
    assert main([*args, "--memory-budget", "16GB", "--output-dir", str(tmp_path / "fits")]) == 0
    plan = json.loads((tmp_path / "fits" / "metrics.json").read_text())["memory"]["budget_plan"]
    assert plan["micro_batch"] * plan["grad_accum"] == 16 and plan["micro_batch"] == 16  # all of it fits
    assert plan["measured_gib"]["16"] < 16
    assert "batch_size: 16\ngrad_accum: 1\n" in (tmp_path / "fits" / "config.yaml").read_text()
    assert "memory budget 16GB: micro-batch 16 × accumulation 1" in capsys.readouterr().err
    assert main([*args, "--memory-budget", "100MB", "--output-dir", str(tmp_path / "too-small")]) == 2
    err = capsys.readouterr().err
    assert "--memory-budget 100MB: the run does not fit; the smallest configuration (micro-batch 1 with gradient " \
           "checkpointing) measured" in err
    assert not (tmp_path / "too-small").exists()


def test_gradient_checkpointing_trains_to_the_same_weights(tiny_bert, sst2_dir, tmp_path):
    from safetensors.torch import load_file

    plain, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "plain", epochs=1))
    checkpointed, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "ckpt", epochs=1, gradient_checkpointing=True))
    assert not any(getattr(m, "gradient_checkpointing", False) for m in checkpointed.model.modules())  # undone
    a, b = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("plain", "ckpt"))
    for k in a:  # the same dropout masks recomputed (the random state is kept), the same arithmetic up to rounding
        assert torch.allclose(a[k], b[k], atol=1e-5), k
