"""`bertkit probe conll2003`: entity F1 of a small tagger trained on frozen features of chosen layers."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .common import positive

EXAMPLE = """example:
  bertkit probe conll2003 --model minilm-l6 --layers last4 --combine concat
  bertkit probe conll2003 --model minilm-l6 --layers all --combine scalar-mix    # learns ELMo's layer weights
  bertkit probe conll2003 --model minilm-l6 --layers embeddings --tagger linear
"""


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..config_files import load_recipe
    from ..errors import BertkitError
    from ..extract import FeatureExtractor
    from ..extract.probe import train_probe
    from ..tasks import get_task
    from ..utils import write_json

    caps = {"data_dir": args.data_dir, "max_train_samples": args.max_train_samples,
            "max_eval_samples": args.max_eval_samples}
    cfg = load_recipe(args.task, {k: v for k, v in caps.items() if v is not None}, "command line")
    task_class, tagging = get_task(cfg.task), {"tokens", "tags"}
    not_tagging = BertkitError(f"probe needs a tagging recipe (words and their tags); {args.task} is a {cfg.task} "
                               "recipe")
    if task_class.example_fields and not tagging <= set(task_class.example_fields):
        raise not_tagging  # before its data is looked for
    train, evals, labels = task_class.load_data(cfg)
    if not tagging <= set(train.column_names):
        raise not_tagging
    split, valid = next(iter(evals.items()))
    mix = args.combine == "scalar-mix"
    fx = FeatureExtractor(args.model, layers=args.layers, combine="none" if mix else args.combine, pool="first",
                          precision=args.precision, batch_size=args.batch_size_extract)
    t0 = time.perf_counter()
    train, valid = train.to_dict(), valid.to_dict()  # plain lists of words and tags
    train_x, valid_x = fx(train["tokens"], dtype=np.float16), fx(valid["tokens"], dtype=np.float16)
    extract_s = time.perf_counter() - t0
    print(f"extracted layers {fx.layers} for {len(train_x)} + {len(valid_x)} sentences in {extract_s:.0f} s",
          file=sys.stderr)
    tagger, best, history = train_probe(train_x, train["tags"], valid_x, valid["tags"], labels, kind=args.tagger,
                                        hidden=args.hidden, mix_layers=len(fx.layers) if mix else 0,
                                        epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                                        log=lambda m: print(m, file=sys.stderr))
    result = {"task": args.task, "split": split, "model": args.model, "layers": fx.layers, "combine": args.combine,
              "tagger": args.tagger, "hidden": args.hidden, "epochs": args.epochs, "seed": args.seed,
              "best_epoch": best["epoch"], "precision": best["precision"], "recall": best["recall"], "f1": best["f1"],
              "layer_weights": best.get("layer_weights"), "gamma": best.get("gamma"),
              "extract_seconds": round(extract_s, 1), "total_seconds": round(time.perf_counter() - t0, 1),
              "history": history}
    print(json.dumps({k: v for k, v in result.items() if k != "history"}, indent=2))
    if args.output:
        write_json(args.output, result)
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("probe", help="train a small tagger on frozen features (feature-based NER)",
                              epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", help="a tagging recipe, e.g. conll2003 (its data; evaluated on its first validation file)")
    p.add_argument("--model", required=True, help="minilm-l6, a local checkpoint folder, or a hub id")
    p.add_argument("--layers", default="last4", help="hidden states, as for bertkit extract (default last4)")
    p.add_argument("--combine", default="concat", choices=["concat", "mean", "sum", "scalar-mix"],
                   help="how the layers become one vector (default concat); scalar-mix: learned softmax-weighted "
                   "sum (ELMo's), trained with the tagger")
    p.add_argument("--tagger", default="bilstm", choices=["bilstm", "linear"],
                   help="bilstm: the paper's two-layer BiLSTM before the classifier; linear: a linear probe")
    p.add_argument("--hidden", type=positive(), default=256, help="BiLSTM size per direction (default 256)")
    p.add_argument("--epochs", type=positive(), default=4, help="tagger epochs (default 4)")
    p.add_argument("--lr", type=positive(float), default=1e-3, help="Adam learning rate (default 1e-3)")
    p.add_argument("--batch-size", type=positive(), default=32, help="sentences per tagger step")
    p.add_argument("--batch-size-extract", type=positive(), default=64,
                   help="sentences a forward pass of the frozen model (default 64)")
    p.add_argument("--seed", type=int, default=42, help="the tagger's initialisation and order (default 42)")
    p.add_argument("--data-dir", help="folder with the task's files (default: $BERTKIT_DATA_DIR/<task>)")
    p.add_argument("--max-train-samples", type=positive(), help="use only the first N training sentences")
    p.add_argument("--max-eval-samples", type=positive(), help="score on only the first N validation sentences")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="the frozen model's compute (default auto: bf16 where the hardware computes it natively "
                   "and faster)")
    p.add_argument("--output", help="write the result (metrics, layer weights, history) to this JSON file")
    p.set_defaults(func=run)
