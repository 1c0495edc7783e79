"""Multi-label classification metrics over 0/1 indicator rows (one column per label), with scikit-learn.

- `micro_f1`: F1 over all (example, label) decisions pooled;
- `macro_f1`: the mean of the per-label F1s (a label never predicted nor present counts as 0, scikit-learn's
  `zero_division=0`);
- `subset_accuracy`: fraction of examples whose whole label set is exactly right.

Example:
```python
>>> MicroF1().compute(predictions=[[1, 0], [1, 1]], references=[[1, 0], [0, 1]])
{'micro_f1': 0.8}
```
"""

from __future__ import annotations

import datasets
import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from .base import metric_base

_MultiLabelMetric = metric_base("predictions and references: one 0/1 list per example, one entry per label",
                                datasets.Sequence(datasets.Value("int64")))


def _f1(predictions, references, average: str) -> float:
    return float(f1_score(np.asarray(references), np.asarray(predictions), average=average, zero_division=0))


class MicroF1(_MultiLabelMetric):
    description_ = "F1 over all (example, label) decisions (scikit-learn f1_score, average='micro')."

    def _compute(self, predictions, references):
        return {"micro_f1": _f1(predictions, references, "micro")}


class MacroF1(_MultiLabelMetric):
    description_ = "Mean of the per-label F1s (scikit-learn f1_score, average='macro')."

    def _compute(self, predictions, references):
        return {"macro_f1": _f1(predictions, references, "macro")}


class SubsetAccuracy(_MultiLabelMetric):
    description_ = "Fraction of examples whose predicted label set equals the reference set exactly."

    def _compute(self, predictions, references):
        return {"subset_accuracy": float(accuracy_score(np.asarray(references), np.asarray(predictions)))}


METRICS = {"micro_f1": MicroF1, "macro_f1": MacroF1, "subset_accuracy": SubsetAccuracy}
