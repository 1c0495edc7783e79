"""Query, key and value in one matmul while training on a GPU, for BERT's self-attention.

Hugging Face's `BertSelfAttention` projects the same hidden states three times (`self.query`, `self.key`,
`self.value`: three [hidden → hidden] linears, called in that order). On a GPU a BERT step is a thousand small
kernels (docs/speed.md, "On one GPU"), and each projection is several of them in each direction: the weight's cast
to bf16, the matmul, the input gradient's matmul and their sum, the weight gradient's matmul, the bias gradient's
reduction, the gradients' casts back. `fused_qkv(model)` swaps the three linears for `Projection` modules that hold
the same weight and bias parameters (so parameter names, the state dict, the optimizer and saved files are
unchanged): the query's computes one [hidden → 3·hidden] linear over the concatenated weights and keeps the three
parts; the key's and the value's hand out theirs when called on the same input (anything else: their own linear, as
before). Outputs and gradients equal the three linears' up to rounding (tests/test_qkv.py). Undone by putting the
linears back; checked to have taken effect by one training-mode forward on a dummy input, as the CPU speed-ups are.
Not on a CPU: there the fused projection gained less than the 3 % rule asks and went (docs/history.md).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from ..device import probe_forward

CALLS = {"fused": 0}  # fused projections computed (eager calls; a captured graph replays them uncounted)
NAMES = ("query", "key", "value")


class Projection(nn.Module):
    """One of a self-attention's query, key and value linears (`index` 0, 1, 2), with that linear's own parameters;
    the three share `group`: {"parts": the three Projections, "input": x, "out": the three parts of x}."""

    def __init__(self, linear: nn.Linear, index: int, group: dict):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias  # the same Parameters: names and state dict unchanged
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.index, self._group = index, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = self._group
        if self.index == 0:
            parts = group["parts"]
            weight = torch.cat([p.weight for p in parts])  # [3·hidden, hidden]
            bias = torch.cat([p.bias for p in parts])  # [3·hidden]
            out = nn.functional.linear(x, weight, bias)  # [..., 3·hidden]
            group["input"], group["out"] = x, out.split([p.out_features for p in parts], dim=-1)
            if not torch.compiler.is_compiling():
                CALLS["fused"] += 1
        if group["input"] is not x:  # not the query's input (no self-attention here): the plain linear
            return nn.functional.linear(x, self.weight, self.bias)
        out = group["out"][self.index]  # [..., hidden], a view of the fused output
        if self.index == len(NAMES) - 1:
            group["input"] = group["out"] = None  # hold no activations past the layer
        return out


def _attentions(model: nn.Module) -> list[nn.Module]:
    from transformers.models.bert.modeling_bert import BertSelfAttention

    return [m for m in model.modules() if type(m) is BertSelfAttention
            and all(isinstance(getattr(m, n), nn.Linear) and getattr(m, n).bias is not None for n in NAMES)]


@contextmanager
def fused_qkv(model: nn.Module, log=print):
    """Swap every BERT self-attention's three projections for the fused ones (module docstring); yield
    ["fused_qkv"] when a forward went through them, else [] (one log line says why); put the linears back on exit,
    also when the block raises."""
    swapped = []
    try:
        for attention in _attentions(model):
            group: dict = {"input": None, "out": None}
            linears = [getattr(attention, n) for n in NAMES]
            group["parts"] = [Projection(linear, i, group) for i, linear in enumerate(linears)]
            for name, projection in zip(NAMES, group["parts"], strict=True):
                setattr(attention, name, projection)
            swapped.append((attention, linears))
        applied = []
        if swapped:
            before = CALLS["fused"]
            probe_forward(model)
            if CALLS["fused"] > before:
                applied.append("fused_qkv")
            else:
                log("fused_qkv: the installed transformers did not call the projections as expected; skipped")
                _restore(swapped)
                swapped = []
        yield applied
    finally:
        _restore(swapped)


def _restore(swapped) -> None:
    for attention, linears in swapped:
        for name, linear in zip(NAMES, linears, strict=True):
            setattr(attention, name, linear)
