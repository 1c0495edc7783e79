"""Lines in a JSON text, for errors about a value found by its path (`data[0].paragraphs[1].qas`) rather than while
parsing: `json.loads` keeps no positions, so the text is parsed again, only when there is an error to place."""

from __future__ import annotations

import bisect
import contextlib
import json.decoder
import json.scanner
import re

from ..errors import DataError


def object_line(text: str, field: str) -> int | None:
    """The line where the JSON object at `field` (`data[0].paragraphs[1].qas`), or the nearest one holding it,
    begins: for an error about a field that is missing or mistyped, found by no id. Parses `text` again with the
    pure-Python scanner, which gives each object's offset (slower: only on an error)."""
    starts: dict[int, int] = {}
    node = _decoder(starts).decode(text)
    holder = node
    for key, index in re.findall(r"(\w+)|\[(\d+)\]", field):
        try:
            node = node[int(index)] if index else node[key]
        except (KeyError, IndexError, TypeError, ValueError):
            break
        holder = node if isinstance(node, dict) else holder
    return text.count("\n", 0, starts[id(holder)]) + 1 if id(holder) in starts else None


def _decoder(starts: dict[int, int]) -> json.JSONDecoder:
    """A JSON decoder (the pure-Python scanner) that records where each object it makes begins: id -> offset."""
    def parse_object(s_and_end, *args):
        obj, end = json.decoder.JSONObject(s_and_end, *args)
        starts[id(obj)] = s_and_end[1] - 1
        return obj, end

    decoder = json.JSONDecoder()
    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    return decoder


def array_rows(text: str, file) -> list[tuple[int, dict]]:
    """(line, object) of each item of a JSON array of objects (`[{...}, ...]`, a layout `datasets`' json loader
    reads as well as JSON lines), numbered by the line where the object begins."""
    starts: dict[int, int] = {}
    try:
        items = _decoder(starts).decode(text)
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e.msg} (column {e.colno})", file=file, line=e.lineno) from None
    if not isinstance(items, list):  # (a line of its own after the array's)
        raise DataError("expected one JSON array of objects, or a JSON object a line", file=file)
    ends = [m.start() for m in re.finditer("\n", text)]  # the offsets of the line ends
    rows = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(f"item {i + 1} of the array is not a JSON object", file=file)
        rows.append((bisect.bisect(ends, starts[id(item)]) + 1, item))
    return rows


@contextlib.contextmanager
def lines_in_errors(text: str):
    """A DataError raised in the block about a field of the JSON `text` and found without a line (a SQuAD file's
    missing id, a paragraph without qas) gets the line of the object it is about (`object_line`)."""
    try:
        yield
    except DataError as e:
        line = object_line(text, e.field) if e.line is None and e.field else None
        if line is None:
            raise
        raise type(e)(e.reason, file=e.file, line=line, field=e.field) from None
