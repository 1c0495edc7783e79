"""The base of bertkit's built-in metrics: `evaluate` modules computed locally, with no hub script.

`metric_base(inputs, feature)` makes the base class of one kind of metric (what predictions and references are, and
their type); a metric subclasses it, sets `description_` and implements `_compute`. They plug into anything that
accepts an `evaluate.EvaluationModule`.
"""

from __future__ import annotations

import datasets
import evaluate


class LocalMetric(evaluate.Metric):
    description_: str = ""
    inputs_: str = ""
    features_: datasets.Features | None = None

    def _info(self):
        return evaluate.MetricInfo(description=self.description_, citation="", inputs_description=self.inputs_,
                                   features=self.features_)


def metric_base(inputs: str, feature) -> type[LocalMetric]:
    """A base class for metrics whose predictions and references are both of type `feature`."""
    features = datasets.Features({"predictions": feature, "references": feature})
    return type("Metric", (LocalMetric,), {"inputs_": inputs, "features_": features})
