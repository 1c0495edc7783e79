"""`bertkit evaluate --model DIR --task TASK [--split dev]`: score a checkpoint on a labelled split."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import add_inference_flags, load_for_inference

EXAMPLE = """example:
  bertkit evaluate --model runs/sst2 --task sst2 --split dev --data-dir ../shared/data/sst2
"""


def run(args: argparse.Namespace) -> int:
    from ..config import load_recipe
    from ..inference import forward_all
    from ..metrics import resolve_metrics
    from ..utils import write_json

    cfg = load_recipe(args.task, {"data_dir": args.data_dir} if args.data_dir else {})
    adapter, precision = load_for_inference(args)
    examples = type(adapter).load_split(cfg, args.split, adapter.label_names, file=args.file)
    features = adapter.encode(examples)
    if adapter.runner is not None:  # --backend onnx
        outputs = adapter.infer(features, args.batch_size, precision)
    else:
        outputs = forward_all(adapter, features, args.batch_size, precision, progress=True)
    hooks = resolve_metrics(cfg.metrics, builtins=adapter.metric_builtins, allow_hub=cfg.allow_hub_metrics,
                            num_labels=len(adapter.label_names))
    metrics, _ = adapter.score(outputs, examples, features, hooks)
    split = Path(args.file).stem if args.file else args.split
    result = {"task": cfg.task, "split": split, "examples": len(examples), "precision": precision, **metrics}
    print(json.dumps(result, indent=2))
    output = Path(args.output) if args.output else Path(args.model) / f"eval_{cfg.task}_{split}.json"
    write_json(output, result)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="score a fine-tuned checkpoint on a labelled split", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_inference_flags(p)
    p.add_argument("--task", required=True, help="recipe whose data and metrics to use (e.g. sst2)")
    p.add_argument("--split", default="dev", help="split name: the stem of a validation file (dev), or test")
    p.add_argument("--file", help="score this labelled file instead of the recipe's split")
    p.add_argument("--data-dir", help="folder with the task's files (default: $BERTKIT_DATA_DIR/<task>)")
    p.add_argument("--output", help="metrics JSON path (default: <model>/eval_<task>_<split>.json)")
    p.set_defaults(func=run)
