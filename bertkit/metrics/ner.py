"""Entity-level NER metrics as `evaluate` modules computed locally with seqeval, the way conlleval counts.

An entity is a maximal run of tags of one type that starts with `B-T`, or with an `I-T` after `O` or after another
type (seqeval's default, non-strict mode is a port of conlleval's chunk rules). An entity is correct when the
predicted and the gold entity have the same type, start and end. Precision, recall and F1 are micro-averaged over
all entities and given as fractions (like the classification metrics; conlleval prints percentages).

Inputs are lists of sentences, each a list of tag strings (`predictions`: the model's, `references`: the gold ones).

Example:
```python
>>> EntityScores().compute(predictions=[["B-PER", "I-PER", "O"]], references=[["B-PER", "I-PER", "B-LOC"]])
{'precision': 1.0, 'recall': 0.5, 'f1': 0.6666666666666666,
 'per_type': {'LOC': {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 1},
              'PER': {'precision': 1.0, 'recall': 1.0, 'f1': 1.0, 'support': 1}}}
```
"""

from __future__ import annotations

import datasets
from seqeval.metrics.sequence_labeling import accuracy_score, get_entities, precision_recall_fscore_support

from .base import metric_base

_SeqevalMetric = metric_base("predictions and references: lists of sentences of tag strings",
                             datasets.Sequence(datasets.Value("string")))


def _micro(predictions, references) -> dict[str, float]:
    p, r, f, _ = precision_recall_fscore_support(references, predictions, average="micro", zero_division=0)
    return {"precision": float(p), "recall": float(r), "f1": float(f)}


def _per_type(predictions, references) -> dict[str, dict]:
    """{type: {precision, recall, f1, support}} for every type in the gold or the predicted entities."""
    types = sorted({t for t, _, _ in get_entities(references)} | {t for t, _, _ in get_entities(predictions)})
    p, r, f, s = precision_recall_fscore_support(references, predictions, average=None, zero_division=0)
    return {t: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(s[i])}
            for i, t in enumerate(types)}  # seqeval orders its per-type arrays by sorted type name


class EntityScores(_SeqevalMetric):
    description_ = "Entity-level precision, recall and F1 (micro) with a per-type table, as conlleval counts them."

    def _compute(self, predictions, references):
        return {**_micro(predictions, references), "per_type": _per_type(predictions, references)}


class _MicroScore(_SeqevalMetric):
    key = ""  # precision, recall or f1

    def _compute(self, predictions, references):
        return {self.key: _micro(predictions, references)[self.key]}


class EntityPrecision(_MicroScore):
    key, description_ = "precision", "Correct predicted entities / predicted entities (conlleval's, as a fraction)."


class EntityRecall(_MicroScore):
    key, description_ = "recall", "Correct predicted entities / gold entities (conlleval's recall, as a fraction)."


class EntityF1(_MicroScore):
    key, description_ = "f1", "Harmonic mean of entity precision and recall (conlleval's FB1, as a fraction)."


class EntityTypes(_SeqevalMetric):
    description_ = "Per entity type: precision, recall, F1 and support (number of gold entities)."

    def _compute(self, predictions, references):
        return {"per_type": _per_type(predictions, references)}


class TagAccuracy(_SeqevalMetric):
    description_ = "Fraction of words whose predicted tag equals the gold tag (conlleval's accuracy)."

    def _compute(self, predictions, references):
        return {"accuracy": float(accuracy_score(references, predictions))}


# the metric names a token-classification recipe may list (they mean something else for sequence classification)
METRICS = {"precision": EntityPrecision, "recall": EntityRecall, "f1": EntityF1, "per_type": EntityTypes,
           "accuracy": TagAccuracy, "seqeval": EntityScores}
