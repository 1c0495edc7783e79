"""A run's set-up: the config it trains (`trained_config`), its Accelerator, the model, optimizer and schedule
wrapped for it, its step (`make_step`), and the pad multiple of its device.

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

from ..config import RunConfig, resolve
from ..errors import BertkitError
from ..typed import to_dict
from .graphed import GraphedStep
from .optim import build_optimizer
from .step import EagerStep, StaticStep, StepPlan


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


def make_accelerator(config, output_dir, accelerator=None, model=None):
    """(Accelerator, PrecisionChoice) for a run: the launcher's process group joined and checked, the precision
    decided for the device on the main process and shared (`bertkit.device`; one `model` cannot run under is fp32
    for 'auto' and an error when asked for, `model_precision`), then the Accelerator built with it.
    A caller's own `accelerator` is used as it is; its mixed precision must agree with `config.precision`."""
    from accelerate import Accelerator

    from ..device import PrecisionChoice, choose_precision, model_precision
    from . import launch

    state = launch.start()
    if accelerator is not None:
        used = {"no": "fp32"}.get(accelerator.mixed_precision, accelerator.mixed_precision)
        tf32 = config.compute.precision == "tf32" and used == "fp32"  # fp32 storage; TF32 matmuls (`matmul_precision`)
        if not tf32 and config.compute.precision not in ("auto", used):
            raise BertkitError(f"precision {config.compute.precision} asked for, but the given Accelerator uses "
                               f"{used}")
        accelerator.gradient_accumulation_steps = config.grad_accum
        return accelerator, (choose_precision("tf32", accelerator.device) if tf32
                             else PrecisionChoice(used, "the given Accelerator's mixed_precision"))
    try:
        choice = choose_precision(config.compute.precision, state.device)
        choice = model_precision(choice, config.compute.precision, model) if model is not None else choice
    except BertkitError as e:  # the main process's error stops all (none waits for a value it would not send)
        choice = e
    choice = launch.main_value(state, choice)
    if isinstance(choice, BertkitError):
        raise choice
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
    mixed = {"fp32": "no", "tf32": "no"}.get(choice.precision, choice.precision)
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


def trained_config(config: RunConfig, task) -> RunConfig:
    """`config` with what the task is (its name, model, max length, options with the labels it has): the config a
    run folder records. A notebook's config may be for another task (the default one) or another variant of it (a
    multi-label head under a single-label config): its default metrics then give way to the trained task's."""
    from ..tasks import get_task

    options = task.run_options()
    if (config.task, config.model, config.max_length, config.task_options) == (
            task.name, task.source or config.model, task.max_length, options):
        return config  # the run's own config (`bertkit finetune`): nothing to rebuild
    values = {k: v for k, v in config.to_dict().items() if k != "task_options"}
    defaults = list(get_task(config.task).metrics_for(config.task_options)[1])
    if config.metrics == defaults and list(type(task).metrics_for(options)[1]) != defaults:
        values.pop("metrics"), values.pop("main_metric")
    values.update(task=task.name, model=task.source or config.model, max_length=task.max_length,
                  task_options=to_dict(options))
    return resolve([(values, "the trained task", False)])


def default_pad_multiple(device: str, max_length: int) -> int | None:
    """8 on a GPU (tensor-core shapes). On a CPU, inputs longer than 128 word pieces are padded to a multiple of 32:
    every distinct batch length costs memory that the CPU kernels' caches and the allocator keep, so a run whose
    lengths vary over hundreds of values grows for hundreds of steps (docs/memory.md); at most max_length / 32
    shapes bound it. Short inputs keep their exact length (padding them would cost more compute than it saves)."""
    if device == "cuda":
        return 8
    return 32 if device == "cpu" and max_length > 128 else None


def make_step(plan: StepPlan, accelerator, model, optimizer, task, cfg, log=print) -> EagerStep:
    """The step of `plan` (`bertkit.training.step`) for a prepared model and optimizer."""
    if plan.kind == "graphed":
        return GraphedStep(accelerator, model, optimizer, task, cfg.max_grad_norm, cfg.batch_size, log)
    return (StaticStep if plan.kind == "static" else EagerStep)(accelerator, model, optimizer, task, cfg.max_grad_norm)
