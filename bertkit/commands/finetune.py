"""`bertkit finetune RECIPE [flags]`: fine-tune a model with a recipe; flags override recipe fields."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import typing
from pathlib import Path

from ..config import FLAG_GROUPS, FinetuneConfig, load_recipe, recipe_names
from ..errors import BertkitError

EXAMPLE = """example:
  bertkit finetune sst2 --model minilm-l6 --epochs 1 --data-dir ../shared/data/sst2 --output-dir runs/sst2
  bertkit finetune sst2 --model minilm-l6 --output-dir runs/sst2 --resume     # continue an interrupted run
  bertkit finetune mrpc --model minilm-l6 --seeds 13,42,87 --output-dir runs/mrpc  # mean ± std over seeds
  bertkit finetune glue --model minilm-l6 --seeds 13,42,87 --output-dir runs/glue   # BERT's Table 1 (dev sets)
  bertkit finetune qnli --model minilm-l6 --carve-eval 20   # no train.tsv: 80/20 split of dev.tsv by question
"""


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per FinetuneConfig field (--max-steps for max_steps), grouped by concern (`FLAG_GROUPS`); help
    text from the field metadata."""
    hints = typing.get_type_hints(FinetuneConfig)
    fields = {f.name: f for f in dataclasses.fields(FinetuneConfig)}
    for title, names in FLAG_GROUPS.items():
        group = parser.add_argument_group(title)
        for name in names:
            f, tp = fields[name], hints[name]
            flag, help = "--" + name.replace("_", "-"), f.metadata.get("help", "")
            if tp is bool:
                group.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help)
                continue
            if typing.get_origin(tp) is dict:  # recipe-only (model_overrides)
                continue
            conv = {int: int, float: float}.get(tp) or {int | None: int, float | None: float}.get(tp, str)
            if typing.get_origin(tp) is list:
                help += " (comma-separated)"
            group.add_argument(flag, dest=name, type=conv, default=None, help=help, choices=f.metadata.get("choices"),
                               metavar=None if f.metadata.get("choices") else "X")


def overrides_from(args: argparse.Namespace) -> dict:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(FinetuneConfig)
            if getattr(args, f.name, None) is not None}


def default_output_dir(cfg: FinetuneConfig) -> str:
    model = Path(cfg.model.rstrip("/")).name
    return f"runs/{cfg.task}-{model}-{time.strftime('%Y%m%d-%H%M%S')}"


def run(args: argparse.Namespace) -> int:
    if args.recipe == "glue":
        from .glue import run_glue

        return run_glue(args)
    if args.tasks:
        raise BertkitError("--tasks is for `bertkit finetune glue` only")
    finetune(load_recipe(args.recipe, overrides_from(args)))
    return 0


def finetune(cfg: FinetuneConfig) -> dict | None:
    """Validate the data, then train once, or once per seed of `cfg.seeds` with a summary; return the metrics (a
    seed summary with --seeds) on the main process, None on the others."""
    from ..models import resolve_model
    from ..tasks import get_adapter_class
    from ..tasks.classification import resolve_class_weights
    from ..training import launch

    t0 = time.perf_counter()
    processes = launch.start()  # joins the process group a launcher set up (torchrun, accelerate launch)
    cfg.output_dir = cfg.output_dir or launch.main_value(processes, default_output_dir(cfg))  # one name for all
    out = Path(cfg.output_dir)
    if cfg.resume and not out.is_dir():
        raise BertkitError(f"--resume: {out} does not exist")
    if not cfg.resume and out.exists() and any(out.iterdir()):
        raise BertkitError(f"output folder {out} is not empty; pass --resume to continue it, or a new --output-dir")
    processes.wait_for_everyone()  # every process has checked the folder before the main one writes into it
    adapter_cls = get_adapter_class(cfg.adapter, cfg.problem_type)
    resolve_model(cfg.model)  # a mistyped --model fails before the data is read
    # Everything the user gave is read and validated before the run folder is created.
    train, evals, label_names = adapter_cls.load_data(cfg)
    test = adapter_cls.load_split(cfg, "test", label_names) if cfg.test_file else None
    if cfg.class_weights is not None:  # recorded as numbers in the run's config.yaml
        spec = cfg.class_weights
        cfg.class_weights = resolve_class_weights(spec, train["label"], label_names, cfg.problem_type)
        print(f"class weights ({'balanced, from the training labels' if spec == 'balanced' else 'given'}): "
              + ", ".join(f"{n} {w:g}" for n, w in zip(label_names, cfg.class_weights)), file=sys.stderr)
    if not cfg.seeds:
        result = train_one(adapter_cls, cfg, train, evals, test, label_names)
        if not launch.is_main_process():
            return None
        print(json.dumps({k: v for k, v in result.items() if k != "train"}, indent=2))
        print(f"wall time {time.perf_counter() - t0:.0f} s; run folder: {out}")
        return result
    results = {}
    for seed in cfg.seeds:
        seed_cfg = dataclasses.replace(cfg, seed=seed, seeds=[], output_dir=str(out / f"seed-{seed}"))
        done = Path(seed_cfg.output_dir) / "metrics.json"
        if cfg.resume and done.is_file():  # finished before the interruption
            results[seed] = json.loads(done.read_text())
            continue
        seed_cfg.resume = cfg.resume and (Path(seed_cfg.output_dir) / "checkpoints").is_dir()
        results[seed] = train_one(adapter_cls, seed_cfg, train, evals, test, label_names)
    if not launch.is_main_process():
        return None
    from ..report import write_seed_report
    from ..utils import write_json

    summary = summarize(results)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    write_json(out / "summary.json", summary)
    write_seed_report(out, summary)
    print(format_summary(summary))
    print(f"wall time {summary['wall_seconds']:.0f} s; run folders: {out}/seed-*; summary: {out / 'summary.json'}")
    return summary


def train_one(adapter_cls, cfg: FinetuneConfig, train, evals, test, label_names) -> dict:
    from ..training import Trainer, launch
    from ..utils import set_seed

    set_seed(cfg.seed)  # before the new head is initialised
    adapter = adapter_cls.from_config(cfg, label_names)
    result = Trainer(adapter, cfg).fit(train, evals, test)
    t = result["train"]
    if launch.is_main_process():
        print(f"seed {cfg.seed}: trained {t['steps']} steps in {t['train_seconds']} s ({t['examples_per_s']} "
              f"examples/s, {t['precision']})")
    return result


def summarize(results: dict[int, dict]) -> dict:
    """Mean ± sample standard deviation (ddof=1) of every evaluation metric over the seeds."""
    import numpy as np

    from ..report import eval_splits

    first = next(iter(results.values()))
    splits = eval_splits(first)
    metrics = {}
    for split in splits:
        for name in first[split]:
            values = [r[split][name] for r in results.values() if isinstance(r[split].get(name), (int, float))]
            if len(values) == len(results):
                metrics[f"{split}/{name}"] = {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1))
                                              if len(values) > 1 else 0.0, "values": values}
    train_seconds = [r["train"]["train_seconds"] for r in results.values()]
    return {"task": first["task"], "seeds": list(results), "metrics": metrics, "train_seconds": train_seconds}


def format_summary(summary: dict) -> str:
    lines = [f"{summary['task']}: {len(summary['seeds'])} seeds ({', '.join(map(str, summary['seeds']))})"]
    for name, m in summary["metrics"].items():
        # fractions in percent; SQuAD's are percent already, a squared error stays as it is
        scale = 1 if name.endswith("mse") or any(abs(v) > 1 for v in m["values"]) else 100
        lines.append(f"  {name:<28} {scale * m['mean']:6.2f} ± {scale * m['std']:.2f}   "
                     f"[{', '.join(f'{scale * v:.2f}' for v in m['values'])}]")
    return "\n".join(lines)


def register(subparsers) -> None:
    p = subparsers.add_parser("finetune", help="fine-tune a model with a recipe", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help=f"recipe name ({', '.join(recipe_names())}) or a YAML file; or 'glue': every GLUE "
                                  "task that has data, each with its recipe, into one table (commands/glue.py)")
    p.add_argument("--tasks", help="glue only: the GLUE tasks to run (comma-separated; default: all that have data)")
    add_config_flags(p)
    p.set_defaults(func=run)
