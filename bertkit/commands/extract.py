"""`bertkit extract`: contextual features from chosen layers, combined and pooled, streamed to disk."""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

from .common import positive

EXAMPLE = """example:
  bertkit extract --model minilm-l6 --input sentences.txt --output feats --layers last4 --combine concat --pool mean
  bertkit extract --model minilm-l6 --input conll2003/valid.txt --output conll-feats \\
      --layers second-to-last --pool first           # one row per CoNLL word, aligned with the file
layers: embeddings, last, second-to-last, lastN / firstN (any N: last4, first2), all, or numbers/ranges of
hidden states (0 = embeddings, -1 = last layer): -1,-2,-3,-4 or 1-6.  pool: first, last, mean (word level), cls,
sentence-mean, none (a row a word piece; index.jsonl's "row_words" gives each row's word).
"""
CHUNK = 4096  # sentences read, sorted by length and extracted at a time: bounds memory whatever the input size


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from ..errors import DataError
    from ..extract import FeatureExtractor, ShardWriter
    from ..extract.extractor import SentenceError
    from ..extract.inputs import read_sentences

    if args.input != "-" and not Path(args.input).is_file():  # said before the model is loaded
        raise DataError("file not found" if not Path(args.input).exists() else "not a file", file=args.input)
    fx = FeatureExtractor(args.model, layers=args.layers, combine=args.combine, pool=args.pool,
                          precision=args.precision, batch_size=args.batch_size, max_length=args.max_length)
    sentences = read_sentences(args.input, args.input_format, fx.tokenizer, args.text_field)
    first = next(sentences)  # reads and checks the start of the input before the output folder exists
    sentence_level = args.pool in ("cls", "sentence-mean")
    writer = ShardWriter(args.output, sentence_level, fmt=args.format, dtype=args.dtype, shard_rows=args.shard_rows)
    t0, n = time.perf_counter(), 0
    bar = tqdm(desc="extract", unit="sent", disable=None)
    try:
        writer.begin()  # the output's temporary is made inside the `try` that removes it
        stream = itertools.chain([first], sentences)
        while chunk := list(itertools.islice(stream, CHUNK)):
            try:
                vectors, pieces = fx.extract([words for _, words, _ in chunk], dtype=writer.dtype)
            except SentenceError as e:  # name the input line
                raise DataError(str(e).split(": ", 1)[1], file=args.input, line=chunk[e.index][2]) from None
            for (sid, words, _), v, of in zip(chunk, vectors, pieces, strict=True):
                writer.add(sid, words, v, {"row_words": of} if args.pool == "none" else None)  # a row a word piece
            n += len(chunk)
            bar.update(len(chunk))
        bar.close()
        seconds = time.perf_counter() - t0
        out = writer.close({"model": args.model, "layers": fx.layers, "combine": args.combine, "pool": args.pool,
                            "dim": fx.dim, "precision": fx.precision, "seconds": round(seconds, 3)})
    except BaseException:
        writer.abort()
        raise
    print(f"extracted {n} sentences in {seconds:.3g} s ({n / seconds:,.0f} sentences/s) to {out}", file=sys.stderr)
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("extract", help="extract contextual features (ELMo-style) to disk", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="minilm-l6, a local checkpoint folder, or a hub id")
    p.add_argument("--input", required=True, help="text (one sentence per line), pre-tokenised text, CoNLL, JSONL, or "
                                                  "a table (TSV, CSV, parquet: a sentence a row)")
    p.add_argument("--output", required=True, help="output folder (index.jsonl, shard-*.npy, meta.json)")
    p.add_argument("--layers", default="last4", help="which hidden states (default last4)")
    p.add_argument("--combine", default="concat", choices=["concat", "mean", "sum", "none"],
                   help="how the chosen layers become one vector (default concat: layers × hidden size; none keeps "
                   "a layers axis)")
    p.add_argument("--pool", default="mean", choices=["first", "last", "mean", "cls", "sentence-mean", "none"],
                   help="how word pieces become rows (default mean: one row per word; see below)")
    p.add_argument("--input-format", default="auto",
                   choices=["auto", "text", "pretokenized", "conll", "jsonl", "table"],
                   help="default auto: told by the file's name and first lines (table: .tsv, .csv, .parquet)")
    p.add_argument("--text-field", help="JSONL: the field with the text, or with a list of words, one row each (e.g. "
                                        "tokens; default text); a table: the text's column (default: text, sentence, "
                                        "sentence1, ... whichever it has)")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"],
                   help="of the stored vectors (default float16)")
    p.add_argument("--format", default="npy", choices=["npy", "safetensors"], help="of the shard files (default npy)")
    p.add_argument("--batch-size", type=positive(), default=64, help="sentences a forward pass (CPU; a GPU batches by "
                   "token budget)")
    p.add_argument("--max-length", type=positive(), default=512,
                   help="longest sentence in word pieces, special tokens counted (default 512, or the model's own "
                   "limit where that is less)")
    p.add_argument("--shard-rows", type=positive(), default=65536, help="rows per shard file")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="the model's compute (default auto: bf16 where the hardware computes it natively and faster)")
    p.set_defaults(func=run)
