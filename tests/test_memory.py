"""Peak memory per phase: measured (a phase that holds 256 MiB shows it, the next one does not), recorded in every
run's metrics.json and report.md, positive and below what the machine has."""

from __future__ import annotations

import json

import numpy as np
import pytest

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
