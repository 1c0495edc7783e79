"""Multiple-choice files (SWAG's CSV and others like it): each row a context, the start every ending continues, two
or more endings (a column each, or one column's list) and the right ending's index; checked row by row, each error
naming its file, line and column."""

from __future__ import annotations

import re
from pathlib import Path

import datasets

from ..errors import DataError
from ..typed import flag
from ..utils import as_list, say
from .readers import ID_COLUMNS, read_rows, source_name
from .sources import eval_paths, load_hub_splits, resolve_data_dir, split_path, training_file


def load_choices_data(cfg) -> tuple[datasets.Dataset, dict[str, datasets.Dataset], list[str]]:
    """Train questions, evaluation questions by name (file stem or hub split) and no label names. The task's
    options (`cfg.task_options`) name the columns."""
    data_dir = resolve_data_dir(cfg)
    if data_dir is None and not Path(cfg.train_file or "").is_absolute():
        train, *evals = cfg.hub.splits
        return (_hub(cfg, train, cfg.max_train_samples),
                {s: _hub(cfg, s, cfg.max_eval_samples) for s in evals}, [])
    o, eval_at = cfg.task_options, eval_paths(cfg, data_dir)
    train = read_choices(training_file(cfg, data_dir), o, max_samples=cfg.max_train_samples)
    return train, {path.stem: read_choices(path, o, max_samples=cfg.max_eval_samples) for path in eval_at}, []


def load_choices_split(cfg, split: str, file: str | None = None) -> datasets.Dataset:
    """One labelled split: an explicit file, the recipe's file of that split, or (no local data) the hub's."""
    path = Path(file) if file else split_path(cfg, split)
    if path is None:
        return _hub(cfg, split, cfg.max_eval_samples)
    return read_choices(path, cfg.task_options, max_samples=cfg.max_eval_samples)


def _hub(cfg, split: str, n: int | None) -> datasets.Dataset:
    ds = load_hub_splits(cfg, [split])[0]
    rows = [(i + 1, row) for i, row in enumerate(ds.select(range(min(n or len(ds), len(ds)))))]
    return read_choices(Path(f"{cfg.hub.dataset}[{split}]"), cfg.task_options, rows=rows)


def read_choices(path: Path, o, labelled: bool = True, max_samples: int | None = None, rows=None,
                 id_column: str | None = None) -> datasets.Dataset:
    """A SWAG-format file (or hub rows) → examples {context, start, endings, label?, id?}, checked row by row. `o`:
    the task's options (the columns); `id` from `id_column` ("": the first of ID_COLUMNS the file has, if any)."""
    wanted = [o.context_column, *([o.start_column] if o.start_column else []), *o.ending_columns]
    rows = rows if rows is not None else read_rows(path, required=[*wanted, o.label_column])
    if id_column == "":
        id_column = next((c for c in ID_COLUMNS if rows and c in rows[0][1]), None)
    out = {"context": [], "start": [], "endings": [], **({"label": []} if labelled else {}),
           **({"id": []} if id_column else {})}
    _unread_endings(path, rows[0][1] if rows else {}, o.ending_columns)
    for line, row in rows[:max_samples] if max_samples is not None else rows:
        for column in wanted + ([o.label_column] if labelled else []):
            if column not in row:
                named_by = flag(next(k for k in ("context_column", "start_column", "label_column", "ending_columns")
                                     if column in as_list(getattr(o, k) or [])))
                raise DataError(f"missing column (found: {', '.join(map(str, row))}; {named_by} names the column to "
                                "read)", file=path, line=line, field=column)
        endings = _endings(row, o.ending_columns, path, line)
        if out["endings"] and len(endings) != len(out["endings"][0]):
            raise DataError(f"{len(endings)} endings where the file's first row has {len(out['endings'][0])} (a "
                            "file's questions have one number of endings)", file=path, line=line,
                            field=o.ending_columns[0])
        if not isinstance(row[o.context_column], str) or not row[o.context_column].strip():
            raise DataError("empty text", file=path, line=line, field=o.context_column)
        out["context"].append(row[o.context_column].strip())
        out["start"].append(str(row[o.start_column] or "").strip() if o.start_column else "")
        out["endings"].append(endings)
        if id_column:
            if row.get(id_column) in (None, ""):
                raise DataError("missing id" if id_column in row else f"missing column (found: "
                                f"{', '.join(map(str, row))}; --id-column names it)", file=path, line=line,
                                field=id_column)
            out["id"].append(row[id_column])
        if labelled:
            label = str(row[o.label_column]).strip()
            if not label.isdigit() or int(label) >= len(endings):
                raise DataError(f"the label must be the index of an ending (0 to {len(endings) - 1}), got "
                                f"{label!r}", file=path, line=line, field=o.label_column)
            out["label"].append(int(label))
    if not out["context"]:
        raise DataError("no data rows", file=path)
    return datasets.Dataset.from_dict(out)


def _endings(row: dict, columns: list[str], path, line) -> list[str]:
    """A row's endings: one text a column, or one column's list of texts (a JSONL or Parquet row's `endings`)."""
    if len(columns) == 1:
        endings = row[columns[0]]
        if not isinstance(endings, list) or len(endings) < 2:
            raise DataError(f"one ending column holds a list of two or more endings, got {endings!r:.40} (or name two "
                            "or more columns, one ending each)", file=path, line=line, field=columns[0])
        return [_text(e, path, line, f"{columns[0]}[{i}]") for i, e in enumerate(endings)]
    return [_text(row[c], path, line, c) for c in columns]


def _text(value, path, line, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError("empty text" if value in ("", None) or isinstance(value, str) else
                        f"must be text, got {value!r:.40}", file=path, line=line, field=field)
    return value.strip()


def _unread_endings(path, row: dict, read: list[str]) -> None:
    """Say once which columns named as the endings are (ending4 beside ending0-3) are not read: a file with a fifth
    ending was scored on four, without a word."""
    stems = {re.sub(r"\d+$", "", c) for c in read}
    unread = [c for c in row if c not in read and any(re.fullmatch(re.escape(s) + r"\d+", c) for s in stems if s)]
    if unread:
        say(f"{source_name(path)}: column(s) {', '.join(unread)} not read: the endings are {', '.join(read)} "
            "(--ending-columns names them)")
