"""One training step: `backward(batch)` for every micro-batch, `update()` on the accumulation boundary. Three ways,
one contract (the loop in loop.py does not know which it has):

- `EagerStep`: accelerate's pieces — `accelerator.backward`, `clip_grad_norm_`, the prepared optimizer. Any device,
  any number of processes, FSDP, DeepSpeed, fp16 loss scaling, peft, torch.compile.
- `StaticStep`: the same arithmetic written so that a CUDA graph can hold it: nothing reads a value on the host,
  gradients are zeroed in place (their addresses stay), the learning rate is a tensor the schedule fills in place,
  the summed loss and gradient norms stay on the device, and so does fp16's loss scale (GradScaler with a fused
  AdamW reads nothing on the host; it updates its scale in place). Runs eagerly on any device: on a CPU it gives the
  eager step's weights bit for bit (tests/test_graphed_step.py), which is how the captured step is checked without
  a GPU.
- `GraphedStep` (graphed.py): `StaticStep` captured once per batch shape and replayed, on one CUDA device; with
  `--compile`, of the regions torch.compile made (a shape's eager warm-up compiles, or reuses the dynamic compile).

`plan_step` chooses one for a run and says why (the training line prints it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..buckets import batch_longest, choose_buckets, extra_padding

AUTO_BUCKETS = 8  # length buckets where the step is graphed or compiled (each bucket: one graph, or one compile)


@dataclass(frozen=True)
class StepPlan:
    kind: str  # eager, static or graphed
    reason: str
    buckets: tuple[int, ...] = ()  # training batches padded up to these lengths; () = to their longest row
    extra_padding: float = 0.0  # positions the buckets add over padding each batch to its longest row

    def describe(self) -> str:
        text = f"step {self.kind} ({self.reason})"
        if self.buckets:
            text += (f"; length buckets {','.join(map(str, self.buckets))} "
                     f"(+{100 * self.extra_padding:.1f} % padded positions)")
        return text


def plan_step(cfg, accelerator, precision: str, lengths, batches: list[list[int]], multiple: int | None) -> StepPlan:
    """The step a run takes and why, with its length buckets. `batches`: the first epoch's training batches (rows of
    `lengths`), from which the buckets are chosen."""
    kind, reason = _step_kind(cfg, accelerator, precision)
    count = cfg.compute.length_buckets
    if count is None:  # auto: where shapes are costly (a graph or a compile per shape)
        count = AUTO_BUCKETS if kind == "graphed" or cfg.compute.compile else 0
    if not count:
        return StepPlan(kind, reason)
    longest = batch_longest(lengths, batches, multiple or 1)
    buckets = choose_buckets(longest, count)
    return StepPlan(kind, reason, tuple(buckets), extra_padding(longest, buckets))


def _step_kind(cfg, accelerator, precision: str) -> tuple[str, str]:
    asked = cfg.compute.train_step
    if asked in ("eager", "static"):
        return asked, f"--train-step {asked}"
    cuda = accelerator.device.type == "cuda"
    why_not = None
    if not cuda:
        why_not = f"no CUDA device ({accelerator.device.type})"
    elif accelerator.num_processes > 1:
        why_not = f"{accelerator.num_processes} processes"
    elif accelerator.distributed_type.name in ("FSDP", "DEEPSPEED"):
        why_not = accelerator.distributed_type.name
    elif precision == "fp16" and asked != "graphed":
        why_not = "fp16: its loss scaling is graphed with --train-step graphed"
    elif cfg.peft.method != "none":
        why_not = f"--peft {cfg.peft.method}"
    elif cfg.compute.gradient_checkpointing:
        why_not = "gradient checkpointing saves random states on the host"
    if why_not is None:
        compiled = ", of regions --compile compiled" if cfg.compute.compile else ""
        return "graphed", f"one CUDA device: a CUDA graph per batch shape{compiled}"
    if asked == "graphed":
        return "eager", f"--train-step graphed, but {why_not}"
    return "eager", why_not


class EagerStep:
    """accelerate's step: backward through the accelerator (it divides the loss by the accumulation count), clipping
    and the optimizer through their prepared wrappers."""

    kind = "eager"

    def __init__(self, accelerator, model, optimizer, task, max_grad_norm: float):
        self.accelerator, self.model, self.optimizer, self.task = accelerator, model, optimizer, task
        self.max_grad_norm = max_grad_norm
        self.trained = [p for p in model.parameters() if p.requires_grad]
        self.loss_sum = torch.zeros((), device=accelerator.device)  # Σ micro-batch losses since the last read-out
        # over the steps since the last read-out: Σ finite gradient norms, steps clipped, steps with a finite norm,
        # steps with an inf or NaN one (fp16: an overflow, the step skipped)
        self.grad_stats = torch.zeros(4, device=accelerator.device)

    def backward(self, batch: dict) -> None:
        loss = self.task.compute_loss(self.model, batch)
        self.accelerator.backward(loss)
        self.loss_sum += loss.detach()

    def update(self) -> bool:
        """Clip, AdamW, zero the gradients; False when the step was skipped for an fp16 overflow seen on the host (a
        fused AdamW skips on the device, unseen: the schedule then advances, as transformers' Trainer's does)."""
        norm = self.accelerator.clip_grad_norm_(self.trained, self.max_grad_norm)  # the norm before clipping
        self._count(norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return not self.optimizer.step_was_skipped

    def summary(self) -> dict:
        """What the step did beyond training (a graphed step: its graphs and replays), for metrics.json."""
        return {}

    def _count(self, norm) -> None:
        if norm is None:  # some sharded set-ups
            return
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP2: a DTensor
        finite = torch.isfinite(norm)
        self.grad_stats += torch.stack([torch.where(finite, norm, 0.0), finite & (norm > self.max_grad_norm), finite,
                                        ~finite]).float()


class StaticStep(EagerStep):
    """The eager step's arithmetic with nothing a CUDA graph cannot hold (module docstring): the loss divided by the
    accumulation count as accelerate does, torch's `clip_grad_norm_` (what accelerate calls on one process; or, with
    `fold_clip`, the same clipping inside the fused AdamW), the torch optimizer itself with tensor learning rates,
    gradients zeroed in place (or dropped, as the eager step does, where one graph holds the whole step:
    `keep_gradients`). fp16: accelerate's GradScaler, called as accelerate calls it."""

    kind = "static"
    keep_gradients = True  # zeroed in place, not dropped: a separate update graph reads the same tensors
    fold_clip = False  # clip inside the fused AdamW (`fold_clipping`) rather than scaling the gradients first

    def __init__(self, accelerator, model, optimizer, task, max_grad_norm: float):
        super().__init__(accelerator, model, optimizer, task, max_grad_norm)
        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # the torch optimizer under accelerate's wrapper
        self.accumulation = accelerator.gradient_accumulation_steps
        tensor_learning_rates(self.optimizer, accelerator.device)
        self.scaler = getattr(accelerator, "scaler", None)  # fp16 on a GPU: accelerate's GradScaler

    def backward(self, batch: dict) -> None:
        loss = self.task.compute_loss(self.model, batch)  # []
        share = loss / self.accumulation
        (share if self.scaler is None else self.scaler.scale(share)).backward()
        self.loss_sum += loss.detach()

    def update(self) -> bool:
        if self.scaler is not None:  # the gradients divided by the scale; an inf or NaN among them noted on the device
            self.scaler.unscale_(self.optimizer)
        if self.fold_clip:
            norm = torch.nn.utils.get_total_norm([p.grad for p in self.trained if p.grad is not None])  # []
            # clip_grad_norm_ multiplies each gradient by min(1, max / (norm + 1e-6)); the fused AdamW divides it by
            # this instead, as it reads it (equal up to rounding): one read of the gradients and one kernel pass
            # fewer (the fused kernel writes the divided gradients back, as the multiplication did)
            self.optimizer.grad_scale = ((norm + 1e-6) / self.max_grad_norm).clamp(min=1.0)
        else:
            norm = torch.nn.utils.clip_grad_norm_(self.trained, self.max_grad_norm)  # [], on the device
        self._count(norm)
        if self.scaler is not None:  # a fused AdamW skips its update on the device where a gradient was inf or NaN;
            self.scaler.step(self.optimizer)  # the scale backs off, or grows after enough finite steps, in place
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=not self.keep_gradients)
        return True


def fold_clipping(optimizer) -> bool:
    """Whether `optimizer` can clip as it steps: a fused torch AdamW divides every gradient by its `grad_scale` tensor
    as it reads it (the hook `GradScaler` uses to unscale), and torch has `get_total_norm` (2.6+)."""
    fused = isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and optimizer.defaults.get("fused")
    return bool(fused) and hasattr(torch.nn.utils, "get_total_norm")


def tensor_learning_rates(optimizer, device: torch.device) -> None:
    """Each parameter group's learning rate as a tensor on `device`, which the schedule fills in place
    (`LRScheduler` does so for tensor rates) and a captured AdamW step reads. float64 on a CPU (its AdamW reads the
    rate as a double: the same bits as a Python float), float32 on a GPU (what its fused AdamW reads)."""
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    for group in optimizer.param_groups:
        lr = group["lr"]
        if not (isinstance(lr, torch.Tensor) and lr.device == device and lr.dtype == dtype):  # e.g. loaded on a CPU
            group["lr"] = torch.tensor(float(lr), dtype=dtype, device=device)

