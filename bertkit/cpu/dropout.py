"""Faster dropout for CPU training: the same Bernoulli keep-and-rescale, with cheaper random numbers.

On CPU, `torch.nn.functional.dropout` draws every mask element through `bernoulli_`. Here the mask comes from
`random_()` over the full int64 range viewed as 16-bit integers (four draws per word): an element is kept when
its draw is at or above round(p · 65536) − 32768, so the drop probability is p to within 1/65536
(0.1 → 0.100006) and kept values are scaled by 1 / (1 − that probability), keeping the expectation exact.
Draws use torch's default generator, so seeds and checkpointed RNG states govern them as before.
GPUs keep torch's own dropout.

`fast_dropout(model)` swaps every `nn.Dropout` for `FastDropout` and routes BERT-style attention through
`bertkit_sdpa`: torch's SDPA, except while training on CPU, where the same attention is computed unfused
(matmul, softmax, this dropout mask, matmul). That is the faster path there with or without attention dropout, at
the lengths in docs/speed.md (torch's fused kernel is slowest on short rows).
`restore_dropout(model)` undoes both; weights and saved files are unaffected. `CALLS` counts the patched code's
calls, so `bertkit.cpu.cpu_speedups` can check that a patch really took effect (eager calls only: under
torch.compile each new count was a guard that failed, a recompile per call until dynamo's cache limit).
"""

from __future__ import annotations

import torch
from torch import nn

ATTN = "bertkit_sdpa"
CALLS = {"dropout": 0, "attention": 0}


def keep_mask(shape, p: float, device) -> tuple[torch.Tensor, float]:
    """Boolean keep-mask of `shape` and the scale 1 / (1 − drop probability)."""
    n = 1
    for s in shape:
        n *= s
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-2**63, None)  # all 64 bits random
    draws = words.view(torch.int16)[:n].view(shape)  # uniform on [-32768, 32767]
    cut = round(p * 65536)
    return draws >= cut - 32768, 65536 / (65536 - cut)


def drop(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return nn.functional.dropout(x, p, True)
    keep, scale = keep_mask(x.shape, p, x.device)
    return x * (keep.to(x.dtype) * scale)


class FastDropout(nn.Dropout):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():  # a count torch.compile traced would be a guard: a recompile a call
            CALLS["dropout"] += 1
        return drop(x, self.p, self.training)


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """SDPA; while training on CPU, softmax(QKᵀ·scale + mask) → fast dropout (if any) → ·V (module docstring)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not module.training or query.device.type != "cpu":
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if not torch.compiler.is_compiling():
        CALLS["attention"] += 1
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # [batch, heads, q, k]
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:  # SDPA-style mask: True = attend
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = drop(torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype), dropout)
    out = torch.matmul(probs, value).transpose(1, 2).contiguous()  # [batch, q, heads, head_dim]
    return out, None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTN, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN, sdpa_mask)


def swap_dropout(model: nn.Module) -> int:
    """Swap every `nn.Dropout` of `model` for a FastDropout of the same rate; returns how many were swapped."""
    n = 0
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, FastDropout(child.p))
                n += 1
    return n


def attention_of(model: nn.Module) -> str | None:
    """The attention implementation a transformers model runs (its config's, as transformers reads it)."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) if config is not None else None


def route_attention(model: nn.Module) -> bool:
    """Route a model that uses SDPA attention through `attention` above (transformers' `set_attn_implementation`
    with the registered name); False where it does not use SDPA or the installed transformers has no attention
    registry (AttentionInterface, masking_utils, set_attn_implementation)."""
    if attention_of(model) != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    try:
        _register()
    except ImportError:
        return False
    model.set_attn_implementation(ATTN)
    return attention_of(model) == ATTN


def fast_dropout(model: nn.Module) -> nn.Module:
    """Swap in FastDropout modules and the attention above where the model uses SDPA. Returns the model."""
    swap_dropout(model)
    route_attention(model)
    return model


def restore_dropout(model: nn.Module) -> nn.Module:
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is FastDropout:
                setattr(parent, name, nn.Dropout(child.p))
    if attention_of(model) == ATTN:
        model.set_attn_implementation("sdpa")
    return model
