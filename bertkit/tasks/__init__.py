"""Task adapters: one module per task over the common `Adapter` contract in `base.py`."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import BertkitError
from ..models import resolve_model
from .base import Adapter
from .classification import SequenceClassification
from .multi_label import MultiLabelClassification
from .question_answering import QuestionAnswering
from .regression import SequenceRegression
from .token_classification import TokenClassification

ADAPTERS: dict[str, type[Adapter]] = {cls.name: cls for cls in (SequenceClassification, TokenClassification,
                                                                 QuestionAnswering)}
# checkpoint architecture suffix → adapter, for `evaluate` and `predict` on a saved run
HEADS = {"ForSequenceClassification": SequenceClassification, "ForTokenClassification": TokenClassification,
         "ForQuestionAnswering": QuestionAnswering}
# sequence-classification heads by problem_type (run config, checkpoint config); any other: SequenceClassification
PROBLEM_TYPES = {"regression": SequenceRegression, "multi_label_classification": MultiLabelClassification}


def get_adapter_class(name: str, problem_type: str | None = None) -> type[Adapter]:
    if name not in ADAPTERS:
        raise BertkitError(f"unknown adapter '{name}' (available: {', '.join(ADAPTERS)})")
    if ADAPTERS[name] is SequenceClassification:
        return PROBLEM_TYPES.get(problem_type, SequenceClassification)
    return ADAPTERS[name]


def head_class(name: str) -> type[Adapter] | None:
    """The adapter class of a local checkpoint's task head, from its config's architectures; None for a base model
    (or a hub id). Loads nothing."""
    path, local = resolve_model(name)
    config = json.loads((Path(path) / "config.json").read_text()) if local else {}
    for arch in config.get("architectures") or []:
        for suffix, cls in HEADS.items():
            if arch.endswith(suffix):  # a sequence classifier's problem_type picks regression or multi-label
                return PROBLEM_TYPES.get(config.get("problem_type"), cls) if cls is SequenceClassification else cls
    return None


def adapter_class_for_checkpoint(name: str) -> tuple[type[Adapter], str]:
    """(adapter class, local path) of a fine-tuned checkpoint, from its config's architectures; loads nothing."""
    path, local = resolve_model(name)
    if not local:
        raise BertkitError(f"model folder not found: {name}")
    cls = head_class(name)
    if cls is None:
        architectures = json.loads((Path(path) / "config.json").read_text()).get("architectures")
        raise BertkitError(f"{path} is not a fine-tuned checkpoint bertkit knows (architectures: {architectures}); "
                           f"expected one of: {', '.join('*' + s for s in HEADS)}")
    return cls, path


def adapter_for_checkpoint(name: str, allow_pickle: bool = False) -> Adapter:
    cls, path = adapter_class_for_checkpoint(name)
    return cls.from_pretrained(path, allow_pickle=allow_pickle)


__all__ = ["ADAPTERS", "Adapter", "MultiLabelClassification", "QuestionAnswering", "SequenceClassification",
           "SequenceRegression", "TokenClassification", "adapter_class_for_checkpoint", "adapter_for_checkpoint",
           "get_adapter_class", "head_class"]
