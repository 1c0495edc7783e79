"""The one reader of every input format: lines (text, one item per line), JSONL, GLUE-style TSV, CSV and parquet
(CoNLL files are read line by line through `iter_lines` too, in conll.py). Training, evaluate, predict, extract and
probe all read through here, so the errors are the same everywhere.

Each reader returns `(line_number, row)` pairs so that every later error can name file, line and field; a row
that spans several lines (a quoted text with line breaks) is numbered by the line it starts on. `-` reads
standard input where a command accepts it.
GLUE TSVs are read with quoting off (they contain bare quote characters) and keep the literal text `null`/`NA`;
a UTF-8 byte-order mark and CRLF line ends are accepted.

Quoting (`quoting="auto"`, the default): comma-separated files are read as CSV (quoted fields). Tab-separated files
are first read with quoting off, as GLUE files must be. Only when that fails (a row with the wrong number of fields,
as a quoted text with a line break or a tab inside gives) or when a field is written the CSV way (wholly in
quotes, with doubled quotes inside: `"say ""hi"" now"`) is the file read again with CSV quoting, as pandas and
spreadsheets write it; that reading is used if it succeeds (every row has the header's number of fields, no stray
quote), and stderr says so. A file that reads both ways keeps the quoting-off reading unless it has such a
CSV-quoted field. `quoting="none"` or `"csv"` (the `--quoting` flag) forces one way.

Example:
```python
read_rows("train.tsv")[:1]   # sentence<TAB>label: [(its line number, {'sentence': ..., 'label': ...})]
```
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError
from ..utils import LONE_SURROGATE, SURROGATE_ESCAPE, lone_surrogate, not_utf8, say
from .json_lines import array_rows

csv.field_size_limit(2**31 - 1)
QUOTINGS = ("auto", "none", "csv")
_CSV_QUOTED = re.compile(r'"(?:[^"]|"")*""(?:[^"]|"")*"', re.S)  # "...""..." : a field in CSV quoting
_QUOTED = re.compile(r'"[^"]+"')  # a column's name in quotes: a file quoted throughout (R's write.table)


def _text(path: Path) -> str:
    if not path.is_file():
        raise DataError("file not found" if not path.exists() else "not a file", file=path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(not_utf8(raw, e.start), file=path, line=line) from None
    if not text.strip():
        raise DataError("file is empty", file=path)
    return text


def _records(text: str, path: Path, delimiter: str, quoted: bool) -> list[tuple[int, list[str]]]:
    """(first line, fields) per record, blank lines skipped. Lines end at \\n, \\r\\n or \\r only."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                        quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE, strict=quoted)
    records, end = [], 0
    while True:
        start = end + 1
        try:
            fields = next(reader)
        except StopIteration:
            return records
        except csv.Error as e:
            raise DataError(f"cannot read this row ({e})", file=path, line=start) from None
        end = reader.line_num
        if fields and not (len(fields) == 1 and not fields[0].strip()):
            records.append((start, fields))


def _table(records, path: Path, columns: list[str] | None, required) -> list[tuple[int, dict]]:
    """Records → row dicts. With `columns`, a file whose first record does not name every `required` column has no
    header: its fields are named by `columns`, and fields beyond them are ignored (fewer is an error)."""
    if not records:
        raise DataError("no rows (only blank lines)", file=path)
    first = [h.strip() for h in records[0][1]]
    headerless = bool(columns) and not set(required or columns) <= set(first)
    header, body = (list(columns), records) if headerless else (first, records[1:])
    twice = next((c for c in header if header.count(c) > 1 and (not required or c in required)), None)
    if twice is not None and not headerless:  # a dict keeps the last: the column read would be the other one
        at = [i + 1 for i, c in enumerate(header) if c == twice]
        raise DataError(f"the header names {twice!r} twice (columns {' and '.join(map(str, at))}): rename one",
                        file=path, line=records[0][0])
    rows = []
    for line, fields in body:
        if len(fields) != len(header) and not (headerless and len(fields) > len(header)):
            raise DataError(f"expected {len(header)} columns ({', '.join(header)}), found {len(fields)}",
                            file=path, line=line)
        rows.append((line, dict(zip(header, fields, strict=False))))  # fields past the header's: ignored
    return rows


def read_delimited(path: Path, delimiter: str, quoting: str = "auto", columns: list[str] | None = None,
                   required=()) -> list[tuple[int, dict]]:
    """Header (or `columns` for a file without one) + rows; every row has as many fields as the header.

    Args:
        delimiter (`str`): field separator (tab for .tsv, comma for .csv unless the recipe says otherwise).
        quoting (`str`, *optional*, defaults to `"auto"`): `none` (GLUE), `csv` (pandas, spreadsheets), or `auto`
            (quoting off unless the file needs it; see the module docstring).
        columns (`list[str]`, *optional*): field names of a file without a header row (CoLA, the STS Benchmark).
        required (`list[str]`, *optional*): the columns the caller reads; a first row naming them all is a header.
    """
    text = _text(path)
    try:
        return _read_delimited(text, path, delimiter, quoting, columns, required)
    except DataError as e:
        first = next((line for line in text.splitlines() if line.strip()), "")
        if delimiter in first or not re.search(r"found 1\b", e.reason):
            raise
        name = {"\t": "tab", ",": "comma", ";": "semicolon"}.get(delimiter, repr(delimiter))
        reason = e.reason.split(" (read with quoting off", 1)[0]  # quoting is not what is wrong
        raise DataError(f"{reason}: its first line has no {name}, the delimiter it is read with (--delimiter none "
                        f"reads a file by its extension, --delimiter names another)", file=path, line=e.line) from None


def _read_delimited(text: str, path: Path, delimiter: str, quoting: str, columns, required):
    if quoting == "auto" and delimiter != "\t":
        quoting = "csv"  # comma-separated files are CSV; only tab-separated ones may be GLUE's unquoted kind
    if quoting != "auto":
        try:
            return _table(_records(text, path, delimiter, quoting == "csv"), path, columns, required)
        except DataError as e:
            if quoting == "csv" or '"' not in text or "columns" not in e.reason:
                raise
            raise DataError(f"{e.reason} (read with --quoting none; if the texts are in quotes, --quoting csv)",
                            file=path, line=e.line) from None
    quoted_header = False
    try:
        plain, failure = _table(_records(text, path, delimiter, False), path, columns, required), None
        quoted_header = bool(plain) and all(_QUOTED.fullmatch(k) for k in plain[0][1])  # "text"<TAB>"label"
        if not quoted_header and not any(_CSV_QUOTED.fullmatch(v) for _, row in plain for v in row.values()
                                         if v.startswith('"')):
            return plain
    except DataError as e:
        plain, failure = None, e
    try:
        rows = _table(_records(text, path, delimiter, True), path, columns, required)
    except DataError as e:
        if plain is not None:  # looked CSV-quoted but is not: read as GLUE files are
            return plain
        raise DataError(f"{failure.reason} (read with quoting off, as GLUE files are; with CSV quoting: line "
                        f"{e.line}: {e.reason}); if the file is quoted otherwise, fix it, or choose with --quoting",
                        file=path, line=failure.line) from None
    why = ("quoted texts span lines or hold the delimiter" if failure else
           "its header's names in quotes" if quoted_header else "texts in quotes with doubled quotes")
    say(f"{path}: read with CSV quoting ({why}); --quoting none turns it off")
    return rows


def source_name(source) -> str:
    """How errors name an input: its path, or <stdin> for `-`."""
    return "<stdin>" if str(source) == "-" else str(source)


_PEEKED: list = [None]  # [the standard input they came from, its first lines...]: read by `first_line` (a
# format's detection) and not yet by `iter_lines`, which gives them first


def iter_lines(source) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line of a file, or of standard input for `-`, streamed: the line end removed, a
    UTF-8 byte-order mark dropped; a byte that is not UTF-8 stops with the file and line."""
    if str(source) == "-":
        for n, raw in enumerate(_stdin_lines(), start=1):
            yield n, _decoded(raw, source, n)
        return
    path = Path(source)
    if not path.is_file():
        raise DataError("file not found" if not path.exists() else "not a file", file=path)
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            yield n, _decoded(raw, path, n)


def _stdin_lines() -> Iterator[bytes]:
    """Standard input's lines as bytes (decoded as a file's are), those `first_line` peeked at first."""
    if _PEEKED[0] is not sys.stdin:  # peeked from another stream (a notebook's or a test's earlier one)
        _PEEKED[1:] = []
    while len(_PEEKED) > 1:
        yield _PEEKED.pop(1)
    while raw := _stdin_line():
        yield raw


def _stdin_line() -> bytes:
    stream = getattr(sys.stdin, "buffer", None)  # a notebook's or a test's text stream has none
    return stream.readline() if stream is not None else sys.stdin.readline().encode("utf-8", "surrogateescape")


def _decoded(raw: bytes, source, n: int) -> str:
    try:
        text = raw.decode("utf-8-sig" if n == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise DataError(not_utf8(raw, e.start), file=source_name(source), line=n) from None
    return text.rstrip("\r\n")


def first_line(source) -> str | None:
    """The first line with text of a file or of standard input (kept there for the reading that follows), or None."""
    return next(iter(first_lines(source, 1)), None)


def first_lines(source, count: int) -> list[str]:
    """The first `count` lines with text of a file or of standard input (kept there for the reading that follows;
    fewer where the input has fewer)."""
    if str(source) != "-":
        return list(itertools.islice((line for _, line in iter_lines(source) if line.strip()), count))
    if _PEEKED[0] is not sys.stdin:
        _PEEKED[:] = [sys.stdin]
    found = [text for n, raw in enumerate(_PEEKED[1:], start=1)  # asked before
             if (text := _decoded(raw, source, n)).strip()][:count]
    while len(found) < count and (raw := _stdin_line()):
        _PEEKED.append(raw)
        if (text := _decoded(raw, source, len(_PEEKED) - 1)).strip():
            found.append(text)
    return found


def without_blank_end(lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """`lines` ((line number, text) pairs, as `iter_lines` gives them), streamed, less the blank lines at their end
    (an editor's last newline): a blank line is held back until a line with text follows it."""
    held = []
    for n, line in lines:
        if not line.strip():
            held.append((n, line))
            continue
        yield from held
        held = []
        yield n, line


def read_lines(source, what: str = "text", hint: str = "") -> list[tuple[int, str]]:
    """The lines of a one-`what`-per-line input (a file or `-`): blank lines at its end are left out (an editor's
    last newline); a blank line before a text, or no text at all, is an error (`hint` ends its message)."""
    rows = []
    for n, line in without_blank_end(iter_lines(source)):
        if not line.strip():
            raise DataError(f"empty text (one {what} per line; remove blank lines{hint})", file=source_name(source),
                            line=n)
        rows.append((n, line))
    if not rows:
        raise DataError("file is empty" if str(source) != "-" else "no input text", file=source_name(source))
    return rows


def json_object(text: str, path, line: int, hint: str = "") -> dict:
    """One JSONL line as an object, or a DataError naming file and line (and `hint`: what a line should hold)."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e.msg} (column {e.colno}){hint}", file=path, line=line) from None
    if not isinstance(row, dict):
        raise DataError(f"not a JSON object{hint}" if hint else "each line must be a JSON object", file=path,
                        line=line)
    if re.search(SURROGATE_ESCAPE, text) and (where := lone_surrogate(row)) is not None:
        raise DataError(LONE_SURROGATE, file=path, line=line, field=where)
    return row


def iter_jsonl(source, hint: str = "") -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file, or of standard input for `-`, streamed;
    `hint` ends the message of a line that is not a JSON object (what one should hold)."""
    for n, text in iter_lines(source):
        if text.strip():
            yield n, json_object(text, source_name(source), n, hint)


def read_jsonl(source) -> list[tuple[int, dict]]:
    """A JSON object a line, or in a `.json` file one JSON array of objects (as `datasets.load_dataset("json")`
    reads)."""
    first = first_lines(source, 1) if Path(source).suffix.lower() == ".json" else []
    if first and first[0].lstrip().startswith("["):
        text = "\n".join(line for _, line in iter_lines(source))
        rows = array_rows(text, source_name(source))
        for n, row in rows if re.search(SURROGATE_ESCAPE, text) else ():
            if (where := lone_surrogate(row)) is not None:
                raise DataError(LONE_SURROGATE, file=source_name(source), line=n, field=where)
        return rows
    rows = list(iter_jsonl(source))
    if not rows:
        raise DataError("file is empty" if str(source) != "-" else "no input", file=source_name(source))
    return rows


def read_parquet(path: Path) -> list[tuple[int, dict]]:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataError("file not found", file=path)
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DataError(f"not a readable parquet file: {e}", file=path) from None
    # parquet has no lines: rows are numbered from 1
    return list(enumerate(table.to_pylist(), start=1))


DELIMITERS = {".tsv": "\t", ".csv": ","}
TEXT_COLUMNS = ("text", "sentence", "sentence1", "premise", "#1 String")  # a table's text, where none is named
ID_COLUMNS = ("id", "idx", "index", "fold-ind")  # echoed by predict where no --id-column is named (GLUE: index)
READERS = {".jsonl": read_jsonl, ".json": read_jsonl, ".parquet": read_parquet}


def read_rows(path, delimiter: str | None = None, quoting: str = "auto", columns: list[str] | None = None,
              required=()) -> list[tuple[int, dict]]:
    """Rows of a .tsv, .csv, .jsonl or .parquet file; the delimited-file options are those of `read_delimited`
    (`delimiter` defaults to the extension's)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in DELIMITERS:
        return read_delimited(path, delimiter or DELIMITERS[suffix], quoting, columns, required)
    if suffix not in READERS:
        raise DataError(f"unknown file type '{path.suffix}' (expected one of {', '.join([*DELIMITERS, *READERS])})",
                        file=path)
    return READERS[suffix](path)
