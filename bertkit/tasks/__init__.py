"""Tasks: one module per task over the contract in `base.py`, found by name through the registry (`registry.py`).

Built in: sequence-classification (with its regression and multi-label heads), token-classification,
question-answering, multiple-choice. Add one with `bertkit.register_task` or a package's `bertkit.tasks` entry
point (docs/design.md, examples/custom_task.py).
"""

from __future__ import annotations

from .base import Adapter, NoOptions, Task
from .classification import ClassificationOptions, SequenceClassification
from .multi_label import MultiLabelClassification
from .multiple_choice import MultipleChoice, MultipleChoiceOptions
from .question_answering import QuestionAnswering, QuestionAnsweringOptions
from .registry import checkpoint_task, get_task, head_task, register_task, task_names
from .regression import SequenceRegression
from .token_classification import TokenClassification, TokenClassificationOptions


def load_task(name: str, allow_pickle: bool = False) -> Task:
    """The task of a fine-tuned model folder (a run, or any checkpoint with a known head), loaded with its
    weights, options and max length."""
    cls, path = checkpoint_task(name)
    return cls.from_pretrained(path, allow_pickle=allow_pickle)


adapter_for_checkpoint = load_task  # the 0.2 name

__all__ = ["Adapter", "ClassificationOptions", "MultiLabelClassification", "MultipleChoice", "MultipleChoiceOptions",
           "NoOptions", "QuestionAnswering", "QuestionAnsweringOptions", "SequenceClassification",
           "SequenceRegression", "Task", "TokenClassification", "TokenClassificationOptions", "adapter_for_checkpoint",
           "checkpoint_task", "get_task", "head_task", "load_task", "register_task", "task_names"]
