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
checkpointing stops before training (exit 2) with that configuration's measured need. On a GPU the micro-batches are
probed from the largest down (an out-of-memory error there is an exception, not a killed process) against torch's
peak allocated memory (`plan_cuda`).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from ..errors import BertkitError
from ..memory import GIB, parse_size, peak_rss_gib, reset_peak

MARGIN = 0.95  # plan to at most this share of the budget


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def probe_step(task, model, features, micro: int, precision: str, checkpointing: bool) -> float:
    """Peak resident GiB of two training steps (forward, backward, AdamW at a rate of 0) of `model` on the `micro`
    longest features: a copy of the run's model on a CPU, the run's model on a GPU (left as it was: its weights by the
    rate, its gradients dropped however the probe ends)."""
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
        model.zero_grad(set_to_none=True)  # also after an out-of-memory error part way (a GPU's probe)
        if checkpointing:
            disable_checkpointing(model)
        del optimizer


def agreed_plan(state, *args, **kw):
    """`plan(*args, **kw)` in every process, then the main process's plan (or its error) taken by all: processes whose
    probes measured differently would otherwise train different micro-batches (the same effective batch and steps,
    but data sharded by different batch sizes, and the resolved config true of the main process only). A collective:
    every process calls it."""
    from . import launch

    try:
        result = plan(*args, **kw)
    except BertkitError as e:
        result = e
    result = launch.main_value(state, result)
    if isinstance(result, BertkitError):
        raise result
    return result


def kept_plan(recorded: Path, cfg, log=print):
    """On --resume: the micro-batch, accumulation and checkpointing the run's config.yaml records (for the same
    budget and effective batch), or None. A probe measures near the budget's edge, so two probes may choose
    differently, and a resumed run must take its batches as it began (it probed again until 2026-11-30)."""
    from ..utils import load_yaml

    try:
        old = load_yaml(recorded) if recorded.is_file() else None
    except BertkitError:
        return None
    compute = old.get("compute") if isinstance(old, dict) else None
    if not isinstance(compute, dict) or compute.get("memory_budget") != cfg.compute.memory_budget:
        return None
    micro, accumulation = old.get("batch_size"), old.get("grad_accum")
    if type(micro) is not int or type(accumulation) is not int or micro < 1 or accumulation < 1 \
            or micro * accumulation != cfg.batch_size * cfg.grad_accum:
        return None
    checkpointing = compute.get("gradient_checkpointing") is True
    log(f"memory budget {cfg.compute.memory_budget}: the run's own plan, micro-batch {micro} × accumulation "
        f"{accumulation}{' with gradient checkpointing' if checkpointing else ''} (resumed: not probed again)")
    return (cfg.replace("--memory-budget", batch_size=micro, grad_accum=accumulation,
                        gradient_checkpointing=checkpointing),
            {"kept_on_resume": True, "micro_batch": micro, "grad_accum": accumulation,
             "gradient_checkpointing": checkpointing})


def plan(task, cfg, features, precision: str, device: torch.device, cpu: bool, log=print):
    """(the config to train with, what was measured): micro-batch, accumulation and checkpointing that fit
    `cfg.compute.memory_budget` on `device` (the accelerator's: the model is still on the CPU before accelerate
    prepares it), or BertkitError before training. The probe draws no number from the run's random generators; on a
    CPU it trains a copy of the model with the run's model changes (CPU speed-ups included), not the model."""
    from .changes import model_changes

    budget = parse_size(cfg.compute.memory_budget)
    if device.type == "cuda":
        with torch.random.fork_rng():
            return plan_cuda(task, cfg, features, precision, budget, device, log)
    effective = cfg.batch_size * cfg.grad_accum
    sizes = divisors(effective)
    limit = budget / GIB * MARGIN
    measured: dict[str, float] = {}
    t0 = time.perf_counter()
    probe = SimpleNamespace(model=copy.deepcopy(task.model), uses_pooler=task.uses_pooler)  # the changes' view
    as_trained = cfg.replace("--memory-budget", reinit_pooler=False, gradient_checkpointing=False)
    chosen, supported = None, getattr(task.model, "supports_gradient_checkpointing", False)
    # checkpointing where asked for (`enable_checkpointing` names a model without it), else where the model has it
    tries = [True] if cfg.compute.gradient_checkpointing else [False, True] if supported else [False]
    with torch.random.fork_rng(devices=[]), model_changes(probe, as_trained, cpu, precision, lambda m: None):
        for checkpointing in tries:
            chosen = _largest_fitting(task, probe.model, features, sizes, precision, checkpointing, limit, measured)
            if chosen is not None:
                break
    del probe
    seconds = time.perf_counter() - t0
    if chosen is None:
        need = measured.get("1c", min(measured.values(), default=float("nan")))
        smallest = "with gradient checkpointing" if tries[-1] else \
            f"without gradient checkpointing, which {type(task.model).__name__} does not support"
        raise BertkitError(f"--memory-budget {cfg.compute.memory_budget}: the run does not fit; the smallest "
                           f"configuration (micro-batch 1 {smallest}) measured {need:.2f} GiB "
                           f"resident at max_length {cfg.max_length}, over the {limit:.2f} GiB planned to "
                           f"({MARGIN:.0%} of the budget: the rest is left for what a probe of two steps does not "
                           "see)")
    micro, checkpointing = chosen
    log(f"memory budget {cfg.compute.memory_budget}: micro-batch {micro} × accumulation {effective // micro}"
        f"{' with gradient checkpointing' if checkpointing else ''} (effective batch {effective}); measured peaks "
        + ", ".join(f"{k} {v:.2f} GiB" for k, v in measured.items()) + f" in a {seconds:.0f} s probe")
    new = cfg.replace("--memory-budget", batch_size=micro, grad_accum=effective // micro,
                      gradient_checkpointing=checkpointing)
    return new, {"device": "cpu", "micro_batch": micro, "grad_accum": effective // micro,
                 "gradient_checkpointing": checkpointing, "measured_gib": measured, "probe_seconds": round(seconds, 1)}


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


def plan_cuda(task, cfg, features, precision: str, budget: int, device: torch.device, log=print):
    """On a GPU: the micro-batches that divide the effective batch, largest first (without gradient checkpointing,
    then with it), each probed on the run's model, moved to `device`; the first whose step neither runs out of memory
    (accelerate's `should_reduce_batch_size` knows the error, `clear_device_cache` frees what it left) nor peaks over
    the budget (torch's peak allocated memory) is chosen; none: BertkitError before training."""
    from accelerate.utils.memory import clear_device_cache

    home = next(task.model.parameters()).device  # the CPU: accelerate's `prepare` moves the model later
    task.model.to(device)
    try:
        return _plan_cuda(task, cfg, features, precision, budget, log)
    finally:  # back where it was: the model changes then draw from the CPU's generator, as without a budget
        task.model.to(home)
        clear_device_cache(garbage_collection=True)


def _plan_cuda(task, cfg, features, precision: str, budget: int, log):
    from accelerate.utils.memory import clear_device_cache, should_reduce_batch_size

    effective = cfg.batch_size * cfg.grad_accum
    limit = budget * MARGIN
    measured: dict[str, float | str] = {}
    for checkpointing in ([True] if cfg.compute.gradient_checkpointing else [False, True]):
        key = "c" if checkpointing else ""
        for micro in reversed(divisors(effective)):
            clear_device_cache(garbage_collection=True)
            torch.cuda.reset_peak_memory_stats()
            try:
                probe_step(task, task.model, features, micro, precision, checkpointing)
            except Exception as e:  # out of memory: the next smaller micro-batch
                if not should_reduce_batch_size(e):
                    raise
                measured[f"{micro}{key}"] = "out of memory"
                continue
            peak = torch.cuda.max_memory_allocated()
            measured[f"{micro}{key}"] = round(peak / GIB, 3)
            if peak <= limit:
                log(f"memory budget {cfg.compute.memory_budget}: micro-batch {micro} × accumulation "
                    f"{effective // micro}{' with gradient checkpointing' if checkpointing else ''} (effective batch "
                    f"{effective}); measured GPU peaks {measured}")
                new = cfg.replace("--memory-budget", batch_size=micro, grad_accum=effective // micro,
                                  gradient_checkpointing=checkpointing)
                return new, {"device": "cuda", "micro_batch": micro, "grad_accum": effective // micro,
                             "gradient_checkpointing": checkpointing, "measured_gib": measured}
    raise BertkitError(f"--memory-budget {cfg.compute.memory_budget}: the run does not fit on the GPU; measured "
                       f"peaks (GiB, by micro-batch; c: with gradient checkpointing) {measured} at max_length "
                       f"{cfg.max_length}, each over the {limit / GIB:.2f} GiB planned to ({MARGIN:.0%} of the "
                       "budget)")
