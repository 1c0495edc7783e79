"""Sequence regression (GLUE's STS-B, or any numeric label): one output read from the [CLS] vector, MSE loss.

The head is Hugging Face's `BertForSequenceClassification` with `num_labels=1` and `problem_type: regression` in
the saved config, so plain `AutoModelForSequenceClassification` computes the same loss and outputs the same value:
`model(**inputs).logits[:, 0]`. Long texts are windowed and pooled as in `classification.py`.

Example:
```python
reg = SequenceRegression.from_pretrained("runs/stsb")  # a run of `bertkit finetune stsb`
reg.predict(["A man is playing a flute."], ["A man plays the flute."])[0]  # {'value': the predicted score}
```
"""

from __future__ import annotations

import datasets
import numpy as np

from ..data.classification import REGRESSION
from ..errors import BertkitError
from ..metrics import REGRESSION_BUILTIN
from ..models import checkpoint_config


class RegressionHead:
    """What differs from single-label classification (mixed into `classification.SequenceRegression`)."""

    problem_type = REGRESSION
    metric_builtins = REGRESSION_BUILTIN
    default_metrics = ("pearson", "spearman", "mse")
    lower_is_better = frozenset({"mse"})

    @classmethod
    def _load_model(cls, name: str, label_names, allow_pickle: bool):
        """A checkpoint without a regression head gets one output, named "score" (the stsb recipe's name) where no
        name is given."""
        if not label_names and checkpoint_config(name).get("problem_type") != REGRESSION:
            label_names = ["score"]
        return super()._load_model(name, label_names, allow_pickle)

    def _check_head(self) -> None:
        if self.model.config.num_labels != 1:
            raise BertkitError(f"a regression head has one output; this model has {self.model.config.num_labels}")
        if self.class_weights is not None:
            raise BertkitError("class_weights need classes; a regression head has none")

    def examples(self, data) -> datasets.Dataset:
        """Examples with float labels (numbers written as text are converted)."""
        ds = self._checked(data)
        if "label" in ds.column_names and len(ds) and not isinstance(ds[0]["label"], float):
            try:
                ds = ds.cast_column("label", datasets.Value("float64"))
            except (TypeError, ValueError) as e:
                raise BertkitError(f"regression labels must be numbers: {e}") from None
        return ds

    def _target(self, label) -> float:
        return float(label)

    def _metric_inputs(self, logits: np.ndarray, labels: list) -> tuple[list, list]:
        return logits[:, 0].tolist(), [float(x) for x in labels]  # predicted and gold values

    def _prediction(self, logits: np.ndarray, with_probs: bool = False) -> dict:
        return {"value": float(logits[0])}

    def _gold(self, label) -> float:
        return float(label)
