"""`bertkit predict` for a token-classification (NER) checkpoint; `predict.py` hands such runs over here.

Input: one sentence per line, as raw text (split into words by `split_words`, entities get character offsets) or,
with `--pretokenized`, as words separated by white space; or a CoNLL file (`--format conll`; auto-detected for
`.conll`/`.iob`/`.bio` files and files that begin with `-DOCSTART-`): the first column is the word and, when there
are two or more columns, the last one is the gold tag. A model trained with document context (`ner_context`)
reads a CoNLL file's sentences with their `-DOCSTART-` documents around them; text lines are read one by one.
Output: JSONL, one object per sentence {[text,] tokens, tags, [gold,] entities}; or, with `--output-format conll`,
a CoNLL file `token gold pred` (readable by the conlleval script), or `token pred` when there are no gold tags.

Example:
```
echo "Peter Blackburn flew to Brussels ." | bertkit predict --model runs/conll2003 --input - --pretokenized
{"tokens": ["Peter", "Blackburn", ...], "tags": ["B-PER", "I-PER", ...], "entities": [{"type": "PER", ...}]}
bertkit predict --model runs/conll2003 --input test.txt --format conll --output-format conll --output test.conll
```
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import BertkitError, DataError
from .common import load_for_inference, write_output

EXAMPLE = """  echo "EU rejects German call" | bertkit predict --model runs/conll2003 --input -   # NER: tags, entities
  bertkit predict --model runs/conll2003 --input test.txt --format conll --output-format conll  # token gold pred
"""
CONLL_SUFFIXES = (".conll", ".iob", ".iob2", ".bio")


def add_flags(p: argparse.ArgumentParser) -> None:
    """The flags only token classification reads."""
    p.add_argument("--pretokenized", action="store_true",
                   help="token classification: each input line is words separated by white space (no splitting)")
    p.add_argument("--output-format", default="jsonl", choices=["jsonl", "conll"],
                   help="token classification: JSONL (tags and entities) or CoNLL 'token gold pred' (default jsonl)")


def reject_flags(args: argparse.Namespace) -> None:
    """A sequence classifier has no words to tag: refuse the token-classification flags instead of ignoring them."""
    if args.format == "conll" or args.pretokenized or args.output_format != "jsonl":
        raise BertkitError("--format conll, --pretokenized and --output-format are for token-classification "
                           f"(NER) checkpoints; {args.model} is a sequence classifier")


def _is_conll(source: str, fmt: str) -> bool:
    if fmt != "auto" or source == "-":
        return fmt == "conll"
    path = Path(source)
    if path.suffix.lower() in CONLL_SUFFIXES:
        return True
    from ..data.readers import iter_lines

    return next(iter_lines(path), (0, ""))[1].startswith("-DOCSTART-")


def read_ner_inputs(source: str, fmt: str, pretokenized: bool) -> tuple[list, list | None, list | None]:
    """(sentences, gold tags or None, document numbers or None). A sentence is a list of words, or raw text (a
    str) to be split; only CoNLL files have documents."""
    from ..data.conll import read_conll_file

    if fmt == "table":
        raise BertkitError("--format table is for sequence classifiers; a NER model reads text lines or CoNLL")
    if source != "-" and not Path(source).is_file():
        raise DataError("file not found", file=source)
    if _is_conll(source, fmt):
        if source == "-":
            raise BertkitError("reading a CoNLL file from standard input is not supported; give a file")
        data = read_conll_file(source, tagged=None)
        return data["tokens"], data.get("tags"), data["docs"]
    from ..data.readers import read_lines

    sentences = [line.split() if pretokenized else line.strip() for _, line in read_lines(source, "sentence")]
    return sentences, None, None


def run(args: argparse.Namespace) -> int:
    from ..data.conll import conll_lines
    if args.probs or args.text_column or args.text_pair_column:
        raise BertkitError("--probs, --text-column and --text-pair-column are for sequence classifiers; "
                           f"{args.model} is a token classifier (NER)")
    sentences, gold, docs = read_ner_inputs(args.input, args.format, args.pretokenized)
    adapter, precision = load_for_inference(args)
    preds = adapter.predict(sentences, batch_size=args.batch_size, precision=precision, documents=docs)
    if gold is not None:
        preds = [{**p, "gold": g} for p, g in zip(preds, gold)]
    if args.output_format == "conll":
        columns = ([gold] if gold is not None else []) + [[p["tags"] for p in preds]]
        text = conll_lines([p["tokens"] for p in preds], *columns)
    else:
        text = "".join(json.dumps(p) + "\n" for p in preds)
    write_output(text, args.output, f"predictions for {len(preds)} sentences")
    return 0
