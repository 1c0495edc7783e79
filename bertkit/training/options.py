"""Model options of a training run that are not the optimizer's: a re-initialised pooler and training-time dropout
rates. Both leave the saved files as a plain checkpoint of the model's own architecture and config."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import BertkitError


def reinit_pooler(model) -> None:
    """Fresh N(0, initializer_range) weights and zero bias for the pooler, from the seeded generator."""
    pooler = getattr(model.base_model, "pooler", None)
    if pooler is None:
        raise BertkitError("reinit_pooler: this model has no pooler (only sequence classification uses one)")
    for module in pooler.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data.normal_(0.0, model.config.initializer_range)
            module.bias.data.zero_()


def set_dropout(model: nn.Module, hidden: float | None = None, attention: float | None = None) -> dict[str, float]:
    """Training-time dropout rates: `attention` for the attention probabilities (the `dropout` of every
    `*SelfAttention` module), `hidden` for every other dropout (embeddings, sublayer outputs, classifier input);
    None leaves a rate as the checkpoint has it. model.config is not changed, so saved files keep the checkpoint's
    rates. Returns {module name: old rate} for `reset_dropout`."""
    old = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            parent = model.get_submodule(name.rpartition(".")[0])
            rate = attention if type(parent).__name__.endswith("SelfAttention") else hidden
            if rate is not None:
                old[name], module.p = module.p, float(rate)
    return old


def reset_dropout(model: nn.Module, old: dict[str, float]) -> None:
    """Put back the rates `set_dropout` replaced (by module name, so after `restore_dropout` too)."""
    for name, p in old.items():
        model.get_submodule(name).p = p
