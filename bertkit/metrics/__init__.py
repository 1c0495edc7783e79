"""Metric hooks: one interface over built-in metrics, `evaluate` modules and plain callables.

A hook is called as `hook(predictions, references) -> dict[str, float]`. `resolve_metrics` accepts:
- a built-in name (`accuracy`, `f1`, `mcc`), computed locally;
- an `evaluate.EvaluationModule` instance (e.g. `evaluate.load("glue", "mrpc")` when online);
- any other name, passed to `evaluate.load` (needs the hub or a local metric script path);
- a callable `(predictions, references) -> dict`.

Example:
```python
>>> hooks = resolve_metrics(["accuracy", lambda p, r: {"n": len(p)}])
>>> compute_metrics(hooks, [1, 0], [1, 1])
{'accuracy': 0.5, 'n': 2}
```
"""

from __future__ import annotations

from collections.abc import Callable

import evaluate

from ..errors import BertkitError
from .classification import F1, Accuracy, MatthewsCorrelation

BUILTIN = {"accuracy": Accuracy, "f1": F1, "mcc": MatthewsCorrelation}

MetricHook = Callable[[list, list], dict]


def _from_module(module: evaluate.EvaluationModule, **kwargs) -> MetricHook:
    return lambda predictions, references: module.compute(predictions=predictions, references=references, **kwargs)


def resolve_metric(spec, **kwargs) -> MetricHook:
    if isinstance(spec, str) and spec in BUILTIN:
        return _from_module(BUILTIN[spec](), **kwargs if spec == "f1" else {})
    if isinstance(spec, evaluate.EvaluationModule):
        return _from_module(spec)
    if isinstance(spec, str):
        try:
            return _from_module(evaluate.load(spec))
        except Exception as e:
            raise BertkitError(f"metric '{spec}' is not built in ({', '.join(BUILTIN)}) and evaluate.load "
                               f"could not load it: {e}") from None
    if callable(spec):
        return spec
    raise BertkitError(f"a metric must be a name, an evaluate module or a callable, got {spec!r}")


def resolve_metrics(specs, **kwargs) -> list[MetricHook]:
    return [resolve_metric(s, **kwargs) for s in specs]


def compute_metrics(hooks: list[MetricHook], predictions, references) -> dict[str, float]:
    out = {}
    for hook in hooks:
        out.update({k: float(v) if isinstance(v, (int, float)) else v for k, v in hook(predictions,
                                                                                          references).items()})
    return out


__all__ = ["Accuracy", "F1", "MatthewsCorrelation", "resolve_metric", "resolve_metrics", "compute_metrics"]
