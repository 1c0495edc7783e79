"""Data loading: local files (GLUE TSV, CSV, JSONL, parquet, CoNLL, SQuAD JSON) or the hub, into
`datasets.Dataset`s. `readers.py` reads every input format (with line numbers); the loaders beside it turn rows
into a task's examples."""

import importlib

_PUBLIC = {"load_classification_data": "classification", "read_classification_file": "classification",
           "read_rows": "readers"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):  # imported on first use, so that reading a file does not import datasets
    if name not in _PUBLIC:
        raise AttributeError(f"module 'bertkit.data' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
