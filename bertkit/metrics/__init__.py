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

import inspect
from collections.abc import Callable
from pathlib import Path

import evaluate

from ..errors import BertkitError
from .classification import F1, Accuracy, MatthewsCorrelation
from .multi_label import MULTI_LABEL_BUILTIN
from .ner import NER_BUILTIN
from .regression import REGRESSION_BUILTIN
from .squad import Squad, SquadExactMatch, SquadF1
from .squad_v2 import SQUAD_V2_BUILTIN, SquadV2

BUILTIN = {"accuracy": Accuracy, "f1": F1, "mcc": MatthewsCorrelation}
SQUAD_BUILTIN = {"exact_match": SquadExactMatch, "f1": SquadF1, "squad": Squad}

MetricHook = Callable[[list, list], dict]


def _from_module(module: evaluate.EvaluationModule, **kwargs) -> MetricHook:
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
    if isinstance(spec, evaluate.EvaluationModule):
        return _from_module(spec)
    if isinstance(spec, str):
        if not Path(spec).exists() and not allow_hub:
            raise BertkitError(f"metric '{spec}' is not one of this task's ({', '.join(builtins)}) nor a local metric "
                               "script (a hub metric runs downloaded code: load it in Python, "
                               "resolve_metrics([evaluate.load(name)]), and pass it as metric_hooks)")
        try:
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
