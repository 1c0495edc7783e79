"""A task's `encode` and `score` as every caller uses them, with what the rest of bertkit relies on checked: one
line naming the task's method where a task of one's own breaks the contract (docs/tasks.md), not a traceback
from deep inside training or a predictions file short of rows."""

from __future__ import annotations

from ..errors import BertkitError


def encoded(task, examples):
    """`task.encode(examples)`: features with a `length` column (each feature's word pieces, which batching sorts
    by)."""
    features = task.encode(examples)
    if "length" not in getattr(features, "column_names", ()):
        raise BertkitError(f"{type(task).__name__}.encode gave no 'length' column (each feature's number of tokens, "
                           "by which batches are made: the task contract, docs/tasks.md)")
    return features


def scored(task, outputs, examples, features, metric_hooks) -> tuple[dict, list]:
    """`task.score(...)`: (metrics, one prediction per example, in their order)."""
    metrics, predictions = task.score(outputs, examples, features, metric_hooks)
    if len(predictions) != len(examples):
        raise BertkitError(f"{type(task).__name__}.score gave {len(predictions)} predictions for {len(examples)} "
                           "examples (one per example, in their order: the task contract, docs/tasks.md)")
    return metrics, predictions
