"""Multi-label classification: any number of labels per text, a sigmoid per label and binary cross-entropy.

The head is Hugging Face's `BertForSequenceClassification` with `problem_type: multi_label_classification` in the
saved config: plain `AutoModelForSequenceClassification` then computes the same BCE loss from float 0/1 targets,
and `sigmoid(logits) >= threshold` gives the labels. Examples carry a list of label ids (`label`); features a
0/1 float row (`labels`, one entry per label). Class weights become BCE's `pos_weight`. Long texts are windowed
and pooled as in `classification.py` (logits pooled, then the sigmoid).

Example:
```python
clf = MultiLabelClassification.from_pretrained("runs/topics")  # a multi-label run
clf.predict(["rates rise as the central bank meets"])[0]  # {'labels': [the labels above threshold], 'scores': {...}}
```
"""

from __future__ import annotations

import datasets
import numpy as np
import torch
import torch.nn.functional as F

from ..data.classification import MULTI
from ..errors import BertkitError
from ..metrics import MULTI_LABEL_BUILTIN


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


class MultiLabelHead:
    """What differs from single-label classification (mixed into `classification.MultiLabelClassification`)."""

    problem_type = MULTI
    metric_builtins = MULTI_LABEL_BUILTIN
    default_metrics = ("micro_f1", "macro_f1", "subset_accuracy")

    def examples(self, data) -> datasets.Dataset:
        """Examples whose `label` is a list of label ids (names are mapped to ids; anything else is refused, the
        row named)."""
        ds = self._checked(data)
        names = self.label_names
        for i, ids in enumerate(ds["label"] if "label" in ds.column_names else []):
            if isinstance(ids, str) or not isinstance(ids, list):
                raise BertkitError(f"row {i}: label {ids!r}: a multi-label example's label is a list of names or ids")
            odd = next((x for x in ids if x not in names and not (type(x) is int and 0 <= x < len(names))), None)
            if odd is not None:
                raise BertkitError(f"row {i}: label {odd!r} is neither one of {names} nor an id 0-{len(names) - 1}")
        if "label" in ds.column_names and any(isinstance(x, str) for ids in ds["label"] for x in ids):
            ds = ds.map(lambda ex: {"label": sorted({x if isinstance(x, int) else names.index(x)
                                                     for x in ex["label"]})})
        return ds

    def _target(self, label) -> list[float]:
        row = [0.0] * len(self.label_names)  # [num_labels] 0/1 indicators
        for i in label:
            row[i] = 1.0
        return row

    def _indicators(self, labels) -> list[list[int]]:
        return [[int(v) for v in self._target(ids)] for ids in labels]

    def _metric_inputs(self, logits: np.ndarray, labels: list) -> tuple[list, list]:
        predicted = (sigmoid(logits) >= self.threshold).astype(int)  # [examples, num_labels]
        return predicted.tolist(), self._indicators(labels)

    def _prediction(self, logits: np.ndarray, with_probs: bool = False) -> dict:
        probs = sigmoid(logits)  # [num_labels]
        chosen = np.flatnonzero(probs >= self.threshold)
        out = {"labels": [self.label_names[i] for i in chosen],
               "scores": {self.label_names[i]: float(probs[i]) for i in chosen}}
        if with_probs:
            out["probabilities"] = {n: float(p) for n, p in zip(self.label_names, probs, strict=True)}
        return out

    def _gold(self, label) -> list[str]:
        return [self.label_names[i] for i in label]

    def _weighted_loss(self, logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        # logits, labels [batch, num_labels]; weights [num_labels] multiply each label's positive term
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=weights)
