"""Numbers the tasks compute from logits and labels, in numpy (no model, no tokenizer): a softmax, the logits of a
long text's windows pooled into one row per text (classification's `doc_pooling`), and class weights from the
training labels (classification's `class_weights: balanced`)."""

from __future__ import annotations

import numpy as np

from ..data.classification import MULTI
from ..errors import BertkitError


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)  # [..., num_labels]
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def pool_windows(logits: np.ndarray, example_index, num_examples: int, how: str = "mean") -> np.ndarray:
    """[features, num_labels] window logits → [num_examples, num_labels]: the mean or the max over each example's
    windows (an example with one window keeps its logits)."""
    owner = np.asarray(example_index)  # [features] → row of the example
    counts = np.bincount(owner, minlength=num_examples)  # [examples]
    if (counts == 0).any():
        raise RuntimeError(f"examples {np.flatnonzero(counts == 0).tolist()[:5]} have no window")
    if how == "max":
        pooled = np.full((num_examples, logits.shape[1]), -np.inf, dtype=logits.dtype)
        np.maximum.at(pooled, owner, logits)
        return pooled
    pooled = np.zeros((num_examples, logits.shape[1]), dtype=np.float64)
    np.add.at(pooled, owner, logits)
    return (pooled / counts[:, None]).astype(logits.dtype)


def resolve_class_weights(spec, labels, label_names: list[str], problem_type: str) -> list[float] | None:
    """'balanced' → one weight per label from the training labels (ids, or id lists for multi-label); a list is
    checked against the label count.

    Single label: n / (labels × count), scikit-learn's `compute_class_weight('balanced')`. Multi-label: BCE
    `pos_weight` = examples without the label / examples with it (torch's BCEWithLogitsLoss documentation)."""
    if spec is None:
        return None
    if isinstance(spec, list):
        if len(spec) != len(label_names):
            raise BertkitError(f"class_weights has {len(spec)} values but there are {len(label_names)} labels "
                               f"({', '.join(label_names)})")
        return [float(w) for w in spec]
    if problem_type == MULTI:
        counts = np.zeros(len(label_names))  # [labels] examples with the label
        for ids in labels:
            counts[list(ids)] += 1
        negatives = len(labels) - counts
    else:
        counts = np.bincount(np.asarray(labels, dtype=int), minlength=len(label_names)).astype(float)
        negatives = len(labels) / len(label_names)  # n / labels, divided by the count below
    if (counts == 0).any():
        missing = [label_names[i] for i in np.flatnonzero(counts == 0)]
        raise BertkitError(f"class_weights balanced: label(s) {', '.join(missing)} never occur in the training data; "
                           "give the weights as numbers")
    return [round(float(w), 6) for w in negatives / counts]
