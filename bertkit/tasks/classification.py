"""Sequence (and sentence-pair) classification from the [CLS] vector: SST-2, and GLUE tasks alike.

Input `[CLS] text [SEP] (text_pair [SEP])` → BERT → pooled [CLS] (dense + tanh) → dropout → linear → logits.
Pairs are truncated longest-first; segment ids (token_type_ids) mark the second text.

Example:
```python
>>> clf = SequenceClassification.from_pretrained("minilm-l6", label_names=["negative", "positive"])
>>> clf.predict(["a gripping, funny film"])[0]["label"] in ("negative", "positive")
True
```
"""

from __future__ import annotations

import datasets
import numpy as np
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

from ..data.classification import load_classification_data, load_split
from ..feature_cache import cached_map
from ..metrics import compute_metrics
from .base import Adapter


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)  # [..., num_labels]
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class SequenceClassification(Adapter):
    auto_model_class = AutoModelForSequenceClassification

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._collator = DataCollatorWithPadding(self.tokenizer)

    @classmethod
    def load_data(cls, cfg):
        return load_classification_data(cfg)

    @classmethod
    def load_split(cls, cfg, split, label_names, file=None):
        return load_split(cfg, split, label_names, file)

    def encode(self, examples: datasets.Dataset) -> datasets.Dataset:
        has_pair = "text_pair" in examples.column_names

        def tokenize(batch):
            enc = self.tokenizer(batch["text"], batch["text_pair"] if has_pair else None, truncation=True,
                                 max_length=self.max_length)
            enc["length"] = [len(ids) for ids in enc["input_ids"]]
            if "label" in batch:
                enc["labels"] = batch["label"]
            return enc

        identity = {"adapter": type(self).__name__, "max_length": self.max_length, "pair": has_pair}
        return cached_map(examples, tokenize, self.tokenizer, identity,
                          desc="tokenize" if len(examples) > 10_000 else None)

    def collate(self, features: list[dict]) -> dict:
        features = [{k: v for k, v in f.items() if k != "length"} for f in features]
        return self._collator(features)  # dynamic padding to the longest in the batch

    def score(self, outputs, examples, features, metric_hooks):
        logits = np.stack([o["logits"] for o in outputs])  # [examples, num_labels]
        probs = softmax(logits)
        preds = probs.argmax(-1)
        predictions = [self._prediction(p) for p in probs]
        if "label" in examples.column_names:
            for p, gold in zip(predictions, examples["label"]):
                p["gold"] = self.label_names[gold]
        metrics = compute_metrics(metric_hooks, preds.tolist(), list(examples["label"])) if metric_hooks else {}
        return metrics, predictions

    def _prediction(self, probs: np.ndarray, with_probs: bool = False) -> dict:
        k = int(probs.argmax())
        out = {"label": self.label_names[k], "score": float(probs[k])}
        if with_probs:
            out["probabilities"] = {n: float(p) for n, p in zip(self.label_names, probs)}
        return out

    def predict(self, texts: list[str], text_pairs: list[str] | None = None, batch_size: int = 64,
                precision: str = "fp32", with_probs: bool = False) -> list[dict]:
        """Label and score for each text (notebook use). Order of the input is kept."""
        cols = {"text": list(texts), **({"text_pair": list(text_pairs)} if text_pairs is not None else {})}
        features = self.encode(datasets.Dataset.from_dict(cols))
        outputs = self.infer(features, batch_size, precision)
        return [self._prediction(softmax(o["logits"]), with_probs) for o in outputs]
