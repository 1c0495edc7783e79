"""CoNLL-format tagged data (CoNLL-2003 NER and alike) → `datasets.Dataset` with `tokens`, `tags` and `doc` columns.

File format: one token per line in whitespace-separated columns (`token POS chunk NER`, or just `token TAG`, spaces
or tabs); a blank line ends a sentence; `-DOCSTART-` lines separate documents (`doc` numbers them from 0, for
document context; a file without them is one document) and are skipped. The token is the first
column and the tag the last one, unless `tag_column` (counted from 0) says otherwise. Every token line of a file
must have as many columns as the first one.

A `.jsonl` or `.json` file (run_ner.py's) holds a sentence a line as the Hugging Face datasets layout does,
`{"tokens": [...], "ner_tags": [...]}` (tags as strings, or as ids into the given label names; the options'
`hub_columns` name other fields).

Tags must be `O`, `B-TYPE` or `I-TYPE`. Both IOB schemes are accepted and normalised to IOB2, where every entity
starts with `B-`: in IOB1 (the original CoNLL-2003 release) `I-` starts an entity and `B-` only separates two
adjacent entities of one type. The conversion moves no entity boundary as conlleval reads them, so scores do not
change. Schemes with end tags (IOBES, BILOU) are refused rather than guessed at.

Label order (id2label), stable and independent of file order: `O`, then `B-T`, `I-T` for each entity type `T` in
alphabetical order; for CoNLL-2003: `O, B-LOC, I-LOC, B-MISC, I-MISC, B-ORG, I-ORG, B-PER, I-PER`.

Example:
```python
data = read_conll_file("conll2003/valid.txt")
data["tokens"][0], data["tags"][0], data["scheme"]  # the first sentence's words and IOB2 tags; the file's scheme
```
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import datasets

from ..errors import BertkitError, DataError
from ..utils import say
from .readers import iter_lines, read_jsonl
from .sources import eval_paths, load_hub_splits, resolve_data_dir, split_path, training_file
from .tags import TAG, _tag_error, label_names_for, sentence_tags, to_iob2

SEPARATOR = re.compile(r"[ \t]+")  # spaces or tabs; other (Unicode) white space may be part of a token
DOCSTART = "-DOCSTART-"
JSONL_COLUMNS = ("tokens", "ner_tags")  # a JSONL file's words and tags (the datasets layout's names)
JSON_SUFFIXES = (".jsonl", ".json")  # JSON lines: run_ner.py's and `Dataset.to_json`'s files are named .json


def scan_conll(source) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every line of a CoNLL file, streamed: [] for a blank line (a sentence break); a
    document line's first field is -DOCSTART-. Fields are separated by spaces or tabs."""
    for n, line in iter_lines(source):
        stripped = line.strip(" \t")
        yield n, SEPARATOR.split(stripped) if stripped else []


def read_conll_file(path, tag_column: int = -1, label_names: list[str] | None = None, max_samples: int | None = None,
                    tagged: bool | None = True, columns=JSONL_COLUMNS, tag_ids: list[str] | None = None) -> dict:
    """Read and validate one CoNLL file. Returns {tokens, tags, docs, scheme, converted}: lists of sentences, of
    their document numbers (counted in `-DOCSTART-` lines), 'IOB1' or
    'IOB2' (the scheme found; tags are always returned in IOB2) and how many tags were converted. With `label_names`,
    every tag must be one of them. `tagged=False` reads tokens only (no `tags`); `tagged=None` reads tags when the
    file has a second column (prediction input, with or without gold tags). A `.jsonl` or `.json` file is read by
    `read_tagged_jsonl` (its `columns`, `tag_ids`)."""
    path = Path(path)
    if path.suffix.lower() in JSON_SUFFIXES:
        return read_tagged_jsonl(path, label_names, max_samples, tagged, columns, tag_ids)
    tokens, tags, docs, changed, doc = [], [], [], 0, 0
    words, word_tags, tag_lines = [], [], []
    width = tag_index = None

    def end_sentence():
        nonlocal changed
        if not words:
            return
        tokens.append(list(words))
        docs.append(doc)
        if tag_index is not None:
            iob2, n = to_iob2(word_tags)
            changed += n
            for tag, line in zip(iob2, tag_lines, strict=True):
                if label_names is not None and tag not in label_names:
                    raise DataError(f"tag {tag!r} is not in the label set ({', '.join(label_names)})", file=path,
                                    line=line, field=f"column {tag_index + 1}")
            tags.append(iob2)
        words.clear()
        word_tags.clear()
        tag_lines.clear()

    blank = True
    for n, fields in scan_conll(path):
        blank = blank and not fields
        if not fields or fields[0] == DOCSTART:
            end_sentence()
            if fields and tokens:  # a -DOCSTART- after sentences opens the next document
                doc += 1
            continue
        if width is None:
            width = len(fields)
            if tagged or (tagged is None and width > 1):
                tag_index = tag_column if tag_column >= 0 else width + tag_column
                if width < 2 or not 0 < tag_index < width:
                    raise DataError(f"no tag column {tag_column} in a line of {width} column(s); expected "
                                    "'token ... TAG' (set tag_column, counted from 0)", file=path, line=n)
        elif len(fields) != width:
            raise DataError(f"expected {width} columns (as in the file's first token line), found {len(fields)}",
                            file=path, line=n)
        words.append(fields[0])
        if tag_index is not None:
            tag = fields[tag_index]
            if not TAG.match(tag):
                raise DataError(_tag_error(tag), file=path, line=n, field=f"column {tag_index + 1}")
            word_tags.append(tag)
            tag_lines.append(n)
    end_sentence()
    if blank:
        raise DataError("file is empty", file=path)
    if not tokens:
        raise DataError("no sentences (only blank or -DOCSTART- lines)", file=path)
    out = {"tokens": tokens[:max_samples] if max_samples is not None else tokens, "scheme": "IOB1" if changed else
           "IOB2", "converted": changed}
    out["docs"] = docs[: len(out["tokens"])]
    if tag_index is not None:
        out["tags"] = tags[: len(out["tokens"])]
    return out


def read_tagged_jsonl(path, label_names: list[str] | None = None, max_samples: int | None = None,
                      tagged: bool | None = True, columns=JSONL_COLUMNS, tag_ids: list[str] | None = None) -> dict:
    """JSONL sentences as the Hugging Face datasets layout has them, {"tokens": [words], "ner_tags": [tags]} (other
    names: `columns`): tags as strings, or as ids into `tag_ids` (the names the user gave, in id order: never names
    derived from other data, whose order the ids need not follow). Returns what `read_conll_file` does (one
    document)."""
    token_field, tag_field = columns or JSONL_COLUMNS
    tokens, tags, changed = [], [], 0
    for n, row in read_jsonl(path):
        words = row.get(token_field)
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and len(w.split()) == 1
                                                                 for w in words):
            raise DataError(_missing(row) if words is None else "must be a non-empty list of words (each "
                            "non-empty, without white space)", file=path, line=n, field=token_field)
        if tagged is None:
            tagged = tag_field in row  # prediction input: gold tags if the first sentence has them
        if not tagged:
            tokens.append(words)
            continue
        ids = row.get(tag_field)
        if not isinstance(ids, list) or len(ids) != len(words):
            raise DataError(_missing(row) if ids is None else f"expected a list of {len(words)} tags, one per token",
                            file=path, line=n, field=tag_field)
        for tag in ids:
            if isinstance(tag, int) and not isinstance(tag, bool) and not (tag_ids and 0 <= tag < len(tag_ids)):
                raise DataError(f"tag id {tag}: " + ("give the tags' names in id order (--label-names O,B-PER,...)"
                                                     if not tag_ids else f"not below {len(tag_ids)}"),
                                file=path, line=n, field=tag_field)
        named = [tag_ids[t] if isinstance(t, int) and not isinstance(t, bool) else t for t in ids]
        iob2, converted = sentence_tags(named, label_names, path, n, tag_field)
        tokens.append(words)
        tags.append(iob2)
        changed += converted
    tokens = tokens[:max_samples] if max_samples is not None else tokens
    out = {"tokens": tokens, "scheme": "IOB1" if changed else "IOB2", "converted": changed, "docs": [0] * len(tokens)}
    return {**out, "tags": tags[: len(tokens)]} if tagged else out


def _missing(row: dict) -> str:
    return (f"missing (the line has: {', '.join(map(str, row))}; --hub-columns names the fields of the words and of "
            "the tags, e.g. --hub-columns words,labels)")


def _dataset(data: dict) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"tokens": data["tokens"], "tags": data["tags"], "doc": data["docs"]})


def report_file(name, data: dict) -> None:
    """One line per file on stderr: size and the tag scheme found."""
    scheme = (f"IOB1, converted to IOB2 ({data['converted']} entities began with I-)" if data["scheme"] == "IOB1"
              else "IOB2")
    words = sum(len(t) for t in data["tokens"])
    say(f"{name}: {len(data['tokens'])} sentences, {words} tokens, tags {scheme}")


def _check_label_names(names: list[str], source: str) -> None:
    bad = [n for n in names if not TAG.match(n)]
    if bad or "O" not in names:
        raise BertkitError(f"{source}: label_names must be O, B-TYPE and I-TYPE tags (got {', '.join(names)})")


def load_conll_data(cfg, options) -> tuple[datasets.Dataset, dict[str, datasets.Dataset], list[str]]:
    """Train set, evaluation sets by name (file stem), and label names, validated before anything is written.
    The label set comes from the whole training file (or the options' `label_names`, then every tag must be one).
    `options`: the token-classification task's (`tag_column`, `label_names`, `hub_columns`)."""
    o = options
    data_dir = resolve_data_dir(cfg)
    if data_dir is None and not Path(cfg.train_file or "").is_absolute():
        return _from_hub(cfg, o)
    if o.label_names:
        _check_label_names(o.label_names, "label_names")
    train_path, eval_at = training_file(cfg, data_dir), eval_paths(cfg, data_dir)
    given = list(o.label_names) or None  # names in id order, for a JSONL file's tag ids
    train = read_conll_file(train_path, o.tag_column, given, columns=o.hub_columns, tag_ids=given)
    report_file(train_path, train)
    label_names = list(o.label_names) or label_names_for(train["tags"])
    if cfg.max_train_samples is not None:
        train = {**train, **{k: train[k][: cfg.max_train_samples] for k in ("tokens", "tags", "docs")}}
    evals = {}
    for path in eval_at:
        data = read_conll_file(path, o.tag_column, label_names, cfg.max_eval_samples, columns=o.hub_columns,
                               tag_ids=given)
        report_file(path, data)
        evals[path.stem] = _dataset(data)
    return _dataset(train), evals, label_names


def load_conll_split(cfg, options, split: str, label_names: list[str], file: str | None = None
                     ) -> datasets.Dataset:
    """One tagged evaluation set: an explicit file, or the recipe's file whose stem is `split` ('valid'),
    or its test file ('test'), or (no local data) the hub split of that name."""
    # a JSONL file's tag ids: into the names given (a run's own labels, for a run folder), never derived ones
    tag_column, read = options.tag_column, dict(columns=options.hub_columns, tag_ids=list(options.label_names) or None)
    path = Path(file) if file else split_path(cfg, split)
    if path is None:
        return _hub_split(cfg, options, split, label_names, cfg.max_eval_samples)
    data = read_conll_file(path, tag_column, label_names, cfg.max_eval_samples, **read)
    report_file(path, data)
    return _dataset(data)


# --- the hub copy (online only) -----------------------------------------------------------------------------------


def _hub_tags(ds: datasets.Dataset, column: str, name: str) -> list[list[str]]:
    """Tag strings of a hub split: ClassLabel ids are mapped through their names (the hub's own order)."""
    if column not in ds.column_names:
        raise BertkitError(f"{name} has no column '{column}' (columns: {', '.join(ds.column_names)}); "
                           "set hub_columns to [token column, tag column]")
    feature = getattr(ds.features[column], "feature", None)
    names = getattr(feature, "names", None)
    return [[names[t] for t in row] if names else list(row) for row in ds[column]]


def _hub_split(cfg, options, split: str, label_names: list[str] | None, max_samples: int | None = None
               ) -> datasets.Dataset:
    """A hub split with `tokens` and `tags` (from the options' `hub_columns`), validated and in IOB2."""
    ds = load_hub_splits(cfg, [split])[0]
    name = f"{cfg.hub.dataset}[{split}]"
    token_column, tag_column = options.hub_columns or ["tokens", "ner_tags"]
    if max_samples is not None:
        ds = ds.select(range(min(max_samples, len(ds))))
    if token_column not in ds.column_names:
        raise BertkitError(f"{name} has no column '{token_column}' (columns: {', '.join(ds.column_names)}); "
                           "set hub_columns to [token column, tag column]")
    tokens, tags = [], []
    for row, (words, row_tags) in enumerate(zip(ds[token_column], _hub_tags(ds, tag_column, name), strict=True), 1):
        if not words:  # the hub copy of CoNLL-2003 keeps a few empty rows
            continue
        iob2, _ = sentence_tags(row_tags, label_names, name, row, tag_column)
        tokens.append(list(words))
        tags.append(iob2)
    return datasets.Dataset.from_dict({"tokens": tokens, "tags": tags})


def _from_hub(cfg, options):
    train_split, *eval_splits = cfg.hub.splits
    given = options.label_names
    if given:
        _check_label_names(given, "label_names")
    train = _hub_split(cfg, options, train_split, given or None)
    label_names = list(given) or label_names_for(train["tags"])
    if cfg.max_train_samples is not None:
        train = train.select(range(min(cfg.max_train_samples, len(train))))
    evals = {s: _hub_split(cfg, options, s, label_names, cfg.max_eval_samples) for s in eval_splits}
    return train, evals, label_names


# --- writing ------------------------------------------------------------------------------------------------------
def conll_lines(tokens: list[list[str]], *columns: list[list[str]]) -> str:
    """CoNLL text: one `token col1 col2 ...` line per word, a blank line after each sentence. With gold and predicted
    tags as the columns (`token gold pred`) it is the input of the conlleval script.

    Example:
    ```python
    >>> conll_lines([["EU", "rejects"]], [["B-ORG", "O"]], [["B-ORG", "O"]])
    'EU B-ORG B-ORG\\nrejects O O\\n\\n'
    ```
    """
    out = []
    for i, words in enumerate(tokens):
        for j, word in enumerate(words):
            out.append(" ".join([word, *(c[i][j] for c in columns)]) + "\n")
        out.append("\n")
    return "".join(out)
