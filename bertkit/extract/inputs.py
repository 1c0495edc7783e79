"""Sentences for extraction, streamed from a file: raw text, whitespace-tokenised text, CoNLL, JSONL, or a table
(TSV, CSV, parquet: one column's texts, a sentence a row).

Each item is (sentence id, words, source line). Raw text is split into words by the model tokenizer's own
pre-tokenizer (whitespace and punctuation, as BERT sees them); CoNLL, and a JSONL field holding a list of words
(`--text-field tokens` on the datasets layout), keep the file's words one-to-one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..data.conll import DOCSTART, scan_conll
from ..data.readers import (
    DELIMITERS,
    TEXT_COLUMNS,
    first_line,
    iter_lines,
    json_object,
    read_rows,
    source_name,
    without_blank_end,
)
from ..errors import DataError

FORMATS = ("auto", "text", "pretokenized", "conll", "jsonl", "table")
TABLES = (*DELIMITERS, ".parquet")


def split_text(text: str, tokenizer=None) -> list[str]:
    """Raw text → words as `bertkit extract` reads a text line: the tokenizer's own pre-tokenizer (white space and
    punctuation, as BERT sees them), or white space without a tokenizer."""
    pre = tokenizer.backend_tokenizer.pre_tokenizer if tokenizer is not None else None
    if pre is None:
        return text.split()
    # the pre-tokens' characters, not the pre-tokens: byte-level BPE and sentencepiece write a space into them
    # ('Ġword', '▁word'), which the tokenizer would read as part of the word
    words = [text[a:b].strip() for _, (a, b) in pre.pre_tokenize_str(text)]
    return [w for w in words if w]


def as_words(sentence, tokenizer=None) -> list[str]:
    """A sentence as words: raw text (a str) split as `split_text` splits a text line, a list of words as it is."""
    return split_text(sentence, tokenizer) if isinstance(sentence, str) else list(sentence)


def detect_format(path: Path) -> str:
    if path.suffix.lower() in (".jsonl", ".json"):
        return "jsonl"
    if path.suffix.lower() in TABLES:
        return "table"
    line = first_line(path)  # standard input keeps it for the reading
    if line is None:
        raise DataError("file is empty" if str(path) != "-" else "no input", file=source_name(path))
    return "conll" if line.startswith("-DOCSTART-") or path.suffix.lower() == ".conll" else "text"


def read_sentences(path, fmt: str, tokenizer=None, text_field: str | None = None
                   ) -> Iterator[tuple[int, list[str], int]]:
    """(sentence id, words, line) for each sentence of `path`. `text_field`: JSONL's field with the text (default
    text) or a table's column (default: the first of `TEXT_COLUMNS` it has)."""
    path = Path(path)
    if fmt == "auto":
        fmt = detect_format(path)
    count = 0
    if fmt == "table":
        yield from _table_sentences(path, tokenizer, text_field)
        return
    text_field = text_field or "text"
    if fmt == "conll":  # the file's words one-to-one, a sentence per blank-line block
        words, start = [], None
        for n, fields in [*scan_conll(path), (None, [])]:
            if fields and fields[0] != DOCSTART:
                words.append(fields[0])
                start = start or n
            elif words:
                yield count, words, start
                count, words, start = count + 1, [], None
    else:
        for n, line in without_blank_end(iter_lines(path)):
            words = None
            if fmt == "jsonl":
                if not line.strip():
                    continue
                row = json_object(line, path, n)
                if text_field not in row:
                    raise DataError("missing text field", file=path, line=n, field=text_field)
                value = row[text_field]
                if isinstance(value, list):  # words (the datasets layout's tokens): one row each, as in CoNLL
                    if not value or not all(isinstance(w, str) and len(w.split()) == 1 for w in value):
                        raise DataError("a list of words must hold non-empty words without white space", file=path,
                                        line=n, field=text_field)
                    words = value
                line = value if isinstance(value, str) else " ".join(words or [])
            if not line.strip():
                raise DataError("empty text (one sentence per line; remove blank lines)", file=path, line=n,
                                field=text_field if fmt == "jsonl" else None)
            if words is None:
                words = line.split() if fmt == "pretokenized" else split_text(line, tokenizer)
            yield count, words, n
            count += 1
    if count == 0:
        raise DataError("no sentences found", file=path)


def _table_sentences(path: Path, tokenizer, column: str | None) -> Iterator[tuple[int, list[str], int]]:
    """A table's texts, one sentence a row, from `column` (default: the first of `TEXT_COLUMNS` the table has)."""
    if path.suffix.lower() not in TABLES:
        raise DataError(f"a table is a {', '.join(TABLES)} file", file=path)
    rows = read_rows(path)
    if not rows:
        raise DataError("no rows (a header only)", file=path)
    header = rows[0][1]
    tried = [column] if column else list(TEXT_COLUMNS)
    column = next((c for c in tried if c in header), None)
    if column is None:
        raise DataError(f"no text column {' or '.join(tried)} (found: {', '.join(map(str, header))}); name it with "
                        "--text-field", file=path, line=1)
    for count, (n, row) in enumerate(rows):
        text = row.get(column)
        if not isinstance(text, str) or not text.strip():
            why = "empty text" if isinstance(text, str) or text is None else f"must be text, got {text!r:.40}"
            raise DataError(why, file=path, line=n, field=column)
        yield count, split_text(text, tokenizer), n
