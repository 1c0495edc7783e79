"""Row readers for local files: GLUE-style TSV, CSV, JSONL and parquet.

Each reader returns `(line_number, row_dict)` pairs so that every later error can name file, line and field.
GLUE TSVs are read with quoting off (they contain bare quote characters) and keep the literal text `null`/`NA`;
a UTF-8 byte-order mark and CRLF line ends are accepted.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..errors import DataError

csv.field_size_limit(2**31 - 1)


def _text(path: Path) -> str:
    if not path.is_file():
        raise DataError("file not found" if not path.exists() else "not a file", file=path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"not UTF-8 text (byte 0x{raw[e.start]:02x})", file=path, line=line) from None
    if not text.strip():
        raise DataError("file is empty", file=path)
    return text


def read_delimited(path: Path, delimiter: str) -> list[tuple[int, dict]]:
    """Header + rows; every row must have as many fields as the header."""
    lines = _text(path).splitlines()
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(lines, delimiter=delimiter, quoting=quoting)
    header = [h.strip() for h in next(reader)]
    rows = []
    for fields in reader:
        line = reader.line_num
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # blank line
        if len(fields) != len(header):
            raise DataError(f"expected {len(header)} columns ({', '.join(header)}), found {len(fields)}",
                            file=path, line=line)
        rows.append((line, dict(zip(header, fields))))
    return rows


def json_object(text: str, path, line: int) -> dict:
    """One JSONL line as an object, or a DataError naming file and line."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e.msg} (column {e.colno})", file=path, line=line) from None
    if not isinstance(row, dict):
        raise DataError("each line must be a JSON object", file=path, line=line)
    return row


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    rows = []
    for line, text in enumerate(_text(path).splitlines(), start=1):
        if text.strip():
            rows.append((line, json_object(text, path, line)))
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


READERS = {".tsv": lambda p: read_delimited(p, "\t"), ".csv": lambda p: read_delimited(p, ","),
           ".jsonl": read_jsonl, ".json": read_jsonl, ".parquet": read_parquet}


def read_rows(path) -> list[tuple[int, dict]]:
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"unknown file type '{path.suffix}' (expected one of {', '.join(READERS)})", file=path)
    return reader(path)
