"""`bertkit predict --model DIR --input FILE|-`: label new text; writes JSONL {text, label, score}.
Token-classification (NER) checkpoints are handled by `predict_ner.py` (tags and entities per sentence);
question-answering checkpoints by `predict_qa.py` (JSONL {question, context} in, answers out)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import BertkitError, DataError
from . import predict_ner, predict_qa
from .common import add_inference_flags, load_for_inference, write_output

EXAMPLE = """example:
  echo "a gripping, funny film" | bertkit predict --model runs/sst2 --input -
  bertkit predict --model runs/sst2 --input ../shared/data/sst2/dev.tsv --output dev_predictions.jsonl --probs
""" + predict_ner.EXAMPLE + predict_qa.EXAMPLE
TEXT_COLUMNS = ("text", "sentence", "sentence1", "premise", "#1 String")
PAIR_COLUMNS = {"sentence1": "sentence2", "premise": "hypothesis", "#1 String": "#2 String"}


def read_inputs(source: str, fmt: str, text_column: str | None, pair_column: str | None) -> dict:
    """Texts (and pairs) from plain text (one per line), TSV, CSV, JSONL or parquet."""
    from ..data import read_classification_file, read_rows

    if fmt == "auto":
        fmt = "text" if source == "-" or Path(source).suffix.lower() in ("", ".txt") else "table"
    if fmt == "text":
        from ..data.readers import read_lines

        return {"text": [line.strip() for _, line in read_lines(source, "text")]}
    if source == "-":
        raise BertkitError("reading a table from standard input is not supported; give a file")
    header = read_rows(Path(source))[0][1]
    column = text_column or next((c for c in TEXT_COLUMNS if c in header), None)
    if column is None:
        raise DataError(f"no text column found (tried {', '.join(TEXT_COLUMNS)}); pass --text-column",
                        file=source, line=1)
    pair = pair_column or (PAIR_COLUMNS.get(column) if PAIR_COLUMNS.get(column) in header else None)
    return read_classification_file(Path(source), column, None, None, text_pair_column=pair)


def run(args: argparse.Namespace) -> int:
    from ..tasks import QuestionAnswering, TokenClassification, adapter_class_for_checkpoint
    adapter_cls = adapter_class_for_checkpoint(args.model)[0]
    if issubclass(adapter_cls, TokenClassification):  # own inputs and outputs
        return predict_ner.run(args)
    predict_ner.reject_flags(args)
    if issubclass(adapter_cls, QuestionAnswering):  # its own input and output
        return predict_qa.run(args)
    inputs = read_inputs(args.input, args.format, args.text_column, args.text_pair_column)
    adapter, precision = load_for_inference(args)
    preds = adapter.predict(inputs["text"], inputs.get("text_pair"), batch_size=args.batch_size,
                            precision=precision, with_probs=args.probs)
    pairs = inputs.get("text_pair") or [None] * len(preds)
    lines = "".join(json.dumps({"text": t, **({"text_pair": p} if p is not None else {}), **pred}) + "\n"
                    for t, p, pred in zip(inputs["text"], pairs, preds))
    write_output(lines, args.output, f"{len(preds)} predictions")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("predict", help="label new text with a fine-tuned checkpoint", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_inference_flags(p)
    p.add_argument("--input", required=True, help="input file, or - for standard input (one text per line; "
                   "question answering: JSONL with question and context)")
    p.add_argument("--format", default="auto", choices=["auto", "text", "table", "conll"],
                   help="text = one text per line; table = TSV/CSV/JSONL/parquet; conll = one word per line, for "
                        "token classification (auto: by file extension; a file that begins with -DOCSTART- is conll)")
    p.add_argument("--text-column", help="column with the text (default: text, sentence, sentence1, ...)")
    p.add_argument("--text-pair-column", help="column with the second text of a pair")
    p.add_argument("--output", help="JSONL output file (default: standard output)")
    p.add_argument("--probs", action="store_true", help="add the probability of every label")
    predict_ner.add_flags(p)
    p.set_defaults(func=run)
