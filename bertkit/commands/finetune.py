"""`bertkit finetune RECIPE [flags]`: fine-tune a model with a recipe; flags override recipe fields.

The flags are generated from the config's dataclasses (`bertkit/config.py`) and, under "task options", from the
recipe's task (its `Options`), so each task shows only its own; `finetune glue` (commands/glue.py) runs every GLUE
recipe into one table.
"""

from __future__ import annotations

import argparse

EXAMPLE = """example:
  bertkit finetune sst2 --model minilm-l6 --epochs 1 --data-dir path/to/sst2 --output-dir runs/sst2
  bertkit finetune sst2 --model minilm-l6 --output-dir runs/sst2 --resume     # continue an interrupted run
  bertkit finetune mrpc --model minilm-l6 --seeds 13,42,87 --output-dir runs/mrpc  # mean ± std over seeds
  bertkit finetune glue --model minilm-l6 --seeds 13,42,87 --output-dir runs/glue   # BERT's Table 1 (dev sets)
  bertkit finetune qnli --model minilm-l6 --carve-eval 20   # no train.tsv: 80/20 split of dev.tsv by question
  bertkit finetune squad --help                                # the flags of the recipe's task (QA) too
"""
# `bertkit finetune --help` lists the run's flags by concern, in this order (a test checks that every field of the
# run config is in exactly one group); the task's own options follow, then the run's command-line choices
FLAG_GROUPS: dict[str, tuple[str, ...]] = {
    "model and data": ("name", "model", "data_dir", "train_file", "validation_files", "test_file",
                       "max_train_samples", "max_eval_samples"),
    "optimisation": ("max_length", "batch_size", "grad_accum", "lr", "epochs", "max_steps", "warmup_ratio",
                     "layer_lr_decay", "weight_decay", "max_grad_norm", "seed"),
    "model changes while training": ("dropout", "attention_dropout", "reinit_pooler", "freeze_word_embeddings"),
    "evaluation": ("eval_every", "eval_batch_size", "metrics", "main_metric", "early_stopping"),
    "output": ("output_dir", "save_every", "keep_checkpoints", "report_to"),
}
NOT_FLAGS = ("task", "hub", "compute", "peft", "task_options")  # YAML only, or flags of their own group
REFERENCE_RECIPES = ("sst2", "conll2003", "squad", "swag")  # one recipe per built-in task, for docs/cli.md


def recipe_of(argv: list[str] | None) -> str | None:
    """The recipe named on a `finetune` command line: its first word that is neither a flag nor a flag's value
    (the run's boolean flags take none; write the recipe first, as the examples do)."""
    import dataclasses

    from ..config import Compute, RunConfig

    switches = {"--resume", "--allow-pickle", "-h", "--help"}
    for cls in (RunConfig, Compute):
        for f in dataclasses.fields(cls):
            if f.type in (bool, "bool"):
                switches |= {"--" + f.name.replace("_", "-"), "--no-" + f.name.replace("_", "-")}
    previous = None
    for word in argv or []:
        if not word.startswith("-") and not (previous and previous.startswith("-") and "=" not in previous
                                             and previous not in switches):
            return word
        previous = word
    return None


def register(subparsers, argv: list[str] | None = None) -> None:
    from ..config_files import recipe_names

    p = subparsers.add_parser("finetune", help="fine-tune a model with a recipe", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Fine-tune with a recipe. Flags override the recipe's settings; "
                                          "`bertkit finetune RECIPE --help` adds the options of the recipe's task.")
    p.add_argument("recipe", help=f"recipe name ({', '.join(recipe_names())}) or a YAML file; or 'glue': every GLUE "
                                  "task that has data, each with its recipe, into one table (commands/glue.py)")

    def own(run):
        run.add_argument("--seeds", help="run once per seed (into <output-dir>/seed-N) and summarise mean ± std "
                                         "(comma-separated)")
        run.add_argument("--resume", action="store_true", help="resume from the latest good checkpoint in output-dir")
        run.add_argument("--tasks", help="glue only: the GLUE tasks to run (comma-separated; default: all that have "
                                         "data)")

    add_run_flags(p, argv, own)
    p.set_defaults(func=run_command)


def add_run_flags(p: argparse.ArgumentParser, argv: list[str] | None, own) -> None:
    """A recipe's flags, as `finetune` has them (also `search`'s): the run config's groups, the group "the run" with
    the command's `own(group)` flags, then the recipe's task's options once `argv` names the recipe (a task option
    that makes a flag the command has already is the command's error: `task_error`)."""
    from ..config import Compute, HubSource, Peft, RunConfig
    from ..config_files import recipe_path, recipe_task
    from ..errors import BertkitError
    from ..typed import add_flags
    from .common import task_flags

    for title, names in FLAG_GROUPS.items():
        add_flags(p.add_argument_group(title), RunConfig, names)
    add_flags(p.add_argument_group("data from the hub (when there are no local files)"), HubSource, prefix="hub_")
    add_flags(p.add_argument_group("compute and memory"), Compute)
    add_flags(p.add_argument_group("parameter-efficient fine-tuning (recipe: peft)"), Peft)
    run = p.add_argument_group("the run")
    run.add_argument("--allow-pickle", action="store_true", help="also load pickle (.bin) weights of the base "
                                                                 "model; only for files you trust")
    own(run)
    recipe = recipe_of(argv)
    task = None
    try:
        if recipe:
            from ..tasks import get_task

            task_name = recipe_task("sst2" if recipe == "glue" else recipe)  # glue: its recipes' task
            try:
                task = get_task(task_name)
            except BertkitError as e:  # the recipe file names a task that is not known
                raise BertkitError(f"{recipe_path(recipe)}: {e}") from None
    except BertkitError as e:  # said by --help too, where the task's options would be
        p.set_defaults(task_error=str(e))
        p.add_argument_group("task options", f"not shown: {e}")
    if task is not None:
        p.set_defaults(task_error=task_flags(p, task, lambda: add_flags(
            p.add_argument_group(f"task options ({task.name}; recipe: task_options)"), task.Options)))
    p.set_defaults(task_class=task)


def task_help(parser: argparse.ArgumentParser) -> str:
    """Only the task-options part of a finetune parser's help (for docs/cli.md)."""
    text = parser.format_help()
    return text[text.index("task options ("):]


def overrides_from(args: argparse.Namespace) -> dict:
    """The flags given on the command line, as flat config keys (run fields, hub_*, compute, task options)."""
    from ..config import Compute, HubSource, Peft, RunConfig
    from ..typed import given

    out = {k: v for k, v in given(args, RunConfig).items() if k not in NOT_FLAGS}
    out.update({f"hub_{k}": v for k, v in given(args, HubSource, prefix="hub_").items()})
    out.update(given(args, Compute))
    out.update({("peft" if k == "method" else k): v for k, v in given(args, Peft).items()})
    if args.task_class is not None:
        out.update(given(args, args.task_class.Options))
    return files_from_here(out)


def files_from_here(out: dict) -> dict:
    """Paths given here are written absolute into the run's config.yaml, so that `bertkit evaluate` finds the
    data from any working folder: `--data-dir` when it is a folder; without it, a data file flag that names a file in
    the working folder means that file; else the file is read in the data folder (`--data-dir`,
    `$BERTKIT_DATA_DIR/<recipe>`), as a recipe's own names are."""
    from pathlib import Path

    if out.get("data_dir"):
        if Path(out["data_dir"]).is_dir():  # one that is not is said, as given, when the data loads
            out["data_dir"] = str(Path(out["data_dir"]).resolve())
        return out
    for key in ("train_file", "validation_files", "test_file"):
        if isinstance(out.get(key), str):  # validation files: comma-separated
            out[key] = ",".join(str(Path(f).resolve()) if Path(f).is_file() else f for f in out[key].split(","))
    return out


def run_command(args: argparse.Namespace) -> int:
    from ..config_files import load_recipe
    from ..errors import BertkitError
    from ..training.runs import finetune
    from ..typed import check_type
    from ..utils import say

    overrides = overrides_from(args)
    if args.seeds and "seed" in overrides:  # --seed was not used
        raise BertkitError(f"--seed {overrides['seed']} and --seeds {args.seeds}: give one (--seeds runs once per "
                           "seed, each as --seed N)")
    if args.recipe == "glue":
        from .glue import run_glue

        return run_glue(args, overrides)
    if args.tasks:
        raise BertkitError("--tasks is for `bertkit finetune glue` only")
    seeds = check_type("seeds", args.seeds, list[int]) if args.seeds else None
    cfg = load_recipe(args.recipe, overrides, "command line")
    if "epochs" in overrides and "max_steps" not in overrides and cfg.max_steps:
        say(f"--epochs {overrides['epochs']}: not used; the recipe's max_steps {cfg.max_steps} decides the run's "
            "length (--max-steps none clears it)")
    finetune(cfg, seeds=seeds, resume=args.resume, allow_pickle=args.allow_pickle,
             started=getattr(args, "started", None))
    return 0
