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
        if config.compute.precision not in ("auto", used):
            raise BertkitError(f"precision {config.compute.precision} asked for, but the given Accelerator uses "
                               f"{used}")
        accelerator.gradient_accumulation_steps = config.grad_accum
        return accelerator, PrecisionChoice(used, "the given Accelerator's mixed_precision")
    choice = launch.main_value(state, choose_precision(config.compute.precision, state.device))
    dynamo = {}  # further Accelerator arguments
    if config.compute.compile:
        from accelerate.utils import TorchDynamoPlugin

        dynamo["dynamo_plugin"] = TorchDynamoPlugin(backend="inductor", dynamic=True, use_regional_compilation=True)
    if state.device.type == "cuda":
        from accelerate.utils import AutocastKwargs, DataLoaderConfiguration

        # a captured step must not reuse autocast's cached casts across replays; batches copied from pinned memory
        # without waiting for the device
        dynamo.update(kwargs_handlers=[AutocastKwargs(cache_enabled=False)],
                      dataloader_config=DataLoaderConfiguration(non_blocking=True))
    mixed = {"fp32": "no"}.get(choice.precision, choice.precision)
    try:
        accelerator = Accelerator(mixed_precision=mixed, gradient_accumulation_steps=config.grad_accum,
                                  log_with=config.report_to or None, project_dir=str(Path(output_dir) / "trackers"),
                                  **dynamo)
    except ValueError as e:  # accelerate keeps one precision per process (its AcceleratorState) and refuses another
        if "already been initialized" not in str(e):
            raise
        raise BertkitError(f"this process already trained in another precision than {choice.precision}, and "
                           "accelerate keeps one precision per process: restart the Python process (the notebook "
                           "kernel) to train in another one, or keep the same precision") from None
    return accelerator, choice
