"""Built-in classification metrics as `evaluate` modules computed locally with scikit-learn.

The hub's metric scripts (`evaluate.load("accuracy")`) need the network; these modules do not, and they plug into
anything that accepts an `evaluate.EvaluationModule`.

Example:
```python
>>> Accuracy().compute(predictions=[1, 0, 1], references=[1, 1, 1])
{'accuracy': 0.6666666666666666}
```
"""

from __future__ import annotations

import datasets
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from .base import metric_base

_SklearnMetric = metric_base("predictions and references: lists of class ids", datasets.Value("int64"))


class Accuracy(_SklearnMetric):
    description_ = "Fraction of predictions equal to the reference (scikit-learn accuracy_score)."

    def _compute(self, predictions, references):
        return {"accuracy": float(accuracy_score(references, predictions))}


class F1(_SklearnMetric):
    description_ = ("F1 of the positive class (label 1) for two classes, macro-averaged F1 otherwise "
                    "(scikit-learn f1_score).")

    def _compute(self, predictions, references, num_labels: int | None = None):
        binary = (num_labels or max([*predictions, *references, 1]) + 1) <= 2
        average = "binary" if binary else "macro"
        return {"f1": float(f1_score(references, predictions, average=average, zero_division=0))}


class MatthewsCorrelation(_SklearnMetric):
    description_ = "Matthews correlation coefficient (scikit-learn matthews_corrcoef), GLUE's CoLA metric."

    def _compute(self, predictions, references):
        return {"mcc": float(matthews_corrcoef(references, predictions))}


METRICS = {"accuracy": Accuracy, "f1": F1, "mcc": MatthewsCorrelation}
