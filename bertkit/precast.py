"""Inference in bf16/fp16 without casting the weights again on every call.

`torch.autocast` runs a linear layer in bf16 by casting its fp32 weight and bias to bf16 each time it is called,
and its cast cache lives only until the autocast context is left: `bertkit serve` and `bertkit predict` enter it
once per model batch, so every batch paid for casting all the linear weights again (MiniLM: 10.6 M of them; at
one text per call most of the CPU time of a bf16 server's model call, docs/speed.md). `precast` gives the linear
layers of a model that is only used for inference bf16 (fp16) weights once: autocast then finds them already in
its dtype and casts nothing, and computes exactly what it computed before (the same rounding of the same values).
Embeddings, layer norms and any weight a linear layer shares with another module (tied embeddings) stay fp32, as
autocast keeps them.

It is checked to change nothing: one forward pass of the encoder on a dummy input before and after must give
identical hidden states; otherwise (a model family that reads its weights' dtype, say) the fp32 weights are put
back and it says so.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from .device import autocast, probe_ids

log = logging.getLogger(__name__)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _probe(model, device, precision) -> torch.Tensor:
    encoder = getattr(model, "base_model", model)
    ids = probe_ids(model, device)  # [1, 8]
    with torch.no_grad(), autocast(precision, device):
        out = encoder(input_ids=ids, attention_mask=torch.ones_like(ids))
    return out[0].float()  # [1, 8, hidden]


def precast(model: nn.Module, precision: str) -> int:
    """Cast the linear layers' weights and biases of the eval-mode `model` to `precision`'s dtype once; returns how
    many layers were cast (0 for fp32, or where the check failed and nothing changed)."""
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
        before = _probe(model, device, precision)
        cast: dict[int, nn.Parameter] = {}  # one cast per parameter: weights tied between linear layers stay tied
        for m, name, p in saved:
            if id(p) not in cast:
                cast[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=False)
            setattr(m, name, cast[id(p)])
        if torch.equal(before, _probe(model, device, precision)):
            return len(linears)
        reason = "its outputs changed"
    except Exception as e:  # noqa: BLE001 - whatever fails here, the model goes back as it was
        reason = f"{type(e).__name__}: {e}"
    for m, name, p in saved:
        setattr(m, name, p)
    log.warning("linear weights left in fp32 for %s inference (%s)", precision, reason)
    return 0
