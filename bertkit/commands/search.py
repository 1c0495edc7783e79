"""`bertkit search RECIPE [finetune's flags] --trials N`: hyper-parameter search with Optuna (bertkit/hpsearch.py)."""

from __future__ import annotations

import argparse

from .common import positive

EXAMPLE = """example:
  bertkit search sst2 --model minilm-l6 --trials 12 --output-dir runs/search-sst2
  bertkit search sst2 --model minilm-l6 --trials 12 --output-dir runs/search-sst2    # the same again: goes on
  bertkit search rte --model minilm-l6 --trials 20 --timeout 7200 --confirm-seeds 5
search space: the recipe's `search_space:` (flat config keys → {choices: [...]} or {low, high, log}), else the BERT
paper's grid: lr 5e-5/3e-5/2e-5, batch 16/32, epochs 2/3/4.
"""


def run(args: argparse.Namespace) -> int:
    from ..hpsearch import search
    from .finetune import overrides_from

    search(args.recipe, trials=args.trials, timeout=args.timeout, confirm_seeds=args.confirm_seeds,
           overrides=overrides_from(args), output_dir=args.output_dir)
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    from ..config_files import recipe_names
    from .finetune import add_run_flags

    p = subparsers.add_parser("search", help="search a recipe's hyper-parameters (Optuna); the best over seeds",
                              epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Each trial is a finetune run with the recipe, the flags and the trial's "
                                          "values; the study is kept in <output-dir>/study.db, so the same command "
                                          "goes on after an interruption.")
    p.add_argument("recipe", help=f"recipe name ({', '.join(recipe_names())}) or a YAML file")

    def own(run_group):
        run_group.add_argument("--trials", type=positive(), default=20, help="finished trials wanted (default 20)")
        run_group.add_argument("--timeout", type=positive(float),
                               help="stop asking for new trials after this many seconds")
        run_group.add_argument("--confirm-seeds", type=int, default=3,
                               help="seeds over which the best setting and the recipe's own are run again (default "
                                    "3; 0: none, 8 at most)")

    add_run_flags(p, argv, own)
    p.set_defaults(func=run)
