"""`bertkit finetune RECIPE [flags]`: fine-tune a model with a recipe; flags override recipe fields."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import typing
from pathlib import Path

from ..config import FinetuneConfig, load_recipe, recipe_names
from ..errors import BertkitError

EXAMPLE = """example:
  bertkit finetune sst2 --model minilm-l6 --epochs 1 --data-dir ../shared/data/sst2 --output-dir runs/sst2
  bertkit finetune sst2 --model minilm-l6 --output-dir runs/sst2 --resume     # continue an interrupted run
"""


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per FinetuneConfig field (--max-steps for max_steps); help text from the field metadata."""
    hints = typing.get_type_hints(FinetuneConfig)
    for f in dataclasses.fields(FinetuneConfig):
        flag = "--" + f.name.replace("_", "-")
        help = f.metadata.get("help", "")
        if hints[f.name] is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help)
            continue
        tp = hints[f.name]
        conv = {int: int, float: float}.get(tp) or {int | None: int, float | None: float}.get(tp, str)
        if typing.get_origin(tp) is list:
            help += " (comma-separated)"
        parser.add_argument(flag, dest=f.name, type=conv, default=None, help=help,
                            choices=f.metadata.get("choices"), metavar=None if f.metadata.get("choices") else "X")


def overrides_from(args: argparse.Namespace) -> dict:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(FinetuneConfig)
            if getattr(args, f.name, None) is not None}


def default_output_dir(cfg: FinetuneConfig) -> str:
    model = Path(cfg.model.rstrip("/")).name
    return f"runs/{cfg.task}-{model}-{time.strftime('%Y%m%d-%H%M%S')}"


def run(args: argparse.Namespace) -> int:
    from ..tasks import get_adapter_class
    from ..train import Trainer
    from ..utils import set_seed

    cfg = load_recipe(args.recipe, overrides_from(args))
    cfg.output_dir = cfg.output_dir or default_output_dir(cfg)
    out = Path(cfg.output_dir)
    if cfg.resume and not (out / "checkpoints").is_dir():
        raise BertkitError(f"--resume: {out} has no checkpoints folder to resume from")
    if not cfg.resume and out.exists() and any(out.iterdir()):
        raise BertkitError(f"output folder {out} is not empty; pass --resume to continue it, or a new --output-dir")
    adapter_cls = get_adapter_class(cfg.adapter)
    # Everything the user gave is read and validated before the run folder is created.
    train, evals, label_names = adapter_cls.load_data(cfg)
    test = adapter_cls.load_split(cfg, "test", label_names) if cfg.test_file else None
    set_seed(cfg.seed)
    adapter = adapter_cls.from_config(cfg, label_names)
    result = Trainer(adapter, cfg).fit(train, evals, test)
    print(json.dumps({k: v for k, v in result.items() if k != "train"}, indent=2))
    t = result["train"]
    print(f"trained {t['steps']} steps in {t['train_seconds']} s ({t['examples_per_s']} examples/s, "
          f"{t['precision']}); run folder: {out}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("finetune", help="fine-tune a model with a recipe", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help=f"recipe name ({', '.join(recipe_names())}) or a YAML file")
    add_config_flags(p)
    p.set_defaults(func=run)
