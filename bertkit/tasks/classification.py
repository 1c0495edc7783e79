"""Sequence (and sentence-pair) classification from the [CLS] vector: SST-2, and GLUE tasks alike.

Input `[CLS] text [SEP] (text_pair [SEP])` → BERT → pooled [CLS] (dense + tanh) → dropout → linear → logits.
Pairs are truncated longest-first; segment ids (token_type_ids) mark the second text. The head's `problem_type`
(Hugging Face's name, saved in the checkpoint) picks one of three heads: single-label (this module), regression
(`regression.py`) and multi-label (`multi_label.py`), which share what is here:
- long texts (`doc_pooling` mean/max): instead of keeping the first `max_length` word pieces, the tokenizer cuts the
  text (of a pair: the second text) into overlapping windows (`doc_window_overlap` pieces shared; its
  `return_overflowing_tokens`), each window a feature carrying the row of its text (`example_index`) and, in
  training, the text's label; evaluation and prediction pool the windows' logits per text (mean or max);
- class weights: a weighted cross-entropy in `compute_loss` (`scores.resolve_class_weights` turns 'balanced' into
  numbers from the training labels).
Data: GLUE TSV, CSV, JSONL or parquet through `bertkit/data/classification.py`; options in `ClassificationOptions`;
what `bertkit predict`, `serve` and the report need, outside training: `ClassificationIO` (classification_io.py).

Example:
```python
clf = SequenceClassification.from_pretrained("minilm-l6", label_names=["negative", "positive"])
clf.predict(["a gripping, funny film"])[0]["label"]  # one of label_names (a fresh head: train it first)
```
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

from ..batching import Columns
from ..data.classification import MULTI, REGRESSION, SINGLE, carved_name, load_classification_data, load_split
from ..errors import BertkitError
from ..feature_cache import cached_map
from ..metrics import BUILTIN, compute_metrics
from ..typed import option
from ..utils import quiet_maps
from .base import Task
from .classification_io import ClassificationIO
from .inputs import as_dataset, texts_of
from .multi_label import MultiLabelHead
from .regression import RegressionHead
from .scores import pool_windows, resolve_class_weights, softmax

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@dataclass(frozen=True)
class ClassificationOptions:
    """Options of sequence classification: where the texts and labels are, and the head. `dataset=True`: the
    option describes one data set (its files, columns, labels or head): `finetune glue` takes it from each task's
    recipe."""

    # data: columns and file format
    text_column: str = option("sentence", "Column with the text.", dataset=True, read=True)
    text_pair_column: str | None = option(None, "Column with the second text of a pair.", dataset=True, read=True)
    label_column: str = option("label", "Column with the label (a label name, or its index in label_names).",
                               dataset=True, read=True)
    label_names: list[str] = option([], "Label names in id order; they become id2label in the checkpoint (default: "
                                        "the training file's labels, sorted).", dataset=True)
    skip_labels: list[str] = option([], "Rows with these labels are skipped and counted (MultiNLI's '-': no "
                                        "majority).", dataset=True, read=True)
    columns: list[str] = option([], "Delimited files without a header row (CoLA, the STS Benchmark): names of their "
                                    "fields, in order; fields past these are ignored. A file whose first row names "
                                    "every column read is taken to have a header (GLUE's STS-B TSV).", dataset=True,
                                read=True)
    delimiter: str | None = option(None, "Field separator of delimited files: one character, or 'tab' (default: tab "
                                         "for .tsv, comma for .csv).", dataset=True, read=True)
    quoting: str = option("auto", "Delimited files: 'none' (GLUE: quote characters are text), 'csv' (quoted fields "
                                  "as pandas and spreadsheets write them; texts may span lines), or 'auto' (.csv: "
                                  "csv; tab-separated: none unless the file reads only as quoted).",
                          choices=["auto", "none", "csv"], dataset=True, read=True)
    carve_eval: int | None = option(None, "Train and evaluate on one labelled file, the first validation file, cut by "
                                          "a fixed rule (for tasks whose training set is missing, QNLI here): rows "
                                          "whose first text's SHA-256 modulo 100 is below N form the evaluation "
                                          "split, named '<file stem>_carved<N>' in results; the others train.")
    hub_columns: list[str] = option([], "Hub column names for text, (text pair,) label when they differ from the "
                                        "local files'.", dataset=True, read=True)
    # the head
    problem_type: str = option(SINGLE, "The head, Hugging Face's problem_type (saved in the checkpoint): "
                                       "single_label_classification (softmax, cross-entropy), regression (one output, "
                                       "MSE; numeric labels), multi_label_classification (a sigmoid per label, binary "
                                       "cross-entropy; a list of labels per row, or names joined by label_delimiter).",
                               choices=[SINGLE, REGRESSION, MULTI], dataset=True)
    label_delimiter: str = option(",", "Multi-label: separator of the label names in a text label field ('a,b').",
                                  dataset=True, read=True)
    threshold: float = option(0.5, "Multi-label: a label is predicted when its sigmoid probability is at least this.")
    class_weights: list[float] | str | None = option(None, "Loss weight per label (label_names order), or "
                                                           "'balanced': n / (labels × count), scikit-learn's rule "
                                                           "(multi-label: BCE pos_weight = negatives / positives per "
                                                           "label); recorded as numbers in the run config.",
                                                     dataset=True)
    doc_pooling: str = option("truncate", "Texts longer than max_length: 'truncate' (BERT: keep the first max_length "
                                          "word pieces), or classify overlapping windows of the text and pool their "
                                          "logits per text by 'mean' or 'max'.", choices=["truncate", "mean", "max"])
    doc_window_overlap: int | None = option(None, "doc_pooling mean/max: word pieces shared by consecutive windows "
                                                  "of a long text (default: a quarter of max_length).")

    @property
    def separator(self) -> str | None:
        return {"tab": "\t", "\\t": "\t"}.get(self.delimiter, self.delimiter)

    def validate(self, source: str) -> None:
        if self.separator is not None and len(self.separator) != 1:
            raise BertkitError(f"{source}: 'delimiter' must be one character or 'tab', got {self.delimiter!r}")
        if self.carve_eval is not None and not 0 < self.carve_eval < 100:
            raise BertkitError(f"{source}: 'carve_eval' must be a percentage between 1 and 99")
        if not 0 < self.threshold < 1:
            raise BertkitError(f"{source}: 'threshold' must be in (0, 1)")
        if self.doc_window_overlap is not None and self.doc_window_overlap < 0:
            raise BertkitError(f"{source}: 'doc_window_overlap' must be 0 or more")
        if isinstance(self.class_weights, str) and self.class_weights != "balanced":
            raise BertkitError(f"{source}: 'class_weights' must be 'balanced' or numbers, got {self.class_weights!r}")
        if isinstance(self.class_weights, list) and not all(w > 0 for w in self.class_weights):
            raise BertkitError(f"{source}: 'class_weights' must be positive")
        if self.class_weights is not None and self.problem_type == REGRESSION:
            raise BertkitError(f"{source}: 'class_weights' needs classes; a regression head has none")


class SequenceClassification(ClassificationIO, Task):
    name = "sequence-classification"
    Options = ClassificationOptions
    auto_model_class = AutoModelForSequenceClassification
    architecture = "ForSequenceClassification"
    pipeline_tag = "text-classification"
    problem_type = SINGLE  # Hugging Face's name, saved in the checkpoint's config
    metric_builtins = BUILTIN
    default_metrics = ("accuracy", "f1")
    input_fields = {"text": str}
    example_fields = ("text", "label")
    text_fields = ("text", "text_pair")

    def __init__(self, model, tokenizer, label_names=None, max_length: int | None = None, options=None):
        super().__init__(model, tokenizer, label_names, max_length, options)
        if self.options.problem_type != self.problem_type:
            self.options = replace(self.options, problem_type=self.problem_type)
        o = self.options
        model.config.problem_type = self.problem_type
        self.doc_pooling, self.threshold = o.doc_pooling, o.threshold
        self.window_overlap = self.max_length // 4 if o.doc_window_overlap is None else o.doc_window_overlap
        room = self.max_length - tokenizer.num_special_tokens_to_add(pair=False)
        if o.doc_pooling != "truncate" and not 0 <= self.window_overlap < room:
            raise BertkitError(f"doc_window_overlap {self.window_overlap} must be smaller than a window's room for "
                               f"text ({room} word pieces at max_length {self.max_length})")
        balanced = o.class_weights == "balanced"  # numbers from the training labels when `fit` starts (`fit_to`)
        self.class_weights = None if balanced else resolve_class_weights(o.class_weights, [], self.label_names,
                                                                         self.problem_type)
        self._collator = DataCollatorWithPadding(self.tokenizer)
        self._check_head()

    def _checked(self, data) -> datasets.Dataset:
        """A notebook's columns named as its files' are (`text_column`, ...: SST-2's `sentence`) read as `text`,
        `text_pair` and `label` where those are absent."""
        o, ds = self.options, as_dataset(data)
        given = ((o.text_column, "text"), (o.text_pair_column, "text_pair"), (o.label_column, "label"))
        names = {c: k for c, k in given if c and c != k and c in ds.column_names and k not in ds.column_names}
        return super()._checked(ds.rename_columns(names) if names else ds)

    # --- which head ------------------------------------------------------------------------------------------
    def _check_head(self) -> None:
        """A head's own checks of the model it was given."""

    @classmethod
    def resolve(cls, options):
        return HEADS[getattr(options, "problem_type", SINGLE)]

    @classmethod
    def for_checkpoint(cls, config: dict):
        if super().for_checkpoint(config) is None:
            return None
        return SequenceClassification.resolve(ClassificationOptions(problem_type=config.get("problem_type") or SINGLE))

    @classmethod
    def check_metrics(cls, metrics, options, source):
        own = cls.resolve(options)
        for name in metrics:
            other = next((c for c in HEADS.values()
                          if c is not own and name in c.metric_builtins and name not in own.metric_builtins), None)
            if other is not None:
                raise BertkitError(f"{source}: metric '{name}' is for {other.problem_type}; {own.problem_type} has "
                                   f"{', '.join(own.metric_builtins)} (e.g. --metrics "
                                   f"{','.join(own.default_metrics)} --main-metric {own.default_metrics[0]})")
        super().check_metrics(metrics, options, source)

    def run_options(self):  # doc_window_overlap as given: None is a quarter of the max_length the run records
        weights = self.class_weights if self.class_weights is not None else self.options.class_weights  # 'balanced'
        return replace(self.options, label_names=list(self.label_names), class_weights=weights)

    # --- data ------------------------------------------------------------------------------------------------
    @classmethod
    def load_data(cls, cfg):
        return load_classification_data(cfg, cfg.task_options)

    @classmethod
    def load_split(cls, cfg, split, label_names, file=None):
        return load_split(cfg, cfg.task_options, split, label_names, file)

    @classmethod
    def main_split(cls, cfg) -> str:
        carve = cfg.task_options.carve_eval  # a run on a carved split scores its evaluation part, not the whole file
        return carved_name(super().main_split(cfg), carve) if carve else super().main_split(cfg)

    @classmethod
    def prepare_options(cls, options, train, label_names, log=print):
        """Class weights 'balanced' become numbers computed from the training labels (recorded in config.yaml)."""
        options = super().prepare_options(options, train, label_names, log)
        if options.class_weights is None:
            return options
        weights = resolve_class_weights(options.class_weights, train["label"], label_names, options.problem_type)
        how = "balanced, from the training labels" if options.class_weights == "balanced" else "given"
        log(f"class weights ({how}): " + ", ".join(f"{n} {w:g}" for n, w in zip(label_names, weights, strict=True)))
        return replace(options, class_weights=weights)

    def fit_to(self, train, log=print) -> None:
        if self.options.class_weights == "balanced":  # a notebook's task; a run's options hold the numbers already
            self.class_weights = type(self).prepare_options(self.options, train, self.label_names, log).class_weights

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
            out["probabilities"] = {n: float(p) for n, p in zip(self.label_names, probs, strict=True)}
        return out

    def _gold(self, label):
        return self.label_names[label]

    def _weighted_loss(self, logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels, weight=weights)  # logits [batch, num_labels], labels [batch]

    # --- features and training -----------------------------------------------------------------------------
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

    def compute_loss(self, model, batch: dict) -> torch.Tensor:
        """The model's own loss, or with class weights a weighted one computed from its logits."""
        if self.class_weights is None:
            if self.options.class_weights == "balanced":
                raise BertkitError("class_weights 'balanced' are computed from the training labels when fit starts")
            return model(**batch).loss
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float()  # [batch, num_labels]
        return self._weighted_loss(logits, batch["labels"], self._weights_on(logits.device))

    def _weights_on(self, device: torch.device) -> torch.Tensor:
        """The class weights ([num_labels]) on `device`, made once: a copy from the host at every step would make a
        GPU wait for it, and cannot be captured in a CUDA graph (the graphed step would run eagerly)."""
        key = (device, tuple(self.class_weights))
        cached = getattr(self, "_weights", None)  # (key, tensor)
        if cached is None or cached[0] != key:
            self._weights = cached = (key, torch.tensor(self.class_weights, device=device))
        return cached[1]

    # --- answers ---------------------------------------------------------------------------------------------
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
            for p, gold in zip(predictions, examples["label"], strict=True):
                p["gold"] = self._gold(gold)
        metrics = compute_metrics(metric_hooks, *self._metric_inputs(logits, examples["label"])) \
            if metric_hooks and labelled else {}
        return metrics, predictions

    @quiet_maps()
    def predict(self, texts: list[str], text_pairs: list[str] | None = None, batch_size: int = 64,
                precision: str = "fp32", with_probs: bool = False) -> list[dict]:
        """One prediction per text (notebook use), pooled over its windows when it has several; input order kept. A
        single str is one text."""
        texts = texts_of(texts)
        pairs = texts_of(text_pairs, "text_pairs") if text_pairs is not None else None
        if pairs is not None and len(pairs) != len(texts):
            raise BertkitError(f"{len(texts)} texts but {len(pairs)} text_pairs")
        if not texts:
            return []
        cols = {"text": texts, **({"text_pair": pairs} if pairs is not None else {})}
        if self.doc_pooling == "truncate":  # one feature per text: tokenised straight into columns (no Arrow table)
            enc = self.tokenizer(cols["text"], cols.get("text_pair"), truncation=True, max_length=self.max_length)
            features = Columns({k: enc[k] for k in MODEL_INPUTS if k in enc})
            features.update(length=[len(ids) for ids in enc["input_ids"]], example_index=list(range(len(texts))))
        else:
            features = self.encode(datasets.Dataset.from_dict(cols))
        outputs = self.infer(features, batch_size, precision)
        return [self._prediction(row, with_probs) for row in self.logits(outputs, features, len(texts))]


class SequenceRegression(RegressionHead, SequenceClassification):
    """Sequence regression (STS-B): one output, MSE loss (`regression.py`)."""


class MultiLabelClassification(MultiLabelHead, SequenceClassification):
    """Any number of labels per text: a sigmoid per label, binary cross-entropy (`multi_label.py`)."""


HEADS = {SINGLE: SequenceClassification, REGRESSION: SequenceRegression, MULTI: MultiLabelClassification}
