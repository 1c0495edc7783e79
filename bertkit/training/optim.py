"""What the trainer optimises: AdamW parameter groups (weight decay, layer-wise learning rates). The
learning-rate schedule scales every group's rate alike.

Names are matched with or without the prefixes that FSDP (`_fsdp_wrapped_module.`) or DDP (`module.`) add, so
the groups are right when the optimizer is built from a wrapped model."""

from __future__ import annotations

import re

import torch

from ..config import RunConfig


def _depth(name: str, layers: int) -> int:
    """0 for the embeddings, i + 1 for transformer layer i, layers + 1 for everything above (pooler, head)."""
    if ".embeddings." in f".{name}":
        return 0
    match = re.search(r"\.layers?\.(\d+)\.", name)  # BERT-like `layer.N`, ModernBERT's `layers.N`
    return int(match.group(1)) + 1 if match else layers + 1


def build_optimizer(model, cfg: RunConfig) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and norm weights (the one-dimensional parameters); per-layer learning rates
    when layer_lr_decay < 1 (ALBERT's one shared layer counts as the top)."""
    layers = model.config.num_hidden_layers
    groups: dict[tuple, list] = {}
    for n, p in model.named_parameters():
        if p.requires_grad:
            scale = cfg.layer_lr_decay ** (layers + 1 - _depth(n, layers)) if cfg.layer_lr_decay < 1 else 1.0
            decay = 0.0 if p.ndim < 2 else cfg.weight_decay  # not on biases and norm weights (any family's names)
            groups.setdefault((scale, decay), []).append(p)
    groups = [{"params": ps, "lr": cfg.lr * scale, "weight_decay": wd} for (scale, wd), ps in groups.items()]
    try:
        return torch.optim.AdamW(groups, lr=cfg.lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=cfg.lr)
