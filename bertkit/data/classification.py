"""Labelled text (or text-pair) classification data → `datasets.Dataset` with `text`, `text_pair`, `label`.

Local files are found under `data_dir`; when there are none, the recipe's hub dataset is used (online only).
Labels may be written as names (`positive`) or as indices into the recipe's `label_names` (`1`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import datasets

from ..errors import BertkitError, DataError
from .readers import read_rows


def _label_id(value, label_names: list[str], path, line, column):
    text = str(value).strip() if value is not None else ""
    if text in label_names:
        return label_names.index(text)
    if text.lstrip("-").isdigit() and 0 <= int(text) < len(label_names):
        return int(text)
    raise DataError(f"unknown label {text!r} (expected one of: {', '.join(label_names)})",
                    file=path, line=line, field=column)


def read_classification_file(path, text_column: str, label_column: str | None, label_names: list[str] | None,
                             text_pair_column: str | None = None, max_samples: int | None = None,
                             skip_labels: list[str] = ()) -> dict:
    """Read and validate one file. Returns columns as lists: text, (text_pair), (label).

    With `label_column=None` the file is unlabelled (prediction input). With `label_names=None` labels are
    kept as strings (used to discover the label set of a generic file). Rows labelled with one of
    `skip_labels` are dropped and their count is reported on stderr.
    """
    path = Path(path)
    rows = read_rows(path)
    if skip_labels and label_column:
        kept = [(n, r) for n, r in rows if str(r.get(label_column, "")).strip() not in skip_labels]
        skipped, rows = len(rows) - len(kept), kept
        if skipped:
            print(f"{path}: skipped {skipped} rows labelled {'/'.join(skip_labels)}", file=sys.stderr)
    if max_samples is not None:
        rows = rows[:max_samples]
    if not rows:
        raise DataError("no data rows (only a header or blank lines)", file=path)
    wanted = [c for c in (text_column, text_pair_column, label_column) if c]
    out = {"text": [], **({"text_pair": []} if text_pair_column else {}), **({"label": []} if label_column else {})}
    for line, row in rows:
        for column in wanted:
            if column not in row:
                raise DataError(f"missing column (found: {', '.join(map(str, row))})", file=path, line=line,
                                field=column)
        for column, key in ((text_column, "text"), (text_pair_column, "text_pair")):
            if column is None:
                continue
            value = row[column]
            if not isinstance(value, str) or not value.strip():
                raise DataError("empty text" if isinstance(value, str) or value is None else
                                f"text must be a string, got {value!r}", file=path, line=line, field=column)
            out[key].append(value.strip())
        if label_column:
            value = row[label_column]
            out["label"].append(str(value).strip() if label_names is None else
                                _label_id(value, label_names, path, line, label_column))
    return out


def resolve_data_dir(cfg) -> Path | None:
    """`cfg.data_dir`, else `$BERTKIT_DATA_DIR/<task>`; None when neither exists (then the hub is tried)."""
    if cfg.data_dir:
        path = Path(cfg.data_dir)
        if not path.is_dir():
            raise BertkitError(f"--data-dir {path} is not a folder")
        return path
    root = os.environ.get("BERTKIT_DATA_DIR")
    if root and (Path(root) / cfg.task).is_dir():
        return Path(root) / cfg.task
    return None


def _local_path(data_dir: Path | None, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() or data_dir is None else data_dir / path


def load_hub_splits(cfg, splits: list[str] | None = None) -> list[datasets.Dataset]:
    """The recipe's hub dataset, one Dataset per split name (default `cfg.hub_splits`); a clear error offline."""
    offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
    how = (f"No local data for task '{cfg.task}'. Point bertkit at it with BERTKIT_DATA_DIR=/path/to/data "
           f"(a folder holding {cfg.task}/{cfg.train_file}) or --data-dir /path/to/{cfg.task}")
    if not cfg.hub_dataset:
        raise BertkitError(how + ".")
    if offline:
        raise BertkitError(how + f"; the hub copy ({cfg.hub_dataset}) cannot be used because HF_HUB_OFFLINE or "
                                 "HF_DATASETS_OFFLINE is set.")
    try:
        return [datasets.load_dataset(cfg.hub_dataset, cfg.hub_config, revision=cfg.hub_revision, split=s)
                for s in splits or cfg.hub_splits]
    except Exception as e:  # connection errors come in many types
        raise BertkitError(f"{how}; loading {cfg.hub_dataset} from the hub failed: {e}") from None


def _from_hub(cfg) -> tuple[datasets.Dataset, dict[str, datasets.Dataset]]:
    splits = load_hub_splits(cfg)

    def convert(ds: datasets.Dataset, n) -> datasets.Dataset:
        if n is not None:
            ds = ds.select(range(min(n, len(ds))))
        names = cfg.hub_columns or [c for c in (cfg.text_column, cfg.text_pair_column, cfg.label_column) if c]
        keys = ["text", "text_pair", "label"] if len(names) == 3 else ["text", "label"]
        return datasets.Dataset.from_dict({k: ds[c] for k, c in zip(keys, names)})

    evals = {s: convert(d, cfg.max_eval_samples) for s, d in zip(cfg.hub_splits[1:], splits[1:])}
    return convert(splits[0], cfg.max_train_samples), evals


def load_classification_data(cfg) -> tuple[datasets.Dataset, dict[str, datasets.Dataset], list[str]]:
    """Train set, evaluation sets by name (file stem), and label names, validated before anything is written."""
    data_dir = resolve_data_dir(cfg)
    if data_dir is None and not Path(cfg.train_file or "").is_absolute():
        train, evals = _from_hub(cfg)
        return train, evals, list(cfg.label_names)
    label_names = list(cfg.label_names)
    args = dict(text_column=cfg.text_column, label_column=cfg.label_column, text_pair_column=cfg.text_pair_column,
                skip_labels=cfg.skip_labels)
    train_path = _local_path(data_dir, cfg.train_file)
    if not label_names:  # discover the label set from the training file
        found = read_classification_file(train_path, **args, label_names=None)["label"]
        label_names = sorted(set(found))
    train = read_classification_file(train_path, **args, label_names=label_names, max_samples=cfg.max_train_samples)
    evals = {}
    for name in cfg.validation_files:
        path = _local_path(data_dir, name)
        evals[path.stem] = datasets.Dataset.from_dict(
            read_classification_file(path, **args, label_names=label_names, max_samples=cfg.max_eval_samples))
    return datasets.Dataset.from_dict(train), evals, label_names


def split_path(cfg, split: str) -> Path | None:
    """The local file of a named split: the validation file whose stem is `split` ('dev'), or the test file
    ('test'); None when there is no local data, so the hub split of that name is to be used."""
    data_dir = resolve_data_dir(cfg)
    names = {Path(f).stem: f for f in cfg.validation_files}
    if cfg.test_file:
        names.setdefault("test", cfg.test_file)
    if data_dir is None and not Path(names.get(split, "")).is_absolute():
        if split not in cfg.hub_splits and split not in names:
            raise BertkitError(f"split '{split}' not known for task {cfg.task} (hub splits: {cfg.hub_splits})")
        return None
    if split not in names:
        raise BertkitError(f"split '{split}' not known for task {cfg.task} (local splits: {', '.join(names)}); "
                           "or pass --file")
    return _local_path(data_dir, names[split])


def load_split(cfg, split: str, label_names: list[str], file: str | None = None) -> datasets.Dataset:
    """One labelled evaluation set: an explicit file, or the recipe's file whose stem is `split` ('dev'),
    or its test file ('test'), or (no local data) the hub split of that name."""
    args = dict(text_column=cfg.text_column, label_column=cfg.label_column, text_pair_column=cfg.text_pair_column,
                label_names=label_names, max_samples=cfg.max_eval_samples, skip_labels=cfg.skip_labels)
    if file:
        return datasets.Dataset.from_dict(read_classification_file(Path(file), **args))
    path = split_path(cfg, split)
    if path is None:
        cfg.hub_splits = [cfg.hub_splits[0], split]
        return _from_hub(cfg)[1][split]
    return datasets.Dataset.from_dict(read_classification_file(path, **args))
