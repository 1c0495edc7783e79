"""Metric hooks: one interface over built-in metrics, `evaluate` modules and plain callables.

A hook is called as `hook(predictions, references) -> dict[str, float]`. `resolve_metrics` accepts:
- a built-in name (`accuracy`, `f1`, `mcc`), computed locally; an adapter whose metric names mean something else
  passes its own table as `builtins` (NER: entity-level `precision`, `recall`, `f1`, `per_type`, see `NER_BUILTIN`;
  SQuAD: `exact_match`, `f1`, `squad`, see `SQUAD_BUILTIN`; SQuAD 2.0: `squad_v2` and the official script's entry
  names `exact`, `f1`, `best_f1`, ..., see `SQUAD_V2_BUILTIN`; regression: `pearson`, `spearman`, `mse`, see
  `REGRESSION_BUILTIN`; multi-label: `micro_f1`, `macro_f1`, `subset_accuracy`, see `MULTI_LABEL_BUILTIN`);
- an `evaluate.EvaluationModule` instance (e.g. `evaluate.load("glue", "mrpc")` when online);
- a local metric script's path, passed to `evaluate.load`; a hub metric's name only from Python with `allow_hub=True`
  (no flag or recipe key allows it: evaluate.load downloads its code and runs it);
- a callable `(predictions, references) -> dict`.

Example:
```python
>>> hooks = resolve_metrics(["accuracy", lambda p, r: {"n": len(p)}])
>>> compute_metrics(hooks, [1, 0], [1, 1])
{'accuracy': 0.5, 'n': 2.0}
```
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import BertkitError


def _builtins(module: str, *names: str) -> dict[str, Callable]:
    """{name: a maker of the metric `bertkit.metrics.<module>.METRICS[name]`}, the module imported on the first
    call. The metrics are `evaluate` modules, and `import evaluate` imports transformers' pipelines: start-up time
    that commands which never score (predict, serve, export, `--help`) do not spend (tests check the names against
    the module's table, and predict's imports)."""
    def maker(name):
        def make():
            return importlib.import_module(f"{__name__}.{module}").METRICS[name]()
        make.__qualname__ = f"{module}.METRICS[{name!r}]"
        return make
    return {name: maker(name) for name in names}


BUILTIN = _builtins("classification", "accuracy", "f1", "mcc")
SQUAD_BUILTIN = _builtins("squad", "exact_match", "f1", "squad")
SQUAD_V2_BUILTIN = _builtins("squad_v2", "squad_v2", "exact", "f1", "total", "HasAns_exact", "HasAns_f1",
                             "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total", "best_exact",
                             "best_exact_thresh", "best_f1", "best_f1_thresh")
NER_BUILTIN = _builtins("ner", "precision", "recall", "f1", "per_type", "accuracy", "seqeval")
REGRESSION_BUILTIN = _builtins("regression", "pearson", "spearman", "mse")
MULTI_LABEL_BUILTIN = _builtins("multi_label", "micro_f1", "macro_f1", "subset_accuracy")
_CLASSES = {"Accuracy": "classification", "F1": "classification", "MatthewsCorrelation": "classification",
            "Squad": "squad", "SquadExactMatch": "squad", "SquadF1": "squad", "SquadV2": "squad_v2"}


def __getattr__(name: str):  # the metric classes, imported on first use (as the tables' makers do)
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_CLASSES[name]}"), name)


def _is_evaluate_module(spec) -> bool:
    evaluate = sys.modules.get("evaluate")  # not imported yet: spec cannot be one of its modules
    return evaluate is not None and isinstance(spec, evaluate.EvaluationModule)


MetricHook = Callable[[list, list], dict]


def _from_module(module, **kwargs) -> MetricHook:  # module: an evaluate.EvaluationModule
    return lambda predictions, references: module.compute(predictions=predictions, references=references, **kwargs)


def resolve_metric(spec, builtins: dict | None = None, allow_hub: bool = False, **kwargs) -> MetricHook:
    """A hook for `spec`. `kwargs` (e.g. num_labels) go to a built-in only if its `_compute` takes them. A name that
    is not built in must be a local metric script, or with `allow_hub` a hub metric (evaluate.load downloads and runs
    its code)."""
    builtins = BUILTIN if builtins is None else builtins
    if isinstance(spec, str) and spec in builtins:
        module = builtins[spec]()
        accepted = inspect.signature(module._compute).parameters
        return _from_module(module, **{k: v for k, v in kwargs.items() if k in accepted})
    if _is_evaluate_module(spec):
        return _from_module(spec)
    if isinstance(spec, str):
        if not Path(spec).exists() and not allow_hub:
            raise BertkitError(f"metric '{spec}' is not one of this task's ({', '.join(builtins)}) nor a local metric "
                               "script (a hub metric runs downloaded code: load it in Python, "
                               "resolve_metrics([evaluate.load(name)]), and pass it as metric_hooks)")
        try:
            import evaluate

            return _from_module(evaluate.load(spec))
        except Exception as e:
            raise BertkitError(f"metric '{spec}' is not built in ({', '.join(builtins)}) and evaluate.load "
                               f"could not load it: {e}") from None
    if callable(spec):
        return spec
    raise BertkitError(f"a metric must be a name, an evaluate module or a callable, got {spec!r}")


def resolve_metrics(specs, builtins: dict | None = None, allow_hub: bool = False, **kwargs) -> list[MetricHook]:
    return [resolve_metric(s, builtins, allow_hub, **kwargs) for s in specs]


def compute_metrics(hooks: list[MetricHook], predictions, references) -> dict[str, float]:
    out = {}
    for hook in hooks:
        out.update({k: float(v) if isinstance(v, (int, float)) else v for k, v in hook(predictions,
                                                                                          references).items()})
    return out


__all__ = ["Accuracy", "F1", "MatthewsCorrelation", "MULTI_LABEL_BUILTIN", "NER_BUILTIN", "REGRESSION_BUILTIN",
           "SQUAD_BUILTIN", "SQUAD_V2_BUILTIN", "Squad", "SquadExactMatch", "SquadF1", "SquadV2", "resolve_metric",
           "resolve_metrics", "compute_metrics"]
