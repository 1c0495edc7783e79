"""Data loading: local files (GLUE TSV, CSV, JSONL, parquet) or the hub, into `datasets.Dataset`s."""

from .classification import load_classification_data, read_classification_file
from .readers import read_rows

__all__ = ["load_classification_data", "read_classification_file", "read_rows"]
