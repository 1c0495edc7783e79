"""Sequence (and sentence-pair) classification from the [CLS] vector: SST-2, and GLUE tasks alike.

Input `[CLS] text [SEP] (text_pair [SEP])` → BERT → pooled [CLS] (dense + tanh) → dropout → linear → logits.
Pairs are truncated longest-first; segment ids (token_type_ids) mark the second text. The same module holds what
every sequence-classification head shares (the regression and multi-label heads subclass it):
- long texts (`doc_pooling` mean/max): instead of keeping the first `max_length` word pieces, the tokenizer cuts the
  text (of a pair: the second text) into overlapping windows (`doc_window_overlap` pieces shared; its
  `return_overflowing_tokens`), each window a feature carrying the row of its text (`example_index`) and, in
  training, the text's label; evaluation and prediction pool the windows' logits per text (mean or max);
- class weights: a weighted cross-entropy in `compute_loss` (`resolve_class_weights` turns 'balanced' into
  numbers from the training labels).

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
import torch
import torch.nn.functional as F
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

from ..data.classification import load_classification_data, load_split
from ..errors import BertkitError
from ..feature_cache import cached_map
from ..metrics import compute_metrics
from .base import Adapter

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


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
    if problem_type == "multi_label_classification":
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


class SequenceClassification(Adapter):
    name = "sequence-classification"
    data_loader, split_loader = staticmethod(load_classification_data), staticmethod(load_split)
    auto_model_class = AutoModelForSequenceClassification
    problem_type = "single_label_classification"  # Hugging Face's name, saved in the checkpoint's config

    def __init__(self, model, tokenizer, label_names=None, max_length: int | None = None,
                 doc_pooling: str = "truncate", doc_window_overlap: int | None = None,
                 class_weights: list[float] | None = None, threshold: float = 0.5):
        super().__init__(model, tokenizer, label_names, max_length)
        model.config.problem_type = self.problem_type
        self.doc_pooling, self.threshold = doc_pooling, threshold
        self.window_overlap = self.max_length // 4 if doc_window_overlap is None else doc_window_overlap
        room = self.max_length - tokenizer.num_special_tokens_to_add(pair=False)
        if doc_pooling != "truncate" and not 0 <= self.window_overlap < room:
            raise BertkitError(f"doc_window_overlap {self.window_overlap} must be smaller than a window's room for "
                               f"text ({room} word pieces at max_length {self.max_length})")
        if isinstance(class_weights, str):
            raise BertkitError(f"class_weights {class_weights!r} needs the training labels: pass the numbers of "
                               "resolve_class_weights('balanced', labels, label_names, problem_type)")
        self.class_weights = resolve_class_weights(class_weights, [], self.label_names, self.problem_type)
        self._collator = DataCollatorWithPadding(self.tokenizer)

    @classmethod
    def options_from_config(cls, cfg) -> dict:
        # class_weights 'balanced' must have been resolved into numbers (bertkit finetune does it from the data)
        return dict(doc_pooling=cfg.doc_pooling, doc_window_overlap=cfg.doc_window_overlap,
                    class_weights=cfg.class_weights, threshold=cfg.threshold)

    def run_fields(self) -> dict:
        return {**super().run_fields(), "problem_type": self.problem_type, "doc_pooling": self.doc_pooling,
                "doc_window_overlap": self.window_overlap, "class_weights": self.class_weights,
                "threshold": self.threshold}


    # --- what differs between heads (regression.py and multi_label.py override these) --------------------------
    def _target(self, label):
        """An example's label → the `labels` entry of its features (a class id here)."""
        return label

    def _metric_inputs(self, logits: np.ndarray, labels: list) -> tuple[list, list]:
        return logits.argmax(-1).tolist(), list(labels)  # predicted and gold class ids

    def _prediction(self, logits: np.ndarray, with_probs: bool = False) -> dict:
        probs = softmax(logits)  # [num_labels]
        k = int(probs.argmax())
        out = {"label": self.label_names[k], "score": float(probs[k])}
        if with_probs:
            out["probabilities"] = {n: float(p) for n, p in zip(self.label_names, probs)}
        return out

    def _gold(self, label):
        return self.label_names[label]

    def _weighted_loss(self, logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels, weight=weights)  # logits [batch, num_labels], labels [batch]

    # --- the adapter contract ------------------------------------------------------------------------------
    def encode(self, examples: datasets.Dataset) -> datasets.Dataset:
        """Texts (and pairs) → features: model inputs, `length`, `example_index` (the row of the text), `labels`.
        One feature per text, or with `doc_pooling` mean/max one per window of a long text."""
        has_pair = "text_pair" in examples.column_names
        windows = self.doc_pooling != "truncate"

        def tokenize(batch, indices):
            kwargs = dict(truncation="only_second" if windows and has_pair else True, max_length=self.max_length)
            if windows:
                kwargs.update(return_overflowing_tokens=True, stride=self.window_overlap)
            try:
                enc = self.tokenizer(batch["text"], batch["text_pair"] if has_pair else None, **kwargs)
            except Exception as e:  # the tokenizers library raises its own error types for impossible windows
                raise BertkitError(f"cannot cut these texts into windows of {self.max_length} word pieces with "
                                   f"{self.window_overlap} shared ({e}); a pair's first text must fit in a window "
                                   "with room to spare") from None
            owner = enc["overflow_to_sample_mapping"] if windows else range(len(enc["input_ids"]))  # feature → row
            out = {k: enc[k] for k in MODEL_INPUTS if k in enc}
            out["length"] = [len(ids) for ids in enc["input_ids"]]
            out["example_index"] = [indices[i] for i in owner]
            if "label" in batch:
                out["labels"] = [self._target(batch["label"][i]) for i in owner]
            return out

        identity = {"adapter": type(self).__name__, "max_length": self.max_length, "pair": has_pair,
                    "problem_type": self.problem_type, "labels": len(self.label_names), "doc_pooling": windows,
                    "overlap": self.window_overlap if windows else None}
        return cached_map(examples, tokenize, self.tokenizer, identity, with_indices=True,
                          desc="tokenize" if len(examples) > 10_000 else None)

    def collate(self, features: list[dict]) -> dict:
        keep = (*MODEL_INPUTS, "labels")
        return self._collator([{k: f[k] for k in keep if k in f} for f in features])  # pad to the longest

    def compute_loss(self, model, batch: dict) -> torch.Tensor:
        """The model's own loss, or with class weights a weighted one computed from its logits."""
        if self.class_weights is None:
            return model(**batch).loss
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float()  # [batch, num_labels]
        weights = torch.tensor(self.class_weights, device=logits.device)  # [num_labels]
        return self._weighted_loss(logits, batch["labels"], weights)

    def logits(self, outputs: list[dict], features: datasets.Dataset, num_examples: int) -> np.ndarray:
        """[num_examples, num_labels]: each text's logits, pooled over its windows."""
        stacked = np.stack([o["logits"] for o in outputs])  # [features, num_labels]
        how = "max" if self.doc_pooling == "max" else "mean"
        return pool_windows(stacked, features["example_index"], num_examples, how)

    def score(self, outputs, examples, features, metric_hooks):
        logits = self.logits(outputs, features, len(examples))
        predictions = [self._prediction(row) for row in logits]
        labelled = "label" in examples.column_names
        if labelled:
            for p, gold in zip(predictions, examples["label"]):
                p["gold"] = self._gold(gold)
        metrics = compute_metrics(metric_hooks, *self._metric_inputs(logits, examples["label"])) \
            if metric_hooks and labelled else {}
        return metrics, predictions

    def predict(self, texts: list[str], text_pairs: list[str] | None = None, batch_size: int = 64,
                precision: str = "fp32", with_probs: bool = False) -> list[dict]:
        """One prediction per text (notebook use), pooled over its windows when it has several; input order kept."""
        cols = {"text": list(texts), **({"text_pair": list(text_pairs)} if text_pairs is not None else {})}
        features = self.encode(datasets.Dataset.from_dict(cols))
        outputs = self.infer(features, batch_size, precision)
        return [self._prediction(row, with_probs) for row in self.logits(outputs, features, len(texts))]
