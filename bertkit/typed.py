"""Typed option dataclasses, shared by the run config (`config.py`) and every task's options (`tasks/`): each option is
written once, as a dataclass field with its help text, and from that one declaration come the strict reading of
YAML and overrides (`build`: unknown keys and wrong types are errors naming their source) and the command-line
flags (`add_flags`: `max_steps` → `--max-steps X`, help from the field).

Example:
```python
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Options:
...     window_overlap: int = option(128, "Word pieces shared by consecutive windows.")
>>> build(Options, {"window_overlap": 64}, "recipe.yaml").window_overlap
64
>>> build(Options, {"window_overlap": "many"}, "recipe.yaml")
Traceback (most recent call last):
bertkit.errors.BertkitError: recipe.yaml: 'window_overlap' must be an integer, got 'many'
```
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import types
import typing
from dataclasses import field

from .errors import BertkitError


def option(default, help: str, **meta):
    """A dataclass field with its help text. `meta`: `choices` (allowed values), `legacy` (its names in bertkit 0.2),
    `aliases` (extra command-line flags, e.g. a 0.2 flag name), `dest` (its flag's and flat key's name when not the
    field's), `flag=False` (no command-line flag: YAML only), `dataset=True` (it describes one data set, not the
    training: `dataset_options`), `read=True` (it says how a data file is read, its columns or delimiter:
    `read_options`, the flags `bertkit evaluate` takes)."""
    if isinstance(default, (dict, list)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


def hints(cls) -> dict:
    return typing.get_type_hints(cls)


def check_type(name: str, value, tp):
    """`value` as type `tp`, or BertkitError. Strict: no silent str → number; a list may be given as 'a,b,c'."""
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
                return check_type(name, value, arg)
            except BertkitError as e:
                errors.append(str(e))
        raise BertkitError(errors[0])
    if origin is dict:  # {name: mapping}: the inner values are checked where they are used
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise BertkitError(f"'{name}' must map names to mappings of fields, got {value!r}")
        return value
    if origin is list:
        (item,) = typing.get_args(tp)
        if isinstance(value, str):  # command-line form: a,b,c (numbers as text)
            value = [v.strip() for v in value.split(",") if v.strip()]
            if item in (int, float):
                try:
                    value = [item(v) for v in value]
                except ValueError:
                    raise BertkitError(f"'{name}' must be a comma-separated list of numbers, got {value!r}") from None
        if not isinstance(value, list):
            raise BertkitError(f"'{name}' must be a list, got {value!r}")
        return [check_type(name, v, item) for v in value]
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
    raise TypeError(f"unsupported option type {tp} for {name}")


def unknown_key(key: str, known, source: str, hint: str = "") -> BertkitError:
    close = difflib.get_close_matches(key, list(known), n=1)
    return BertkitError(f"{source}: unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
                        + hint)


def checked(cls, values: dict, source: str) -> dict:
    """`values` type-checked against the fields of dataclass `cls` (unknown keys, types, choices), as a dict."""
    fields, tps = {f.name: f for f in dataclasses.fields(cls)}, hints(cls)
    out = {}
    for key, value in values.items():
        if key not in fields:
            raise unknown_key(key, fields, source)
        try:
            value = check_type(key, value, tps[key])
        except BertkitError as e:
            raise BertkitError(f"{source}: {e}") from None
        choices = fields[key].metadata.get("choices")
        if choices and value not in choices:
            raise BertkitError(f"{source}: '{key}' must be one of {', '.join(map(str, choices))}, got {value!r}")
        out[key] = value
    return out


def build(cls, values: dict, source: str, base=None):
    """An instance of dataclass `cls` from `values` over `base` (an instance, or the defaults), checked strictly;
    then its own `validate(source)` if it has one."""
    values = checked(cls, values, source)
    obj = dataclasses.replace(base, **values) if base is not None else cls(**values)
    if hasattr(obj, "validate"):
        obj.validate(source)
    return obj


def option_names(options_class) -> dict[str, str]:
    """{name: field} of an options dataclass: each field by its name and by its bertkit 0.2 names (`legacy`)."""
    names = {}
    for f in dataclasses.fields(options_class):
        names.update({old: f.name for old in f.metadata.get("legacy", ())}, **{f.name: f.name})
    return names


def dataset_options(options_class) -> list[str]:
    """The fields of an options dataclass that describe one data set (`option(..., dataset=True)`)."""
    return [f.name for f in dataclasses.fields(options_class) if f.metadata.get("dataset")]


def read_options(options_class) -> list[str]:
    """The fields of an options dataclass that say how a data file is read (`option(..., read=True)`): what may
    differ between a run's training files and a file it is scored on."""
    return [f.name for f in dataclasses.fields(options_class) if f.metadata.get("read")]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class Unset:
    """The value of `--x none` for an optional field: the field becomes None (a recipe's value cleared; a flag not
    given is None, which changes nothing)."""

    def __repr__(self) -> str:
        return "none"


UNSET = Unset()


def or_none(conv):
    """An argparse type: `none` (or `null`) is UNSET, anything else `conv`'s."""
    def parse(text: str):
        return UNSET if text.strip().lower() in ("none", "null") else conv(text)

    parse.__name__ = conv.__name__  # argparse's "invalid int value: 'x'"
    return parse


def add_flags(group, cls, names=None, prefix: str = "") -> None:
    """One flag per field of `cls` (or of `names`), help from the field; booleans get --x / --no-x. Every flag's
    default is None, so that only the flags given override the recipe (`given`). An optional field's flag takes
    `none` (its folder flags excepted: `none` is a folder's name there)."""
    tps = hints(cls)
    for f in dataclasses.fields(cls):
        if (names is not None and f.name not in names) or not f.metadata.get("flag", True):
            continue
        dest, tp, help = prefix + f.metadata.get("dest", f.name), tps[f.name], f.metadata.get("help", "")
        flags = [flag(dest), *f.metadata.get("aliases", ())]
        if tp is bool:
            _add(group, cls, f.name, *flags, dest=dest, action=argparse.BooleanOptionalAction, default=None,
                 help=help)
            continue
        if typing.get_origin(tp) is dict:
            continue
        conv = {int: int, float: float, int | None: int, float | None: float}.get(tp, str)
        if typing.get_origin(tp) is list or list in [typing.get_origin(a) for a in typing.get_args(tp)]:
            help += " (comma-separated)"
        if type(None) in typing.get_args(tp) and not f.name.endswith("_dir"):
            conv, help = or_none(conv), help + " (none clears it)"
        choices = f.metadata.get("choices")
        _add(group, cls, f.name, *flags, dest=dest, type=conv, default=None, help=help, choices=choices,
             metavar=None if choices else "X")


def _add(group, cls, name: str, *flags, **kwargs) -> None:
    """group.add_argument; a flag the command has already (a task's option named as a run's: `seed`) is one line."""
    try:
        group.add_argument(*flags, **kwargs)
    except argparse.ArgumentError:
        raise BertkitError(f"{cls.__qualname__}'s field '{name}' makes the flag {flags[0]}, which the command has "
                           f"already: give the field another name") from None


def given(args: argparse.Namespace, cls, prefix: str = "", names=None) -> dict:
    """{field: value} of the flags of `cls` (or of `names`) given on the command line (those that are not None;
    `--x none`: None)."""
    values = {f.name: getattr(args, prefix + f.metadata.get("dest", f.name), None) for f in dataclasses.fields(cls)
              if names is None or f.name in names}
    return {name: None if value is UNSET else value for name, value in values.items() if value is not None}


def to_dict(obj) -> dict:
    """A (nested) options dataclass as plain YAML-ready values."""
    return dataclasses.asdict(obj)
