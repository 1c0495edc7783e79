"""Mixed precision's weight casts in one kernel each way, for the static (and so the graphed) training step.

Under autocast, a linear layer casts its fp32 weight and bias to bf16 each time it is called, and its backward casts
their bf16 gradients back to fp32: two small kernels per parameter tensor a step (a large share of a graphed
bert-base step's kernels: docs/speed.md, "Sixth lent H100"). `FlatCast` casts all of them at the start of a forward
with one multi-tensor copy (`torch._foreach_copy_`, a few launches on a GPU) into one bf16 buffer, and hands each
layer its view of that buffer for the forward (what `torch.func.functional_call` does: the module's parameter
swapped for the forward, the Parameter itself back afterwards); the backward copies the views' bf16 gradients to
fp32 with one more multi-tensor copy into one buffer, each parameter's gradient a view of it (at an offset aligned
to 16 elements). The parameters keep their own storage (saved files, the optimizer and its state are untouched). The
same rounding of the same numbers as autocast's own casts: the same losses and weights, bit for bit
(tests/test_graphed_step.py, on a CPU). A parameter whose output gets no gradient (a pooler a task does not use), or
that is frozen, gets none, as under autocast.

Which parameters: those of `nn.Linear` modules and of the fused query/key/value projections (`qkv.Projection`),
fp32 and held by no other module (a decoder tied to the embeddings stays as autocast treats it). Checked before use:
the encoder's outputs on precast's two probe inputs, without dropout, must be the same bit for bit with and without
(a family that reads a linear weight outside a linear, say), and no linear layer may be called twice in a forward
(ALBERT's shared layer: autograd would add the bf16 gradients of its uses before the one copy, where autocast adds
them in fp32); otherwise it is not used, and one line says why. Not with --compile: swapped module attributes would
make every compiled region recompile.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager, nullcontext

import torch
from torch import nn

from ..precast import DTYPES, probe_outputs, same_outputs

ALIGN = 16  # elements: each parameter's offset in the buffer (vectorised kernels read aligned memory)


def aligned(sizes) -> tuple[list[int], int]:
    """Offsets of tensors of `sizes` elements laid end to end in one buffer, each at a multiple of ALIGN; its size."""
    starts, end = [], 0
    for n in sizes:
        starts.append(end)
        end += -(-n // ALIGN) * ALIGN
    return starts, end


class _Cast(torch.autograd.Function):
    """The parameters → their views of one [n] buffer of `dtype` holding their cast; backward: the views' gradients
    copied to fp32 views of one buffer (each at an aligned offset), each parameter's gradient one of them."""

    @staticmethod
    def forward(ctx, dtype, starts, n, *params):
        ctx.set_materialize_grads(False)  # an output no loss reached: None, not zeros (its parameter gets no gradient)
        low = torch.empty(n, dtype=dtype, device=params[0].device)  # [n]
        views = tuple(low[s:s + p.numel()].view_as(p) for s, p in zip(starts, params, strict=True))
        torch._foreach_copy_(views, params)  # one multi-tensor kernel on a GPU (the same rounding as `.to(dtype)`)
        ctx.mark_non_differentiable(*(v for v, p in zip(views, params, strict=True) if not p.requires_grad))
        return views

    @staticmethod
    def backward(ctx, *grads):
        arrived = [g for g in grads if g is not None]
        if not arrived:
            return (None,) * (3 + len(grads))
        starts, end = aligned(g.numel() for g in arrived)  # each gradient's place in one fp32 buffer
        full = torch.empty(end, dtype=torch.float32, device=arrived[0].device)  # [end]
        views = [full[s:s + g.numel()].view_as(g) for s, g in zip(starts, arrived, strict=True)]
        torch._foreach_copy_(views, arrived)  # one multi-tensor kernel on a GPU
        it = iter(views)
        return (None, None, None, *(None if g is None else next(it) for g in grads))


def cast_parameters(model: nn.Module) -> list[tuple[nn.Module, str, nn.Parameter]]:
    """(module, name, parameter) of what autocast casts at each linear call: the parameters of `nn.Linear` modules
    and of the fused q/k/v projections, fp32, held by no other module."""
    from .qkv import Projection

    holders = Counter(id(p) for m in model.modules() for p in m._parameters.values() if p is not None)
    return [(m, name, p) for m in model.modules() if isinstance(m, nn.Linear | Projection)
            for name, p in m._parameters.items()
            if p is not None and p.dtype == torch.float32 and holders[id(p)] == 1]


class FlatCast:
    """`with flat():` a forward in which each parameter of `cast_parameters(model)` is its bf16 (fp16) view of one
    buffer, cast in one multi-tensor copy (module docstring)."""

    def __init__(self, model: nn.Module, dtype: torch.dtype):
        self.dtype, self.held = dtype, cast_parameters(model)
        self.starts, self.size = aligned(p.numel() for _, _, p in self.held)

    @contextmanager
    def __call__(self):
        views = _Cast.apply(self.dtype, self.starts, self.size, *(p for _, _, p in self.held))
        try:
            for (module, name, _), view in zip(self.held, views, strict=True):
                module._parameters[name] = view  # what torch.func.functional_call does, for this forward
            yield
        finally:
            for module, name, p in self.held:
                module._parameters[name] = p


def flat_cast(model: nn.Module, precision: str, compiled: bool):
    """A checked `FlatCast` for training `model` in `precision`, or (None, why not)."""
    dtype = DTYPES.get(precision)
    if dtype is None:
        return None, f"precision {precision}: nothing is cast"
    if compiled:
        return None, "--compile: swapped attributes would recompile its regions"
    held = cast_parameters(model)
    if not held:
        return None, "no fp32 linear layers"
    calls: Counter = Counter()  # forward calls per linear module in the probe's forwards
    modules = {id(m): m for m, _, _ in held}.values()
    hooks = [m.register_forward_pre_hook(lambda m, args: calls.update([id(m)])) for m in modules]
    try:
        before = _probe(model, precision, None)
    finally:
        for h in hooks:
            h.remove()
    if before is None:
        return None, "the probe input failed the model's own forward"
    if max(calls.values(), default=0) > len(before):  # more than once a forward (one forward an output): ALBERT's
        # one layer, say, the gradients of whose uses would add up in bf16
        return None, "a linear layer is called more than once in a forward (shared weights)"
    flat = FlatCast(model, dtype)
    after = _probe(model, precision, flat)
    if after is None or not same_outputs(before, after):
        return None, ("the model's output differed on a probe input" if after is not None
                      else "the model's forward failed with it")
    return flat, ""


def _probe(model: nn.Module, precision: str, flat: FlatCast | None) -> list[torch.Tensor] | None:
    """precast's probe (the encoder's outputs on two dummy inputs under `precision`'s autocast) in eval mode (no
    dropout), with `flat` when given; None when the forward fails."""
    training, device = model.training, next(model.parameters()).device
    model.eval()
    try:
        with flat() if flat else nullcontext():
            return probe_outputs(model, device, precision)
    except Exception:  # noqa: BLE001 - any failure: the step goes on with autocast's own casts
        return None
    finally:
        model.train(training)
