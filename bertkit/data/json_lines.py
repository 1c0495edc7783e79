"""Lines in a JSON text, for errors about a value found by its path (`data[0].paragraphs[1].qas`) rather than while
parsing: `json.loads` keeps no positions, so the text is parsed again, only when there is an error to place."""

from __future__ import annotations

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

    def parse_object(s_and_end, *args):
        obj, end = json.decoder.JSONObject(s_and_end, *args)
        starts[id(obj)] = s_and_end[1] - 1
        return obj, end

    decoder = json.JSONDecoder()
    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    node = decoder.decode(text)
    holder = node
    for key, index in re.findall(r"(\w+)|\[(\d+)\]", field):
        try:
            node = node[int(index)] if index else node[key]
        except (KeyError, IndexError, TypeError, ValueError):
            break
        holder = node if isinstance(node, dict) else holder
    return text.count("\n", 0, starts[id(holder)]) + 1 if id(holder) in starts else None


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
