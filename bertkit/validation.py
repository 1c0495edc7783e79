"""Checks on config values: strict types, ranges, metric names and the options each head accepts.

`config.apply` runs them on every recipe, override and command line; each failure is a `BertkitError` naming
its source (the recipe file, `model_overrides.NAME` or `command line`) and the field.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import BertkitError

if TYPE_CHECKING:
    from .config import FinetuneConfig


def _check_type(name: str, value, tp):
    """Return `value` converted to type `tp`, or raise BertkitError. Strict: no silent str->number."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(name, value, arg)
            except BertkitError as e:
                errors.append(str(e))
        raise BertkitError(errors[0])
    if origin is dict:  # model_overrides: {model name: {field: value}}; the inner values are checked on use
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise BertkitError(f"'{name}' must map model names to mappings of fields, got {value!r}")
        return value
    if origin is list:
        (item,) = typing.get_args(tp)
        if isinstance(value, str):  # CLI form: a,b,c (numbers as text)
            value = [v.strip() for v in value.split(",") if v.strip()]
            if item in (int, float):
                try:
                    value = [item(v) for v in value]
                except ValueError:
                    raise BertkitError(f"'{name}' must be a comma-separated list of numbers, got {value!r}") from None
        if not isinstance(value, list):
            raise BertkitError(f"'{name}' must be a list, got {value!r}")
        return [_check_type(name, v, item) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise BertkitError(f"'{name}' must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise BertkitError(f"'{name}' must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise BertkitError(f"'{name}' must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
        raise BertkitError(f"'{name}' must be a string, got {value!r}")
    raise TypeError(f"unsupported config type {tp} for {name}")


# every built-in metric name of every adapter (bertkit/metrics; tests/test_metrics_batching.py keeps them equal)
BUILTIN_METRICS = frozenset({
    "accuracy", "f1", "mcc",  # sequence classification
    "pearson", "spearman", "mse",  # regression
    "micro_f1", "macro_f1", "subset_accuracy",  # multi-label
    "precision", "recall", "per_type", "seqeval",  # NER (entity level; accuracy = tag accuracy)
    "exact_match", "squad",  # SQuAD v1.1 (f1 too)
    "squad_v2", "exact", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
    "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh",  # SQuAD 2.0
})


def check_metric_names(names, allow_hub: bool, source: str) -> None:
    """Refuse a metric name that is neither built in nor a local metric script, unless hub metrics are allowed:
    evaluate.load would download the metric's code from the hub and run it."""
    for name in names:
        if isinstance(name, str) and name not in BUILTIN_METRICS and not Path(name).exists() and not allow_hub:
            raise BertkitError(f"{source}: 'metrics': {name!r} is not a built-in metric "
                               f"({', '.join(sorted(BUILTIN_METRICS))}) nor a local metric script. A name from the "
                               "Hugging Face hub would be downloaded "
                               "and its code run: allow that with --allow-hub-metrics (allow_hub_metrics: true)")


def _validate(cfg: FinetuneConfig, source: str) -> None:
    check_metric_names(cfg.metrics, cfg.allow_hub_metrics, source)
    if cfg.eval_every != "epoch" and not (cfg.eval_every.isdigit() and int(cfg.eval_every) > 0):
        raise BertkitError(f"{source}: 'eval_every' must be 'epoch' or a positive number of steps")
    for name in ("batch_size", "grad_accum", "max_length", "eval_batch_size", "max_question_length",
                 "max_answer_length", "n_best"):
        if getattr(cfg, name) <= 0:
            raise BertkitError(f"{source}: '{name}' must be positive")
    for name in ("dropout", "attention_dropout"):
        if getattr(cfg, name) is not None and not 0 <= getattr(cfg, name) < 1:
            raise BertkitError(f"{source}: '{name}' must be in [0, 1)")
    if not 0 < cfg.layer_lr_decay <= 1:
        raise BertkitError(f"{source}: 'layer_lr_decay' must be in (0, 1]")
    if cfg.reinit_pooler and cfg.adapter != "sequence-classification":
        raise BertkitError(f"{source}: 'reinit_pooler' applies to sequence-classification only (the {cfg.adapter} "
                           "head does not use the pooler)")
    if cfg.ner_context < 0:
        raise BertkitError(f"{source}: 'ner_context' must be 0 or more word pieces")
    if cfg.ner_context and cfg.adapter != "token-classification":
        raise BertkitError(f"{source}: 'ner_context' applies to token-classification only")
    if cfg.ner_casing and cfg.adapter != "token-classification":
        raise BertkitError(f"{source}: 'ner_casing' applies to token-classification only")
    if cfg.allow_no_answer and cfg.adapter != "question-answering":
        raise BertkitError(f"{source}: 'allow_no_answer' applies to question-answering only")
    if cfg.window_overlap < 0:
        raise BertkitError(f"{source}: 'window_overlap' must be 0 or more")
    if cfg.main_metric not in cfg.metrics:
        raise BertkitError(f"{source}: main_metric '{cfg.main_metric}' is not in metrics {cfg.metrics}")
    _validate_heads(cfg, source)


# built-in metric names per sequence-classification problem type (bertkit/metrics)
PROBLEM_METRICS = {"single_label_classification": ("accuracy", "f1", "mcc"),
                   "regression": ("pearson", "spearman", "mse"),
                   "multi_label_classification": ("micro_f1", "macro_f1", "subset_accuracy")}


LOWER_IS_BETTER = frozenset({"mse"})  # main metrics whose best value is the lowest (the rest: the highest)


def _validate_heads(cfg: FinetuneConfig, source: str) -> None:
    """The sequence-classification head options, delimiter and carving."""
    if cfg.delimiter is not None:
        cfg.delimiter = {"tab": "\t", "\\t": "\t"}.get(cfg.delimiter, cfg.delimiter)
        if len(cfg.delimiter) != 1:
            raise BertkitError(f"{source}: 'delimiter' must be one character or 'tab', got {cfg.delimiter!r}")
    if cfg.carve_eval is not None and not 0 < cfg.carve_eval < 100:
        raise BertkitError(f"{source}: 'carve_eval' must be a percentage between 1 and 99")
    if not 0 < cfg.threshold < 1:
        raise BertkitError(f"{source}: 'threshold' must be in (0, 1)")
    if cfg.doc_window_overlap is not None and cfg.doc_window_overlap < 0:
        raise BertkitError(f"{source}: 'doc_window_overlap' must be 0 or more")
    if isinstance(cfg.class_weights, str) and cfg.class_weights != "balanced":
        raise BertkitError(f"{source}: 'class_weights' must be 'balanced' or numbers, got {cfg.class_weights!r}")
    if isinstance(cfg.class_weights, list) and not all(w > 0 for w in cfg.class_weights):
        raise BertkitError(f"{source}: 'class_weights' must be positive")
    single = cfg.problem_type == "single_label_classification"
    changed = [k for k, on in (("problem_type", not single), ("doc_pooling", cfg.doc_pooling != "truncate"),
                               ("class_weights", cfg.class_weights is not None)) if on]
    if changed and cfg.adapter != "sequence-classification":
        raise BertkitError(f"{source}: '{changed[0]}' applies to sequence-classification only")
    if cfg.class_weights is not None and cfg.problem_type == "regression":
        raise BertkitError(f"{source}: 'class_weights' needs classes; a regression head has none")
    if cfg.adapter == "sequence-classification":
        own = PROBLEM_METRICS[cfg.problem_type]
        for name in cfg.metrics:
            other = next((p for p, names in PROBLEM_METRICS.items() if name in names and name not in own), None)
            if other:
                raise BertkitError(f"{source}: metric '{name}' is for {other}; {cfg.problem_type} has "
                                   f"{', '.join(own)} (e.g. --metrics {','.join(own[:2])} --main-metric {own[0]})")
