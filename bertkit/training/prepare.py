"""Wrapping a model for accelerate, and unwrapping it afterwards.

The optimizer (with bertkit's parameter groups) is built where its parameters will live: FSDP1 replaces the model's
parameters when it wraps the model, so there the optimizer is built from the wrapped model (whose parameter names
keep the originals inside FSDP's prefixes, with `use_orig_params`); DDP, FSDP2 and a single process build it first
and let accelerate map it. The model, optimizer and training DataLoader go through one `prepare` call, as DeepSpeed
needs. The learning-rate schedule is not given to accelerate: it would step it once per process, while bertkit
steps it once per optimizer step.
"""

from __future__ import annotations

import math

from transformers import get_linear_schedule_with_warmup

from .optim import build_optimizer


def prepare(accelerator, model, loader, cfg, total_steps: int):
    """(prepared model, prepared optimizer, prepared training DataLoader, linear warm-up/decay schedule)."""
    from accelerate.utils import DistributedType

    fsdp1 = accelerator.distributed_type == DistributedType.FSDP and not getattr(accelerator, "is_fsdp2", False)
    if fsdp1:
        model = accelerator.prepare(model)
    optimizer = build_optimizer(model, cfg)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(cfg.warmup_ratio * total_steps), total_steps)
    if fsdp1:
        optimizer, loader = accelerator.prepare(optimizer, loader)
    else:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return model, optimizer, loader, scheduler


def restore_forward(model) -> None:
    """Take off the autocast wrapper accelerate puts on `model.forward` for mixed precision, so the model runs as
    it did before `prepare` (its class's forward)."""
    original = model.__dict__.pop("_original_forward", None)
    if original is None:
        return
    if getattr(original, "__func__", None) is type(model).forward:
        model.__dict__.pop("forward", None)
    else:
        model.forward = original
