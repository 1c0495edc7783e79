"""A notebook's examples → a `datasets.Dataset`, checked as a file's rows are: a dict of equal-length lists, a pandas
DataFrame, a list of dicts (records) or a Dataset. A missing value (None, NaN) in a column the task reads, a value
of another type than its column's, a column of texts that are not strings: refused with the row named, where
pyarrow or the tokenizer would fail deep inside (or train on it). Evaluation sets are named (`{"dev": data}`); one
set given alone is "dev"."""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Mapping

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BertkitError
from ..utils import LONE_SURROGATE, as_list, lone_surrogate, quiet_maps

SHAPES = "a dict of equal-length lists, a list of dicts, a pandas DataFrame or a datasets.Dataset"


def as_dataset(data, read: tuple[str, ...] = (), texts: tuple[str, ...] = ()) -> datasets.Dataset:
    """`data` as a Dataset; the columns in `read` hold no missing value, those in `texts` strings (or lists of
    strings: a sentence's words) only, and those in both no empty text."""
    if not isinstance(data, datasets.Dataset):
        data = _from_columns(columns(data))
    names = [c for c in dict.fromkeys((*texts, *read)) if c in data.column_names]
    if names and len(data):
        table = data.with_format("arrow")[:]  # the rows as they are (a selected or shuffled Dataset's too)
        for name in names:
            _check_column(table.column(name), name, name in texts, name in texts and name in read)
    return data


def columns(data) -> dict:
    """{column: values} of a dict of lists, a DataFrame or a list of records, all of one length."""
    if isinstance(data, (list, tuple)):
        odd = next((r for r in data if not isinstance(r, Mapping)), None)
        if odd is not None:
            raise BertkitError(f"expected {SHAPES}; got a list of {type(odd).__name__}")
        keys = list(data[0]) if data else []
        for i, row in enumerate(data):
            if set(row) != set(keys):
                raise BertkitError(f"row {i}: fields {sorted(row)}, where row 0 has {sorted(keys)}")
        return {k: [row[k] for row in data] for k in keys}
    if not isinstance(data, Mapping) and not (hasattr(data, "keys") and hasattr(data, "__getitem__")):
        raise BertkitError(f"expected {SHAPES}; got {type(data).__name__}")
    cols = {k: data[k] for k in data.keys()}  # a DataFrame's columns are Series
    for k, v in cols.items():
        if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__len__"):
            raise BertkitError(f"column {k!r}: expected a list of values, got {type(v).__name__}")
    sizes = {k: len(v) for k, v in cols.items()}
    if len(set(sizes.values())) > 1:
        raise BertkitError("columns of unequal length: " + ", ".join(f"{k} {n}" for k, n in sizes.items()))
    return cols


def _from_columns(cols: dict) -> datasets.Dataset:
    try:
        return datasets.Dataset.from_dict(cols)
    except UnicodeEncodeError as e:  # a lone surrogate (JSON's "\ud800" alone)
        found = next(((k, w) for k, v in cols.items() if (w := lone_surrogate(list(v))) is not None), None)
        if found is None:  # in a key of a row's mapping, say
            raise BertkitError(f"these columns do not make a table: {e}") from None
        raise BertkitError(f"row {found[1][1:].split(']')[0]}: {found[0]}: {LONE_SURROGATE}") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        error = e
    for name, values in cols.items():  # the column that fails, and in it the first value of another type than most
        values = list(values)
        try:
            pa.array(values)
            continue
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
            error = e
        kinds = Counter(type(v) for v in values if not _missing(v))
        usual = kinds.most_common(1)[0][0] if kinds else None
        for i, v in enumerate(values):
            if _missing(v) and usual is str:
                raise BertkitError(f"row {i}: {name} is missing ({v!r})")
            if not _missing(v) and usual is not None and type(v) is not usual:
                raise BertkitError(f"row {i}: {name} is {v!r} ({type(v).__name__}), where the column holds "
                                   f"{usual.__name__} values")
        raise BertkitError(f"column {name!r}: {error}")
    raise BertkitError(f"these columns do not make a table: {error}")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _check_column(column, name: str, text: bool, nonempty: bool = False) -> None:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if text and not _holds_strings(array.type):
        row = next((i for i, v in enumerate(array.to_pylist()) if not _missing(v)), 0)
        value = array[row].as_py()
        raise BertkitError(f"row {row}: {name} is {value!r} ({type(value).__name__}), not text")
    rows = None  # [values at this depth] → their row (lists of words are flattened, depth by depth)
    while True:
        if pa.types.is_struct(array.type):  # QA's answers: checked by their task
            return
        nulls = pc.is_null(array, nan_is_null=True)
        if pc.any(nulls).as_py():
            i = pc.index(nulls, True).as_py()
            row = i if rows is None else int(rows[i])
            value = array[i].as_py()
            raise BertkitError(f"row {row}: {name} is missing ({'NaN' if value is not None else 'None'})"
                               + ("" if rows is None else " in its list"))
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
            if nonempty and len(array) and not pa.types.is_null(array.type):  # as a file's empty text is refused
                empty = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(array)), 0)
                if pc.any(empty).as_py():
                    i = pc.index(empty, True).as_py()
                    raise BertkitError(f"row {i if rows is None else int(rows[i])}: {name} is empty"
                                       + ("" if rows is None else " in its list"))
            return
        parents = pc.list_parent_indices(array).to_numpy()
        rows = parents if rows is None else rows[parents]
        array = pc.list_flatten(array)


def _holds_strings(kind) -> bool:
    while pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)


def named_sets(evals) -> dict:
    """`Trainer.fit`'s evaluation sets by name: a dict of named sets as it is; one set given alone is "dev"."""
    if isinstance(evals, Mapping) and evals and all(
            isinstance(v, (Mapping, datasets.Dataset)) or hasattr(v, "columns")
            or (isinstance(v, (list, tuple)) and v and all(isinstance(r, Mapping) for r in v))
            for v in evals.values()):
        return dict(evals)
    return {"dev": evals}


def label_list(names) -> list[str]:
    """A head's label names: a list of distinct strings (ints would read as ids: `[1, 2, 3]` as stars is a shift by
    one; a string would be a label per character)."""
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise BertkitError(f"label_names: a list of names, got {type(names).__name__} {names!r}")
    names = list(names)
    odd = next((n for n in names if not isinstance(n, str)), None)
    if odd is not None:
        raise BertkitError(f"label_names: names are strings, got {odd!r} ({type(odd).__name__}); write them as "
                           f"{[str(n) for n in names]!r} (labels given as ints are ids 0-{len(names) - 1})")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BertkitError(f"label_names: {', '.join(map(repr, twice))} more than once")
    return names


def by_names(ds: datasets.Dataset, names: list[str]) -> datasets.Dataset:
    """A `label` column that is a ClassLabel (ids in its own order of names: `load_dataset`'s) as ids of `names`."""
    feature = ds.features.get("label")
    if not isinstance(feature, datasets.ClassLabel) or feature.names == list(names):
        return ds
    unknown = [n for n in feature.names if n not in names]
    if unknown:
        raise BertkitError(f"the label column's ClassLabel names {feature.names} are not all among the task's "
                           f"{list(names)}: {unknown}")
    ids = [names.index(n) for n in feature.names]
    with quiet_maps():
        return ds.cast_column("label", datasets.Value("int64")).map(
            lambda ex: {"label": ids[ex["label"]] if ex["label"] >= 0 else ex["label"]})


def check_inference(batch_size, precision) -> None:
    """A notebook's `predict(..., batch_size=, precision=)`: an unknown precision ran as fp32, a batch of 0 failed
    inside `range`."""
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        raise BertkitError(f"precision {precision!r}: one of fp32, bf16, fp16 (tf32 on a GPU)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise BertkitError(f"batch_size {batch_size!r}: a positive number of examples")


def check_unicode(value, name: str) -> None:
    """A notebook's texts (a list, of lists) hold no lone surrogate (`"\\ud800"`, on which the tokenizer fails)."""
    if (where := lone_surrogate(value)) is not None:
        raise BertkitError(f"{name}{where}: {LONE_SURROGATE}")


def texts_of(value, name: str = "texts") -> list[str]:
    """A notebook's texts as a list: one str is one text; each must be a str (None, a number: refused, named)."""
    if value is None or isinstance(value, Mapping) or not hasattr(value, "__iter__"):
        raise BertkitError(f"{name}: a text or a list of texts, got {type(value).__name__}")
    texts = as_list(value)
    odd = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if odd is not None:
        raise BertkitError(f"{name}[{odd}] is {texts[odd]!r} ({type(texts[odd]).__name__}), not a text")
    empty = next((i for i, t in enumerate(texts) if not t.strip()), None)
    if empty is not None:  # as a file's empty line, and serve's
        raise BertkitError(f"{name}[{empty}]: empty text")
    check_unicode(texts, name)
    return texts
