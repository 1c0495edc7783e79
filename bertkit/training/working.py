"""bf16 working copies of the linear layers' weights while a graphed step trains in bf16 (on a GPU).

Under bf16 autocast every `nn.Linear` casts its fp32 weight and bias to bf16 at each forward, a kernel per tensor, and
backward casts their bf16 gradients back to fp32, another; for bert-base ~300 of a graphed step's ~1,000 kernels, ~200
beside the fused q/k/v projection (docs/speed.md, "On one GPU"). `working_weights(model)` gives each linear layer (and
each fused q/k/v `Projection`) a bf16 copy of its weight and bias: leaf tensors outside the state dict, used by
training-mode forwards under bf16 autocast (anything else computes with the layer's own parameters, as before). The
step (`StaticStep`) then moves their gradients onto the fp32 parameters (`collect`) and, after AdamW has updated those,
copies them back (`refresh`): one multi-tensor copy each way instead of a cast per tensor. The values are autocast's
own (both ways round to nearest), so training gives the same weights bit for bit (tests/test_working.py); parameters,
state dict, optimizer and saved files are unchanged. Only without gradient accumulation (the working gradients would
add up in bf16 where autocast's fp32 gradients add up in fp32). Undone by giving the layers back their class.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from ..device import probe_forward

CALLS = {"working": 0}  # forwards through working copies (eager calls; a captured graph replays them uncounted)


def weights(module: nn.Module, x: torch.Tensor) -> tuple:
    """(weight, bias) a linear `module` computes `x` with: its working copies in a training-mode forward under an
    autocast of their dtype, else its own parameters."""
    work = getattr(module, "_work", None)
    if (work is None or not module.training or not torch.is_autocast_enabled(x.device.type)
            or torch.get_autocast_dtype(x.device.type) != work[0].dtype):
        return module.weight, module.bias
    if not torch.compiler.is_compiling():
        CALLS["working"] += 1
    return work


class WorkingLinear(nn.Linear):
    """An `nn.Linear` whose class was swapped (the same object, parameters and hooks) to compute with `weights`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, *weights(self, x))


def _candidates(model: nn.Module) -> list[nn.Module]:
    """The linear layers (and modules that compute through `weights`, saying so by `computes_through_weights`, as the
    fused projections do) whose fp32 parameters are trained and used by no other module (a weight tied to an
    embedding gets gradients from both: left alone)."""
    users: dict[int, int] = {}
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None:
                users[id(p)] = users.get(id(p), 0) + 1
    chosen = []
    for module in model.modules():
        if type(module) is nn.Linear or getattr(module, "computes_through_weights", False):
            params = [p for p in (module.weight, module.bias) if p is not None]
            if all(p.dtype == torch.float32 and p.requires_grad and users[id(p)] == 1 for p in params):
                chosen.append(module)
    return chosen


def working_bytes(model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes of the working copies `working_weights(model, dtype)` makes (for a memory plan)."""
    size = torch.empty((), dtype=dtype).element_size()
    return sum(p.numel() * size for m in _candidates(model) for p in (m.weight, m.bias) if p is not None)


def working_modules(model: nn.Module) -> list[nn.Module]:
    """The modules `working_weights` gave working copies, in model order."""
    return [m for m in model.modules() if getattr(m, "_work", None) is not None]


@torch.no_grad()
def refresh(modules: list[nn.Module]) -> None:
    """Copy the modules' fp32 parameters onto their working copies (a multi-tensor copy: a few kernels on a GPU)."""
    pairs = [(w, p) for m in modules for w, p in zip(m._work, (m.weight, m.bias), strict=True) if p is not None]
    torch._foreach_copy_([w for w, _ in pairs], [p for _, p in pairs])


def place(modules: list[nn.Module]) -> None:
    """Make anew, on their parameters' device, the working copies that are elsewhere (the model moved since they
    were made, e.g. by accelerate's `prepare`), then `refresh` them all: for the step that trains with them."""
    for m in modules:
        if m._work[0].device != m.weight.device:
            m._work = tuple(None if p is None else torch.empty_like(p, dtype=w.dtype).requires_grad_()
                            for w, p in zip(m._work, (m.weight, m.bias), strict=True))
    refresh(modules)


def collect(modules: list[nn.Module]) -> None:
    """Move the working copies' gradients onto the fp32 parameters: copied where a parameter has no gradient (its
    new tensor on a GPU comes from the graph's pool), added where it has one (kept and zeroed, or from a forward that
    used the parameter itself); the working gradients are dropped."""
    new, kept = [], []  # (parameter, working gradient)
    for m in modules:
        for w, p in zip(m._work, (m.weight, m.bias), strict=True):
            if w is not None and w.grad is not None:
                (new if p.grad is None else kept).append((p, w.grad))
                w.grad = None
    if new:
        grads = [torch.empty_like(p) for p, _ in new]
        torch._foreach_copy_(grads, [g for _, g in new])
        for (p, _), g in zip(new, grads, strict=True):
            p.grad = g
    for p, g in kept:
        p.grad.add_(g)


def drop_gradients(modules: list[nn.Module]) -> None:
    """Forget the working copies' gradients (after a failed capture: tensors of a graph's pool no kernel filled)."""
    for m in modules:
        for w in m._work:
            if w is not None:
                w.grad = None


@contextmanager
def working_weights(model: nn.Module, dtype: torch.dtype = torch.bfloat16, log=print):
    """Give the model's linear layers working copies in `dtype` (module docstring), refreshed from the parameters;
    yield ["bf16_working_weights"] when a training-mode forward under autocast went through them, else [] (one log
    line says why); take them away on exit, also when the block raises."""
    changed = []
    try:
        for module in _candidates(model):
            module._work = tuple(None if p is None else torch.empty_like(p, dtype=dtype).requires_grad_()
                                 for p in (module.weight, module.bias))
            if type(module) is nn.Linear:
                module.__class__ = WorkingLinear
            changed.append(module)
        applied = []
        if changed:
            refresh(changed)
            before = CALLS["working"]
            device = next(model.parameters()).device
            with torch.autocast(device.type, dtype=dtype):
                probe_forward(model)
            if CALLS["working"] > before:
                applied.append(f"{str(dtype).removeprefix('torch.')}_working_weights")
            else:
                log("working weights: no linear layer computed with them; skipped")
                _undo(changed)
                changed = []
        yield applied
    finally:
        _undo(changed)


def _undo(modules: list[nn.Module]) -> None:
    for module in modules:
        if type(module) is WorkingLinear:
            module.__class__ = nn.Linear
        vars(module).pop("_work", None)
