"""Peak memory per phase: measured (a phase that holds 256 MiB shows it, the next one does not), recorded in every
run's metrics.json and report.md, positive and below what the machine has."""

from __future__ import annotations

import json
import mmap
import time
from types import SimpleNamespace

import pytest
import torch

from bertkit.memory import INTERVAL, MemoryLog, peak_rss_gib, reset_peak, rss_gib

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
        # 256 MiB of its own mapping, every page touched, unmapped at the end (freed memory that malloc or numpy keep
        # stays resident, which a process's resident set rightly shows: seen in the suite on the floors)
        block = mmap.mmap(-1, 256 * 1024**2)
        for i in range(0, len(block), mmap.PAGESIZE):
            block[i] = 1
        assert rss_gib() >= 0.25
        time.sleep(40 * INTERVAL)  # held for many samples (a peak shorter than one can be missed, as documented)
        block.close()
    with log.phase("after"):
        pass
    phases = log.summary()["phases"]
    assert phases["big"]["peak_rss_gib"] - phases["quiet"]["peak_rss_gib"] >= 0.24
    assert phases["after"]["peak_rss_gib"] < phases["big"]["peak_rss_gib"] - 0.2  # the peak was reset
    assert log.summary()["peak_rss_gib"] == phases["big"]["peak_rss_gib"] and log.summary()["per_phase"]
    assert "(in big)" in log.line()
    assert peak_rss_gib() >= rss_gib() > 0


def test_a_sample_taken_before_a_reset_does_not_land_after_it(monkeypatch):
    """The sampler read the resident set while a phase's big buffer was alive; the next phase's reset (after the
    buffer is freed) must not be overwritten by that stale sample."""
    import threading

    from bertkit import memory

    sampler = memory._Sampler()  # not started: its sample() is driven here
    reading, reset_done, big, small = threading.Event(), threading.Event(), 3 * 2**30, 2**30

    def rss() -> int:
        if threading.current_thread().name == "stale-sample":
            reading.set()
            reset_done.wait(0.3)  # without the lock the reset lands here, before the stale sample is kept
            return big
        return small

    monkeypatch.setattr(memory, "_rss_bytes", rss)
    reader = threading.Thread(target=sampler.sample, name="stale-sample")
    reader.start()
    assert reading.wait(5)
    resetter = threading.Thread(target=lambda: (sampler.reset(), reset_done.set()))
    resetter.start()
    reader.join(5), resetter.join(5)
    assert sampler.high == small


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
    config = tmp_path / "fits" / "config.yaml"  # as if its probe had chosen 4 × 4: a resume keeps that, unprobed
    config.write_text(config.read_text().replace("batch_size: 16\ngrad_accum: 1\n", "batch_size: 4\ngrad_accum: 4\n"))
    assert main([*args[:-4], "--max-steps", "6", "--max-length", "32", "--memory-budget", "16GB", "--output-dir",
                 str(tmp_path / "fits"), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "memory budget 16GB: the run's own plan, micro-batch 4 × accumulation 4 (resumed: not probed again)" in err
    assert "measured peaks" not in err and "batch_size: 4\ngrad_accum: 4\n" in config.read_text()
    assert main([*args, "--memory-budget", "100MB", "--output-dir", str(tmp_path / "too-small")]) == 2
    err = capsys.readouterr().err
    assert "--memory-budget 100MB: the run does not fit; the smallest configuration (micro-batch 1 with gradient " \
           "checkpointing) measured" in err
    assert "over the 0.09 GiB planned to (95% of the budget: the rest is left for what a probe of two steps does " \
           "not see)" in err  # a measure below the budget given read as a contradiction
    assert not (tmp_path / "too-small").exists()


def test_a_budget_for_a_model_without_checkpointing_plans_without_it(sst2_dir, tmp_path, capsys):
    """MPNet and ALBERT have no gradient checkpointing in transformers: a budget their plain run did not fit stopped
    with 'MPNetForSequenceClassification does not support gradient checkpointing', which the user had not asked for.
    The plan now tries checkpointing only where the model has it, and says so when the run does not fit."""
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    from bertkit.cli import main

    from .conftest import vocab_path

    torch.manual_seed(0)
    model = tmp_path / "tiny-mpnet"
    MPNetModel(MPNetConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=130)).save_pretrained(model)
    specials = dict(bos_token="[CLS]", eos_token="[SEP]", sep_token="[SEP]", cls_token="[CLS]", unk_token="[UNK]",
                    pad_token="[PAD]", mask_token="[MASK]")
    MPNetTokenizerFast(vocab=str(vocab_path()), **specials).save_pretrained(model)
    assert main(["finetune", "sst2", "--model", str(model), "--data-dir", str(sst2_dir), "--precision", "fp32",
                 "--batch-size", "8", "--max-steps", "1", "--max-length", "32", "--memory-budget", "100MB",
                 "--output-dir", str(tmp_path / "too-small")]) == 2
    err = capsys.readouterr().err
    assert "--memory-budget 100MB: the run does not fit; the smallest configuration (micro-batch 1 without gradient " \
           "checkpointing, which MPNetForSequenceClassification does not support) measured" in err
    assert not (tmp_path / "too-small").exists()


@pytest.mark.usefixtures("cpu_only")  # one step path for both (on a GPU the plain run is graphed, this one eager)
def test_gradient_checkpointing_trains_to_the_same_weights(tiny_bert, sst2_dir, tmp_path):
    from safetensors.torch import load_file

    plain, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "plain", epochs=1))
    checkpointed, _ = fit(tiny_bert, small_config(sst2_dir, tmp_path / "ckpt", epochs=1, gradient_checkpointing=True))
    assert not any(getattr(m, "gradient_checkpointing", False) for m in checkpointed.model.modules())  # undone
    a, b = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("plain", "ckpt"))
    for k in a:  # the same dropout masks recomputed (the random state is kept), the same arithmetic up to rounding
        assert torch.allclose(a[k], b[k], atol=1e-5), k


def out_of_memory(_=None):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class FakeGpuMemory:
    """torch.cuda's peak-memory counters for `plan_cuda` on a CPU: each probe (the real step, on the CPU) peaks at
    `base + per_example · micro` bytes, or runs out of memory at `oom_from` examples and more."""

    def __init__(self, monkeypatch, base, per_example, oom_from=None):
        from bertkit.training import budget

        self.peak, self.probed, self.stale = 0, [], []
        real = budget.probe_step

        def probe(task, model, features, micro, precision, checkpointing):
            self.probed.append((micro, checkpointing))
            self.stale.append(any(p.grad is not None for p in model.parameters()))  # a gradient left by the last
            if oom_from is not None and micro >= oom_from:  # out of memory after a backward (gradients made)
                loss = task.compute_loss
                task = SimpleNamespace(collate=task.collate,
                                       compute_loss=lambda m, b: out_of_memory(loss(m, b).backward()))
            real(task, model, features, micro, precision, checkpointing)
            self.peak = base + per_example * micro * (0.5 if checkpointing else 1)

        monkeypatch.setattr(budget, "probe_step", probe)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: self.peak)


@pytest.fixture
def planned(tiny_bert, sst2_dir, tmp_path):
    """(task, features, config of batch 8 × accumulation 2) for `plan_cuda`."""
    from bertkit import SequenceClassification

    cfg = small_config(sst2_dir, tmp_path / "run", batch_size=8, grad_accum=2, max_length=32)
    train, _, names = SequenceClassification.load_data(cfg)
    task = SequenceClassification.from_pretrained(str(tiny_bert), label_names=names)
    return task, task.encode(task.examples(train)), cfg


MIB = 2**20
CPU = torch.device("cpu")  # where the stood-in GPU probes run


@pytest.mark.parametrize("precision, budget_mib, oom_from, micro, accum", [
    ("fp32", None, None, 16, 1),  # all of it fits: accumulation lowered to 1
    ("fp32", 100, 8, 4, 4),  # out of memory at 16 and 8
    ("fp32", 35, None, 2, 8),  # under the budget (with its 95 % margin) from 2 down
])
def test_a_gpu_plan_takes_the_largest_micro_batch_under_the_budget(planned, monkeypatch, precision, budget_mib,
                                                                    oom_from, micro, accum):
    from bertkit.training.budget import MARGIN, plan_cuda

    task, features, cfg = planned
    memory = FakeGpuMemory(monkeypatch, 20 * MIB, 4 * MIB, oom_from)  # micro-batch 16 peaks at 84 MiB
    budget = budget_mib * MIB if budget_mib else 85 * MIB / MARGIN  # fits 16
    new, record = plan_cuda(task, cfg, features, precision, budget, CPU, log=lambda m: None)
    assert (new.batch_size, new.grad_accum) == (record["micro_batch"], record["grad_accum"]) == (micro, accum)
    assert not new.compute.gradient_checkpointing
    assert [m for m, _ in memory.probed] == [16, 8, 4, 2, 1][:[16, 8, 4, 2, 1].index(micro) + 1]
    if oom_from:
        assert record["measured_gib"]["16"] == record["measured_gib"]["8"] == "out of memory"
    assert not any(memory.stale) and all(p.grad is None for p in task.model.parameters())  # none left over


def test_a_gpu_plan_that_cannot_fit_tries_checkpointing_then_stops(planned, monkeypatch):
    from bertkit.errors import BertkitError
    from bertkit.training.budget import plan_cuda

    task, features, cfg = planned
    memory = FakeGpuMemory(monkeypatch, 20 * MIB, 4 * MIB)
    said = (r"--memory-budget 10MB: the run does not fit on the GPU; .*'1c': 0\.021\} at max_length \d+, each over "
            r"the 0\.01 GiB planned to \(95% of the budget\)")
    with pytest.raises(BertkitError, match=said):
        plan_cuda(task, cfg.replace("test", memory_budget="10MB"), features, "fp32", 10 * MIB, CPU,
                  log=lambda m: None)
    assert memory.probed == [(m, c) for c in (False, True) for m in (16, 8, 4, 2, 1)]
    new, _ = plan_cuda(task, cfg, features, "fp32", 24 * MIB, CPU, log=lambda m: None)  # 20 + 4·1/2 = 22 MiB fits
    assert (new.batch_size, new.grad_accum, new.compute.gradient_checkpointing) == (1, 16, True)


def test_an_error_other_than_out_of_memory_is_not_a_plan(planned, monkeypatch):
    from bertkit.training import budget

    task, features, cfg = planned

    def broken(*a):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(budget, "probe_step", broken)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        budget.plan_cuda(task, cfg, features, "fp32", 100 * MIB, CPU, log=lambda m: None)


def test_a_gpu_run_is_planned_on_the_gpu(planned, monkeypatch):
    """The plan follows the accelerator's device, not the model's (still on the CPU before accelerate prepares it)."""
    from bertkit.training import budget

    task, features, cfg = planned
    calls = []
    monkeypatch.setattr(budget, "plan_cuda", lambda *args: calls.append(args[5]) or ("planned", {}))
    cfg = cfg.replace("test", memory_budget="1GB")
    assert budget.plan(task, cfg, features, "fp32", torch.device("cuda", 0), False) == ("planned", {})
    assert calls == [torch.device("cuda", 0)] and next(task.model.parameters()).device.type == "cpu"
