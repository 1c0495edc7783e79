"""The base of bertkit's built-in metrics: `evaluate` modules computed locally, with no hub script.

`metric_base(inputs, feature)` makes the base class of one kind of metric (what predictions and references are, and
their type); a metric subclasses it, sets `description_` and implements `_compute`. They plug into anything that
accepts an `evaluate.EvaluationModule`.

They are kept in memory: bertkit gathers every process's predictions before it scores them, so a metric needs none
of the cache files (and locks) `evaluate` writes by default under `~/.cache/huggingface/metrics`; and its folder
there is not made, so a home that cannot be written (a container run under another user) stops no evaluation.
"""

from __future__ import annotations

import os

import datasets
import evaluate


class LocalMetric(evaluate.Metric):
    description_: str = ""
    inputs_: str = ""
    features_: datasets.Features | None = None

    def __init__(self, *args, keep_in_memory: bool = True, **kwargs):
        super().__init__(*args, keep_in_memory=keep_in_memory, **kwargs)

    def _build_data_dir(self):  # evaluate makes this folder even for a metric kept in memory, which never uses it
        if self.keep_in_memory:
            return os.path.join(self._data_dir_root, self.name, self.config_name)
        return super()._build_data_dir()

    def _info(self):
        return evaluate.MetricInfo(description=self.description_, citation="", inputs_description=self.inputs_,
                                   features=self.features_)


def metric_base(inputs: str, feature) -> type[LocalMetric]:
    """A base class for metrics whose predictions and references are both of type `feature`."""
    features = datasets.Features({"predictions": feature, "references": feature})
    return type("Metric", (LocalMetric,), {"inputs_": inputs, "features_": features})
