"""Regression metrics (GLUE's STS-B): Pearson and Spearman correlation, mean squared error; computed locally.

Pearson and Spearman are scipy's `pearsonr` / `spearmanr` (GLUE's own scoring); where either side is constant the
correlation is undefined and reported as 0 (as scikit-learn's Matthews correlation does), so a model that predicts
one value everywhere never counts as the best checkpoint by accident of a NaN.
"""

from __future__ import annotations

import datasets
import numpy as np
from scipy.stats import pearsonr, spearmanr

from .base import metric_base

_RegressionMetric = metric_base("predictions and references: lists of numbers", datasets.Value("float64"))


def _correlation(fn, predictions, references) -> float:
    p, r = np.asarray(predictions, dtype=float), np.asarray(references, dtype=float)
    if len(p) < 2 or np.ptp(p) == 0 or np.ptp(r) == 0:
        return 0.0
    return float(fn(p, r)[0])


class Pearson(_RegressionMetric):
    description_ = "Pearson correlation of predictions and references (scipy.stats.pearsonr); 0 if one is constant."

    def _compute(self, predictions, references):
        return {"pearson": _correlation(pearsonr, predictions, references)}


class Spearman(_RegressionMetric):
    """Example:
    ```python
    >>> Spearman().compute(predictions=[0.1, 0.4, 0.3], references=[1.0, 5.0, 4.0])
    {'spearman': 1.0}
    ```
    """

    description_ = "Spearman rank correlation (scipy.stats.spearmanr), GLUE's STS-B metric; 0 if one is constant."

    def _compute(self, predictions, references):
        return {"spearman": _correlation(spearmanr, predictions, references)}


class MeanSquaredError(_RegressionMetric):
    description_ = "Mean squared error (lower is better; the training loss of a regression head)."

    def _compute(self, predictions, references):
        diff = np.asarray(predictions, dtype=float) - np.asarray(references, dtype=float)
        return {"mse": float(np.mean(diff**2))}


METRICS = {"pearson": Pearson, "spearman": Spearman, "mse": MeanSquaredError}
