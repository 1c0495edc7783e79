"""Labelled text (or text-pair) classification data → `datasets.Dataset` with `text`, `text_pair`, `label`.

Local files are found under `data_dir`; when there are none, the recipe's hub dataset is used (online only).
Labels depend on the head (`problem_type`): a class written as a name (`positive`) or as an index into the recipe's
`label_names` (`1`) → its id; a number (regression) → a float; several classes (multi-label: a JSON list, or names
joined by `label_delimiter` in CSV/TSV) → a sorted list of ids.
A task without a training file can train and evaluate on its validation file cut in two (`carve_eval`, see
`carve`): the split is named `<stem>_carved<N>` in the results.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
from pathlib import Path

import datasets

from ..errors import BertkitError, DataError
from ..utils import say
from .readers import read_rows
from .sources import eval_paths, load_hub_splits, local_path, resolve_data_dir, split_path, training_file

# the `problem_type`s of Hugging Face's sequence-classification heads
FRACTION = re.compile(r"[-+]?\d*\.\d+")  # 2.52, .5: a regression score rather than a class
SINGLE, REGRESSION, MULTI = "single_label_classification", "regression", "multi_label_classification"


def _label_name(value, path, line, column) -> str:
    """A class label as written (the label set being discovered from the training file); an empty one refused."""
    text = str(value).strip() if value is not None else ""
    if not text:
        raise DataError("no label (every row of a labelled file has one; `bertkit predict` reads texts without)",
                        file=path, line=line, field=column)
    return text


def _class_name(value, path, line, column) -> str:
    """A class label of a file whose label set is being discovered: a number with a fraction is refused, since such
    labels are a regression target (run_glue.py's rule) far more often than classes."""
    text = _label_name(value, path, line, column)
    if FRACTION.fullmatch(text) and not float(text).is_integer():
        raise DataError(f"label {text!r} is a number with a fraction: for a regression target pass --problem-type "
                        "regression (one output, MSE); class labels are names or whole numbers (or list them all "
                        "with --label-names)", file=path, line=line, field=column)
    return text


def _label_id(value, label_names: list[str], path, line, column):
    text = _label_name(value, path, line, column)  # an empty one (a test split's row, or a gap) refused
    if text in label_names:
        return label_names.index(text)
    if text.lstrip("-").isdigit() and 0 <= int(text) < len(label_names) and not any(
            name.lstrip("-").isdigit() for name in label_names):  # names that are numbers ('1'-'5' stars) are not ids
        return int(text)
    raise UnknownLabel(text, f"(expected one of: {', '.join(label_names)}: the run's labels, from --label-names, or "
                       "with --label-names '' from the training file)", file=path, line=line, field=column)


class UnknownLabel(DataError):
    """A label outside the run's label names: `label` as written, `advice` the way out (what the names are)."""

    def __init__(self, label: str, advice: str, **where):
        super().__init__(f"unknown label {label!r} {advice}", **where)
        self.label = label


def _number(value, path, line, column) -> float:
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = None
    if isinstance(value, bool) or number is None or not math.isfinite(number):
        raise DataError(f"not a number: {value!r} (a regression label is a number)", file=path, line=line,
                        field=column)
    return number


def _label_list(value, label_names, delimiter: str, path, line, column) -> list:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(delimiter) if v.strip()]
    if not isinstance(value, list):
        raise DataError(f"expected a list of labels (or names joined by {delimiter!r}), got {value!r}", file=path,
                        line=line, field=column)
    if label_names is None:  # discovering the label set
        return [str(v).strip() for v in value]
    return sorted({_label_id(v, label_names, path, line, column) for v in value})


def read_classification_file(path, text_column: str, label_column: str | None, label_names: list[str] | None,
                             text_pair_column: str | None = None, max_samples: int | None = None,
                             skip_labels: list[str] = (), problem_type: str = SINGLE, label_delimiter: str = ",",
                             rows: list[tuple[int, dict]] | None = None, **read) -> dict:
    """Read and validate one file. Returns columns as lists: text, (text_pair), (label).

    With `label_column=None` the file is unlabelled (prediction input). With `label_names=None` class labels are
    kept as strings (used to discover the label set of a generic file). Rows labelled with one of
    `skip_labels` are dropped and their count is reported on stderr. `read` (delimiter, quoting, columns) goes to
    `read_rows`; `rows`: the file's rows as `read_rows` gave them already (not read again).
    """
    path = Path(path)
    wanted = [c for c in (text_column, text_pair_column, label_column) if c]
    rows = read_rows(path, required=wanted, **read) if rows is None else rows
    if skip_labels and label_column:
        kept = [(n, r) for n, r in rows if str(r.get(label_column, "")).strip() not in skip_labels]
        skipped, rows = len(rows) - len(kept), kept
        if skipped:
            say(f"{path}: skipped {skipped} rows labelled {'/'.join(skip_labels)}")
    if max_samples is not None:
        rows = rows[:max_samples]
    if not rows:
        raise DataError("no data rows (only a header or blank lines)", file=path)
    out = {"text": [], **({"text_pair": []} if text_pair_column else {}), **({"label": []} if label_column else {})}
    flags = {text_column: "--text-column", text_pair_column: "--text-pair-column", label_column: "--label-column"}
    for line, row in rows:
        if missing := [c for c in wanted if c not in row]:  # all of them at once (a pair's file: up to three)
            found = f"found: {', '.join(map(str, row))}"
            raise DataError(f"missing column ({found}; {flags[missing[0]]} names the column to read)" if
                            len(missing) == 1 else f"missing columns {', '.join(map(repr, missing))} ({found}; "
                            f"{', '.join(flags[c] for c in missing)} name the columns to read)", file=path, line=line,
                            field=missing[0])
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
            if problem_type == REGRESSION:
                out["label"].append(_number(value, path, line, label_column))
            elif problem_type == MULTI:
                out["label"].append(_label_list(value, label_names, label_delimiter, path, line, label_column))
            else:
                out["label"].append(_class_name(value, path, line, label_column) if label_names is None else
                                    _label_id(value, label_names, path, line, label_column))
    return out


def read_options(options) -> dict:
    """The task options' file-format and label settings, as keyword arguments of `read_classification_file`."""
    o = options
    return dict(text_column=o.text_column, label_column=o.label_column, text_pair_column=o.text_pair_column,
                skip_labels=o.skip_labels, problem_type=o.problem_type, label_delimiter=o.label_delimiter,
                delimiter=o.separator, quoting=o.quoting, columns=o.columns or None)


def _from_hub(cfg, o, splits: list[str], carve_percent: int | None, max_train, max_eval):
    """(train, {split: examples}) from the hub: `splits` (train, then evaluation), or with `carve_percent` the first
    evaluation split cut in two; `o`: the task's options."""
    data = load_hub_splits(cfg, splits)

    def convert(ds: datasets.Dataset, n) -> datasets.Dataset:
        if n is not None:
            ds = ds.select(range(min(n, len(ds))))
        names = o.hub_columns or [c for c in (o.text_column, o.text_pair_column, o.label_column) if c]
        keys = ["text", "text_pair", "label"] if len(names) == 3 else ["text", "label"]
        return datasets.Dataset.from_dict({k: ds[c] for k, c in zip(keys, names, strict=False)})

    if carve_percent:  # the first evaluation split, cut in two
        train, evals = carve(o, data[1], splits[1], carve_percent)
        return convert(train, max_train), {k: convert(v, max_eval) for k, v in evals.items()}
    evals = {s: convert(d, max_eval) for s, d in zip(splits[1:], data[1:], strict=True)}
    return convert(data[0], max_train), evals


def label_order(names: set[str]) -> list[str]:
    """Label names found in a training file, sorted: as numbers where all are numbers (stars 1-10: 1, 2, ..., 10,
    not 1, 10, 2), else as text."""
    try:
        return sorted(names, key=float)
    except ValueError:
        return sorted(names)


def carved_name(stem: str, percent: int) -> str:
    return f"{stem}_carved{percent}"


def in_carved_eval(text: str, percent: int) -> bool:
    """The fixed rule of `carve_eval`: SHA-256 of the (stripped) first text, as an integer, modulo 100 < percent."""
    return int(hashlib.sha256(text.strip().encode("utf-8")).hexdigest(), 16) % 100 < percent


def carve(options, data, stem: str, percent: int):
    """(train part, {'<stem>_carved<N>': evaluation part}) of one labelled set (a dict of lists or a Dataset whose
    first text column is `text`, or the hub's columns)."""
    ds = data if isinstance(data, datasets.Dataset) else datasets.Dataset.from_dict(data)
    column = "text" if "text" in ds.column_names else (options.hub_columns or [options.text_column])[0]
    held = [in_carved_eval(t, percent) for t in ds[column]]
    train = ds.select([i for i, h in enumerate(held) if not h])
    evals = ds.select([i for i, h in enumerate(held) if h])
    if not len(train) or not len(evals):
        raise BertkitError(f"carve_eval {percent}: cutting {stem} ({len(ds)} rows) leaves an empty part")
    return train, {carved_name(stem, percent): evals}


def _missing_train(cfg, train_path: Path, data_dir: Path | None) -> DataError:
    """The error for a missing training file; it names `--carve-eval` when a validation file is there."""
    dev = local_path(data_dir, cfg.validation_files[0]) if cfg.validation_files else None
    msg = "file not found (the training file)"
    if dev is not None and dev.is_file():
        msg += (f"; '{cfg.name}' has only {dev.name} here. To train and measure on a split carved from it, add "
                f"--carve-eval 20 (rows whose first text hashes below 20 of 100 evaluate, the rest train; the "
                f"results name the split {carved_name(dev.stem, 20)}; not comparable to a full-training-set result)")
    return DataError(msg, file=train_path)


def _first(ds: datasets.Dataset, n: int | None) -> datasets.Dataset:
    return ds if n is None else ds.select(range(min(n, len(ds))))


def load_classification_data(cfg, options) -> tuple[datasets.Dataset, dict[str, datasets.Dataset], list[str]]:
    """Train set, evaluation sets by name (file stem), and label names, validated before anything is written.
    `options`: the classification task's (columns, labels, problem type, carving)."""
    o = options
    data_dir = resolve_data_dir(cfg)
    source = cfg.validation_files[0] if o.carve_eval else cfg.train_file
    if data_dir is None and not Path(source or "").is_absolute():
        train, evals = _from_hub(cfg, o, list(cfg.hub.splits), o.carve_eval, cfg.max_train_samples,
                                 cfg.max_eval_samples)
        return train, evals, head_label_names(o)
    label_names = head_label_names(o)
    args = read_options(o)
    train_path = local_path(data_dir, source) if o.carve_eval else training_file(cfg, data_dir)
    if not train_path.is_file() and not o.carve_eval:
        raise _missing_train(cfg, train_path, data_dir)
    if o.carve_eval and cfg.train_file and local_path(data_dir, cfg.train_file).is_file():  # was left unread
        raise DataError(f"the training file is here: --carve-eval {o.carve_eval} trains on part of {source}, for a "
                        "task without one (leave out --carve-eval)", file=local_path(data_dir, cfg.train_file))
    eval_at = eval_paths(cfg, data_dir)
    discovered = not label_names and o.problem_type != REGRESSION
    if discovered:  # the label set from the training file
        found = read_classification_file(train_path, **args, label_names=None)["label"]
        label_names = label_order({n for x in found for n in x} if o.problem_type == MULTI else set(found))
    with _training_files_labels(label_names if discovered else None):
        return _read_splits(cfg, o, args, train_path, source, eval_at, label_names)


@contextlib.contextmanager
def _training_files_labels(label_names: list[str] | None):
    """An evaluation file's label that the training file, whose labels the run took (`label_names`), lacks: said so,
    with the way out (every label listed), rather than the general advice."""
    try:
        yield
    except UnknownLabel as e:
        if label_names is None:
            raise
        raise UnknownLabel(e.label, f"(the labels found in the training file: {', '.join(label_names)}; to train "
                           "with more, list them all with --label-names)", file=e.file, line=e.line,
                           field=e.field) from None


def _read_splits(cfg, o, args, train_path, source, eval_at, label_names):
    """(training examples, {name: evaluation examples}, label names) of a generic file's run."""
    if o.carve_eval:
        whole = read_classification_file(train_path, **args, label_names=label_names)
        train, evals = carve(o, whole, train_path.stem, o.carve_eval)
        for path in eval_at[1:]:  # the other validation files evaluate too (were left out without a word)
            evals[path.stem] = datasets.Dataset.from_dict(read_classification_file(path, **args,
                                                                                   label_names=label_names))
        return (_first(train, cfg.max_train_samples), {k: _first(v, cfg.max_eval_samples) for k, v in evals.items()},
                label_names)
    train = read_classification_file(train_path, **args, label_names=label_names, max_samples=cfg.max_train_samples)
    evals = {}
    for path in eval_at:
        evals[path.stem] = datasets.Dataset.from_dict(
            read_classification_file(path, **args, label_names=label_names, max_samples=cfg.max_eval_samples))
    return datasets.Dataset.from_dict(train), evals, label_names


def head_label_names(options) -> list[str]:
    """The recipe's label names; a regression head has one output, named by label_names or 'score'."""
    if options.problem_type == REGRESSION:
        if len(options.label_names) > 1:
            raise BertkitError(f"a regression head has one output; label_names {options.label_names} names more "
                               "(a recipe's classes: --label-names '' names the output score)")
        return list(options.label_names) or ["score"]
    return list(options.label_names)


def load_split(cfg, options, split: str, label_names: list[str], file: str | None = None) -> datasets.Dataset:
    """One labelled evaluation set: an explicit file, or the recipe's file whose stem is `split` ('dev'),
    or its test file ('test'), or a carved evaluation split ('dev_carved20'), or (no local data) the hub split of
    that name."""
    o = options
    args = dict(read_options(o), label_names=label_names)
    if file:
        return datasets.Dataset.from_dict(read_classification_file(Path(file), **args,
                                                                   max_samples=cfg.max_eval_samples))
    stem, _, percent = split.rpartition("_carved")
    carved = bool(stem) and percent.isdigit()
    path = split_path(cfg, stem if carved else split)
    if path is None:  # the hub
        if carved:
            return _first(_from_hub(cfg, o, [cfg.hub.splits[0], stem], int(percent), None, None)[1][split],
                          cfg.max_eval_samples)
        return _from_hub(cfg, o, [cfg.hub.splits[0], split], None, None, cfg.max_eval_samples)[1][split]
    if carved:  # the evaluation part of a carved split, cut by the same rule
        whole = read_classification_file(path, **args)
        return _first(carve(o, whole, stem, int(percent))[1][split], cfg.max_eval_samples)
    return datasets.Dataset.from_dict(read_classification_file(path, **args, max_samples=cfg.max_eval_samples))
