"""`bertkit evaluate --model RUN [--recipe NAME] [--split SPLIT]`: score a fine-tuned run on a labelled split (its own
data and metrics from the run's config.yaml, or a recipe's)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import add_inference_flags, model_task, task_flags

EXAMPLE = """example:
  bertkit evaluate --model runs/sst2 --split dev                  # the run's own data and metrics
  bertkit evaluate --model runs/sst2 --recipe sst2 --data-dir path/to/sst2 --split dev
  bertkit evaluate --model runs/sst2 --file other_labelled.tsv
  bertkit evaluate --model runs/sst2 --file reviews.csv --text-column review --label-column stars
  bertkit evaluate --model runs/sst2 --help                       # how the run's task reads a file: its flags
"""


def run(args: argparse.Namespace) -> int:
    from ..config_files import load_recipe, load_run_config
    from ..data.classification import carved_name
    from ..errors import BertkitError
    from ..inference import forward_all
    from ..metrics import resolve_metrics
    from ..models import resolve_model
    from ..tasks.contract import encoded, scored
    from ..utils import say, write_json
    from .common import load_for_inference, output_file

    if args.file and args.split:  # --split was not used
        raise BertkitError(f"--file {args.file} and --split {args.split}: give one (--file scores that file, --split "
                           "one of the run's data)")
    if args.max_samples is not None and args.max_samples <= 0:
        raise BertkitError("--max-samples must be positive")
    output_file(args.output, args.file)
    # the whole split unless --max-samples: a run's own cap (max_eval_samples) made its evaluations quick, not this
    overrides = {"max_eval_samples": args.max_samples, **({"data_dir": args.data_dir} if args.data_dir else {})}
    overrides.update(read_overrides(args))
    task, precision = load_for_inference(args)
    folder = Path(task.source)  # the run folder (a hub id's: its files in the hub's cache)
    if args.recipe:
        cfg = load_recipe(args.recipe, overrides, "command line")
    elif (folder / "config.yaml").is_file():
        cfg = load_run_config(folder / "config.yaml").replace("command line", **overrides)
    else:
        raise BertkitError(f"{args.model} has no config.yaml (not a bertkit run): name a recipe with --recipe")
    if cfg.task != task.name:
        raise BertkitError(f"recipe {args.recipe} is a {cfg.task} recipe; {args.model} is a {task.name} model")
    split = Path(args.file).stem if args.file else args.split or task.main_split(cfg)
    carved = getattr(cfg.task_options, "carve_eval", None)
    if carved and not args.file and cfg.validation_files and split == Path(cfg.validation_files[0]).stem:
        say(f"{split}: the run trained on {100 - carved} % of it (--carve-eval {carved}), so this is not a held-out "
            f"score; {carved_name(split, carved)} is its held-out part")
    examples = task.load_split(cfg, split, task.label_names, file=args.file)
    features = encoded(task, examples)
    if task.runner is not None:  # --backend onnx
        outputs = task.infer(features, args.batch_size, precision)
    else:
        outputs = forward_all(task, features, args.batch_size, precision, progress=True)
    hooks = resolve_metrics(cfg.metrics, builtins=task.metric_builtins, num_labels=len(task.label_names))
    metrics, _ = scored(task, outputs, examples, features, hooks)
    result = {"name": cfg.name, "task": cfg.task, "split": split, "examples": len(examples), "precision": precision,
              **metrics}
    print(json.dumps(result, indent=2))
    beside = Path(args.model) if resolve_model(args.model)[1] else Path()  # a hub id's: here, not in the hub's cache
    output = Path(args.output) if args.output else beside / f"eval_{cfg.name}_{split}.json"
    write_json(output, result)
    return 0


def read_overrides(args: argparse.Namespace) -> dict:
    """The task's options given on the command line that say how a file is read (`--text-column`, ...): where the
    file differs from the run's own."""
    from ..typed import given, read_options

    if args.task_class is None:
        return {}
    return given(args, args.task_class.Options, names=read_options(args.task_class.Options))


def register(subparsers, argv: list[str] | None = None) -> None:
    from ..typed import add_flags, read_options

    p = subparsers.add_parser("evaluate", help="score a fine-tuned run on a labelled split", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_inference_flags(p)
    p.add_argument("--recipe", "--task", dest="recipe",
                   help="recipe whose data and metrics to use (default: the run's own config.yaml)")
    p.add_argument("--split", help="split name: the stem of a validation file (dev), or test (default: the split "
                                   "the run kept its best checkpoint by, its first validation file's)")
    p.add_argument("--file", help="score this labelled file instead of the recipe's split")
    p.add_argument("--data-dir", help="folder with the data files (default: the run's or recipe's, or "
                                      "$BERTKIT_DATA_DIR/<name>)")
    p.add_argument("--max-samples", "--max-eval-samples", dest="max_samples", type=int,
                   help="score only the first N examples (default: all of them, whatever cap the run evaluated "
                        "under)")
    p.add_argument("--output", help="metrics JSON path (default: <model>/eval_<name>_<split>.json; for a hub id, in "
                                    "the working folder)")
    task, error = model_task(argv)
    if task is not None and read_options(task.Options):
        error = task_flags(p, task, lambda: add_flags(p.add_argument_group(
            f"{task.name}: how the file is read (default: as the run read its own)"), task.Options,
            names=read_options(task.Options)))
    p.set_defaults(func=run, task_class=task, task_error=error)
