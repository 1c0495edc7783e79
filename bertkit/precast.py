"""Inference in bf16/fp16 without casting the weights again on every call.

`torch.autocast` runs a linear layer in bf16 by casting its fp32 weight and bias to bf16 each time it is called,
and its cast cache lives only until the autocast context is left: `bertkit serve` and `bertkit predict` enter it
once per model batch, so every batch paid for casting all the linear weights again (MiniLM: 10.6 M of them; at
one text per call most of the CPU time of a bf16 server's model call, docs/speed.md). `precast` gives the linear
layers of a model that is only used for inference bf16 (fp16) weights once: autocast then finds them already in
its dtype and casts nothing, and computes exactly what it computed before (the same rounding of the same values).
Embeddings, layer norms and any weight a linear layer shares with another module (tied embeddings) stay fp32, as
autocast keeps them.

On a CPU with oneDNN (torch's mkldnn backend), the bf16 weights are also laid out once in the blocked format its
matrix kernels read (`torch.ops.mkldnn._reorder_linear_weight`, as inductor's weight freezing does): `F.linear`
reorders the plain weight on every call, which at a few dozen rows costs as much as the product itself (docs/speed.md).
Those layers then run `torch.ops.mkldnn._linear_pointwise` in inference (no grad) and `nn.Linear`'s own forward
otherwise.

It is checked to change nothing: forward passes of the encoder on two dummy inputs before and after must give
identical hidden states, and the packed layers must have run; otherwise packing is undone (and if the outputs
still differ, a model family that reads its weights' dtype, say, the fp32 weights are put back) and it says so.
"""

from __future__ import annotations

import logging
import types

import torch
from torch import nn

from .device import autocast, probe_ids

log = logging.getLogger(__name__)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


PACKED_CALLS = [0]  # forward passes of packed linear layers, to check that packing took effect


def probe_outputs(model, device, precision) -> list[torch.Tensor]:
    """The encoder's last hidden states on [1, 8] and [3, 40] dummy inputs (the kernels differ with the rows)."""
    encoder = getattr(model, "base_model", model)
    ids = probe_ids(model, device)  # [1, 8]
    outs = []
    for batch in (ids, ids.repeat(3, 5)):  # [1, 8], [3, 40]
        with torch.no_grad(), autocast(precision, device):
            outs.append(encoder(input_ids=batch, attention_mask=torch.ones_like(batch))[0].float())
    return outs  # [batch, length, hidden] each


def same_outputs(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Whether two `probe_outputs` are equal bit for bit."""
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _packed_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """nn.Linear's forward with the weight pre-laid-out for oneDNN: in inference on the CPU, where autocast would run
    it in bf16 (or the input is bf16); the same products and rounding as `F.linear` on that input."""
    if torch.is_grad_enabled() or x.device.type != "cpu" or x.dim() < 2 or (
            x.dtype != torch.bfloat16 and not (torch.is_autocast_enabled("cpu")
                                               and torch.get_autocast_dtype("cpu") == torch.bfloat16)):
        return nn.Linear.forward(self, x)
    PACKED_CALLS[0] += 1
    return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), self._bertkit_packed, self.bias, "none", [], "")


def _pack_checked(model, linears: list[nn.Linear], device, precision: str, before: list[torch.Tensor]) -> int:
    """Give each bf16 linear layer on the CPU its weight in oneDNN's layout and the forward above, where torch has a
    oneDNN bf16 linear; kept only if the outputs stay `before` and the packed layers ran. Returns how many."""
    ops = ("_reorder_linear_weight", "_linear_pointwise", "_is_mkldnn_bf16_supported")
    if device.type != "cpu" or not torch.backends.mkldnn.is_available() or not all(
            hasattr(torch.ops.mkldnn, op) for op in ops) or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return 0
    packed, calls = [], PACKED_CALLS[0]
    try:
        for m in linears:
            if m.weight.dtype == torch.bfloat16 and (m.bias is None or m.bias.dtype == torch.bfloat16):
                m._bertkit_packed = torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), 64)  # 64: a row hint
                m.forward = types.MethodType(_packed_forward, m)
                packed.append(m)
        if same_outputs(before, probe_outputs(model, device, precision)) and PACKED_CALLS[0] > calls:
            return len(packed)
        reason = "the outputs changed or the packed layers did not run"
    except Exception as e:  # noqa: BLE001 - whatever fails here, the layers go back to nn.Linear's forward
        reason = f"{type(e).__name__}: {e}"
    for m in packed:
        del m.forward, m._bertkit_packed
    log.info("linear weights not laid out for oneDNN (%s)", reason)
    return 0


def precast(model: nn.Module, precision: str, pack: bool = True) -> int:
    """Cast the linear layers' weights and biases of the eval-mode `model` to `precision`'s dtype once (and with
    `pack`, lay bf16 ones out for oneDNN on a CPU); returns how many layers were cast (0 for fp32, or where the
    check failed and nothing changed)."""
    dtype = DTYPES.get(precision)
    if dtype is None or model.training:
        return 0
    device = next(model.parameters()).device
    elsewhere = {id(p) for m in model.modules() if not isinstance(m, nn.Linear) for p in m.parameters(recurse=False)}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear) and m.weight.dtype == torch.float32
               and not {id(p) for p in m.parameters(recurse=False)} & elsewhere]
    if not linears:
        return 0
    saved = [(m, name, p) for m in linears for name, p in m.named_parameters(recurse=False)]
    try:
        before = probe_outputs(model, device, precision)
        cast: dict[int, nn.Parameter] = {}  # one cast per parameter: weights tied between linear layers stay tied
        for m, name, p in saved:
            if id(p) not in cast:
                cast[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=False)
            setattr(m, name, cast[id(p)])
        if same_outputs(before, probe_outputs(model, device, precision)):
            if pack:
                _pack_checked(model, linears, device, precision, before)
            return len(linears)
        reason = "its outputs changed"
    except Exception as e:  # noqa: BLE001 - whatever fails here, the model goes back as it was
        reason = f"{type(e).__name__}: {e}"
    for m, name, p in saved:
        setattr(m, name, p)
    log.warning("linear weights left in fp32 for %s inference (%s)", precision, reason)
    return 0
