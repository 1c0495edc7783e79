"""The Accelerator of a run, wrapping a model for it, and unwrapping it afterwards.

The optimizer (with bertkit's parameter groups) is built where its parameters will live: FSDP1 replaces the model's
parameters when it wraps the model, so there the optimizer is built from the wrapped model (whose parameter names
keep the originals inside FSDP's prefixes, with `use_orig_params`); DDP, FSDP2 and a single process build it first
and let accelerate map it. The model, optimizer and training DataLoader go through one `prepare` call, as DeepSpeed
needs. The learning-rate schedule is not given to accelerate: it would step it once per process, while bertkit
steps it once per optimizer step.
"""

from __future__ import annotations

import math
from pathlib import Path

from transformers import get_linear_schedule_with_warmup

from ..errors import BertkitError
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


def make_accelerator(config, output_dir, accelerator=None):
    """(Accelerator, PrecisionChoice) for a run: the launcher's process group joined and checked, the precision
    decided for the device on the main process and shared (`bertkit.device`), then the Accelerator built with it.
    A caller's own `accelerator` is used as it is; its mixed precision must agree with `config.precision`."""
    from accelerate import Accelerator

    from ..device import PrecisionChoice, choose_precision
    from . import launch

    state = launch.start()
    if accelerator is not None:
        used = {"no": "fp32"}.get(accelerator.mixed_precision, accelerator.mixed_precision)
        if config.precision not in ("auto", used):
            raise BertkitError(f"precision {config.precision} asked for, but the given Accelerator uses {used}")
        accelerator.gradient_accumulation_steps = config.grad_accum
        return accelerator, PrecisionChoice(used, "the given Accelerator's mixed_precision")
    choice = launch.main_value(state, choose_precision(config.precision, state.device))
    dynamo = {}
    if config.compile:
        from accelerate.utils import TorchDynamoPlugin

        dynamo["dynamo_plugin"] = TorchDynamoPlugin(backend="inductor", dynamic=True, use_regional_compilation=True)
    mixed = {"fp32": "no"}.get(choice.precision, choice.precision)
    _forget_other_precision(mixed)
    accelerator = Accelerator(mixed_precision=mixed, gradient_accumulation_steps=config.grad_accum,
                              log_with=config.report_to or None, project_dir=str(Path(output_dir) / "trackers"),
                              **dynamo)
    return accelerator, choice


def _forget_other_precision(mixed_precision: str) -> None:
    """accelerate keeps one precision per process and refuses another; a notebook that trains in fp32 and then in
    bf16 would have to restart. Forget the earlier choice (the process group, if any, stays)."""
    from accelerate.state import AcceleratorState

    if AcceleratorState._shared_state.get("_mixed_precision", mixed_precision) != mixed_precision:
        AcceleratorState._reset_state(reset_partial_state=False)
