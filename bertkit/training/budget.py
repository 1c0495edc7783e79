"""`--memory-budget 8GB`: choose micro-batch, gradient accumulation and checkpointing so that a run fits, keeping the
effective batch the recipe asks for (micro-batch × accumulation = batch_size × grad_accum).

On a CPU there is no out-of-memory exception (the kernel kills the process), so the plan is made before training,
from a short measured probe in this process: training steps on the longest training examples, on a copy of the
model, whose peak resident set is read per step (`bertkit.memory`). Probes go from small to large (memory freed by
a smaller one is reused by the next, so each peak is the step's own need), and a micro-batch is probed only when
the line through the smaller ones predicts it fits:

    peak(b) ≈ peak(b1) + (b − b1) · per-example cost, measured at two small micro-batches b1 < b2

The largest micro-batch that divides the effective batch and measures under the budget (with a 5 % margin) is
chosen; without checkpointing first, then with it. A run that cannot fit even one example per step with
checkpointing stops before training (exit 2) with that configuration's measured need. On a GPU accelerate's
`find_executable_batch_size` halves the micro-batch from the recipe's until a probe step does not run out of memory
and stays under the budget (peak allocated by torch).
"""

from __future__ import annotations

import copy
import time
from types import SimpleNamespace

import torch

from ..errors import BertkitError
from ..memory import GIB, parse_size, peak_rss_gib, reset_peak

MARGIN = 0.95  # plan to at most this share of the budget


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def probe_step(task, model, features, micro: int, precision: str, checkpointing: bool) -> float:
    """Peak resident GiB of two training steps (forward, backward, AdamW) of `model` on the `micro` longest
    features; the model's own weights are a copy's, so the run's model is untouched."""
    from ..device import autocast
    from .changes import disable_checkpointing, enable_checkpointing

    lengths = features["length"][:]
    longest = sorted(range(len(lengths)), key=lambda i: -lengths[i])[:micro]
    rows = [features[i] for i in longest]
    batch = task.collate(rows)
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0)
    if checkpointing:
        enable_checkpointing(model)
    try:
        model.train()
        reset_peak()
        for _ in range(2):
            with autocast(precision, device):
                loss = task.compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return peak_rss_gib()
    finally:
        if checkpointing:
            disable_checkpointing(model)
        del optimizer


def plan(task, cfg, features, precision: str, cpu: bool, log=print):
    """(the config to train with, what was measured): micro-batch, accumulation and checkpointing that fit
    `cfg.compute.memory_budget`, or BertkitError before training. The probe draws no number from the run's random
    generators, and trains a copy of the model with the run's model changes (CPU speed-ups included), not the model."""
    from .changes import model_changes

    budget = parse_size(cfg.compute.memory_budget)
    if torch.cuda.is_available() and next(task.model.parameters()).is_cuda:
        with torch.random.fork_rng():
            return plan_cuda(task, cfg, features, precision, budget, log)
    effective = cfg.batch_size * cfg.grad_accum
    sizes = divisors(effective)
    limit = budget / GIB * MARGIN
    measured: dict[str, float] = {}
    t0 = time.perf_counter()
    probe = SimpleNamespace(model=copy.deepcopy(task.model), uses_pooler=task.uses_pooler)  # the changes' view
    as_trained = cfg.replace("--memory-budget", reinit_pooler=False, gradient_checkpointing=False)
    chosen = None
    with torch.random.fork_rng(devices=[]), model_changes(probe, as_trained, cpu, precision, lambda m: None):
        for checkpointing in ([True] if cfg.compute.gradient_checkpointing else [False, True]):
            chosen = _largest_fitting(task, probe.model, features, sizes, precision, checkpointing, limit, measured)
            if chosen is not None:
                break
    del probe
    seconds = time.perf_counter() - t0
    if chosen is None:
        need = measured.get("1c", min(measured.values(), default=float("nan")))
        raise BertkitError(f"--memory-budget {cfg.compute.memory_budget}: the run does not fit; the smallest "
                           f"configuration (micro-batch 1 with gradient checkpointing) measured {need:.2f} GiB "
                           f"resident at max_length {cfg.max_length}")
    micro, checkpointing = chosen
    log(f"memory budget {cfg.compute.memory_budget}: micro-batch {micro} × accumulation {effective // micro}"
        f"{' with gradient checkpointing' if checkpointing else ''} (effective batch {effective}); measured peaks "
        + ", ".join(f"{k} {v:.2f} GiB" for k, v in measured.items()) + f" in a {seconds:.0f} s probe")
    new = cfg.replace("--memory-budget", batch_size=micro, grad_accum=effective // micro,
                      gradient_checkpointing=checkpointing)
    return new, {"micro_batch": micro, "grad_accum": effective // micro, "gradient_checkpointing": checkpointing,
                 "measured_gib": measured, "probe_seconds": round(seconds, 1)}


def _largest_fitting(task, model, features, sizes, precision, checkpointing, limit, measured):
    """(micro-batch, checkpointing) of the largest size in `sizes` measured under `limit` GiB, or None."""
    key = "c" if checkpointing else ""
    points = []
    for b in sizes[:2]:
        peak = probe_step(task, model, features, b, precision, checkpointing)
        measured[f"{b}{key}"] = peak
        points.append((b, peak))
        if peak > limit:
            return None if b == sizes[0] else (sizes[0], checkpointing)
    if len(points) < 2:
        return (points[0][0], checkpointing)
    (b1, p1), (b2, p2) = points
    slope = max((p2 - p1) / (b2 - b1), 0.0)
    best = b2
    for b in sizes[2:]:
        if p1 + (b - b1) * slope > limit:  # predicted not to fit: not probed (a CPU process would be killed)
            break
        peak = probe_step(task, model, features, b, precision, checkpointing)
        measured[f"{b}{key}"] = peak
        if peak > limit:
            break
        best = b
    return (best, checkpointing)


def plan_cuda(task, cfg, features, precision: str, budget: int, log=print):
    """On a GPU: accelerate's `find_executable_batch_size` from the recipe's micro-batch down, each size probed for
    an out-of-memory error and against the budget (torch's peak allocated memory)."""
    from accelerate.utils import find_executable_batch_size

    effective = cfg.batch_size * cfg.grad_accum
    measured = {}

    @find_executable_batch_size(starting_batch_size=cfg.batch_size)
    def fits(micro):
        while effective % micro:
            micro -= 1
        torch.cuda.reset_peak_memory_stats()
        probe_step(task, task.model, features, micro, precision, cfg.compute.gradient_checkpointing)
        peak = torch.cuda.max_memory_allocated()
        measured[str(micro)] = round(peak / GIB, 3)
        if peak > budget * MARGIN:
            raise torch.cuda.OutOfMemoryError(f"{peak / GIB:.2f} GiB over the budget")  # halves and tries again
        return micro

    micro = fits()
    log(f"memory budget {cfg.compute.memory_budget}: micro-batch {micro} × accumulation {effective // micro} "
        f"(effective batch {effective}); measured GPU peaks {measured}")
    return cfg.replace("--memory-budget", batch_size=micro, grad_accum=effective // micro), {
        "micro_batch": micro, "grad_accum": effective // micro, "measured_gib": measured}
