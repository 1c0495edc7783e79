"""Run reports: `report.md` with PNG plots, and a Hub-style model card (`README.md`) for the checkpoint.

Everything is read back from the run folder's own files (train_log.jsonl, eval_metrics.jsonl, metrics.json,
config.yaml, versions.json, predictions_*.jsonl), so a report can be regenerated for any finished run:
`python -m bertkit.report RUN_DIR`. Plots are drawn headless with matplotlib (Agg).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from .config_files import load_run_config
from .models import hub_id
from .plots import plt, save_figure
from .tasks.registry import get_task
from .utils import atomic_path


def eval_splits(result: dict) -> list[str]:
    """The evaluation split names in a metrics.json result (the other dict entries are train and data)."""
    return [k for k, v in result.items() if isinstance(v, dict) and k not in ("train", "data", "memory")]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []


def plot_training(run: Path, train_log: list[dict], evals: list[dict], main_metric: str) -> list[str]:
    pyplot, images = plt(), []
    if train_log:
        fig, (a, b) = pyplot.subplots(1, 2, figsize=(10, 3.4))
        steps = [r["step"] for r in train_log]
        a.plot(steps, [r["loss"] for r in train_log], marker=".")
        a.set(xlabel="optimiser step", ylabel="training loss (mean since last point)", title="Loss")
        b.plot(steps, [r["lr"] for r in train_log], color="tab:orange")
        b.set(xlabel="optimiser step", ylabel="learning rate", title="Learning rate")
        b.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
        images.append(save_figure(fig, run / "report_loss_lr.png"))
    keys = sorted({k for e in evals for k in e if k.endswith(f"/{main_metric}")})
    if evals and keys:
        fig, ax = pyplot.subplots(figsize=(5.5, 3.4))
        for k in keys:
            ax.plot([e["step"] for e in evals], [e[k] for e in evals], marker="o", label=k)
        ax.set(xlabel="optimiser step", ylabel=main_metric, title=f"Validation {main_metric}")
        ax.legend()
        images.append(save_figure(fig, run / "report_metric.png"))
    return images


def _metric_rows(metrics: dict) -> list[str]:
    rows = ["| split | metric | value |", "|---|---|---|"]
    for split in eval_splits(metrics):
        rows += [f"| {split} | {k} | {v:.4f} |" for k, v in metrics[split].items() if isinstance(v, (int, float))]
    return rows


def _run_facts(run: Path) -> tuple:
    """(run config, task class, label names) of a finished run folder (this version's config.yaml or 0.2's)."""

    cfg = load_run_config(run / "config.yaml")
    task = get_task(cfg.task).resolve(cfg.task_options)
    labels = list(getattr(cfg.task_options, "label_names", None) or [])
    if not labels and (run / "config.json").is_file() and task.named_labels:
        id2label = json.loads((run / "config.json").read_text()).get("id2label") or {}
        labels = [id2label[str(i)] for i in range(len(id2label))]
    return cfg, task, labels


def memory_rows(memory: dict | None) -> list[str]:
    """report.md's table of peak memory per phase (per process when there were several)."""
    if not memory:
        return []
    ranks = memory.get("ranks") or [memory]
    phases = list(dict.fromkeys(p for r in ranks for p in r["phases"]))
    cuda = "cuda_allocated_gib" in ranks[0]
    head = ["phase"] + [f"process {i}" for i in range(len(ranks))] if len(ranks) > 1 else ["phase", "peak resident"]
    lines = ["## Memory", "", f"Peak memory per phase, GiB{' (resident; CUDA allocated / reserved)' if cuda else ''}"
             + ("" if ranks[0].get("per_phase", True) else "; each figure is the peak so far (no per-phase reset "
                                                            "on this system)") + ".", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for phase in phases:
        cells = []
        for r in ranks:
            p = r["phases"].get(phase)
            cells.append("" if p is None else f"{p['peak_rss_gib']:.2f}" + (
                f" ({p['cuda_allocated_gib']:.2f} / {p['cuda_reserved_gib']:.2f})" if cuda else ""))
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    return lines + [""]


def write_report(run) -> Path:
    """Write `report.md` and its plots, and the model card, from the files of a finished run."""
    run = Path(run)
    metrics = json.loads((run / "metrics.json").read_text())
    cfg, task, labels = _run_facts(run)
    env = json.loads((run / "versions.json").read_text())
    evals = _jsonl(run / "eval_metrics.jsonl")
    images = plot_training(run, _jsonl(run / "train_log.jsonl"), evals, cfg.main_metric)
    for split in eval_splits(metrics):
        images += task.report_plots(run, split, _jsonl(run / f"predictions_{split}.jsonl"), metrics[split], labels)
    t = metrics["train"]
    lines = [f"# Run report: {cfg.name} ({cfg.model})", "",
             f"- task: {cfg.task}; command: `{env.get('command', '?')}`",
             f"- {t['steps']} optimiser steps, best at step {metrics.get('best_step')}; training loop "
             f"{t['train_seconds']} s, {t['examples_per_s']} examples/s; precision {t['precision']}, "
             f"{t['processes']} process(es), seed {t['seed']}",
             f"- hardware: {env.get('hardware', '?')}; torch {env.get('torch')}, transformers "
             f"{env.get('transformers')}, bertkit {env.get('bertkit')}",
             f"- data: {', '.join(f'{k} {v}' for k, v in metrics.get('data', {}).items())}", "",
             "## Final metrics (best checkpoint)", "", *_metric_rows(metrics), ""]
    if evals:
        cols = [k for k in evals[0] if k not in ("step", "epoch")]
        lines += ["## Evaluations", "", "| step | epoch | " + " | ".join(cols) + " |",
                  "|---|---|" + "---|" * len(cols)]
        lines += [f"| {e['step']} | {e['epoch']} | " + " | ".join(f"{e.get(c, float('nan')):.4f}" for c in cols)
                  + " |" for e in evals]
        lines.append("")
    lines += memory_rows(metrics.get("memory"))
    lines += ["## Plots", ""] + [f"![{name}]({name})" for name in images]
    with atomic_path(run / "report.md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    write_model_card(run, cfg, task, labels, metrics, env)
    return run / "report.md"


def write_model_card(run: Path, cfg, task, labels: list[str], metrics: dict, env: dict) -> Path:
    """`README.md` following the Hub's model-card conventions: YAML metadata, then the facts of the run."""
    t, base = metrics["train"], hub_id(cfg.model)  # the hub's base_model is a hub id; a local folder has none
    auto = task.auto_model_class.__name__ if task.auto_model_class else "AutoModel"
    results = [{"name": k, "value": round(v, 4), "split": split} for split in eval_splits(metrics)
               for k, v in metrics[split].items() if isinstance(v, (int, float))]
    meta = {"library_name": "transformers", "pipeline_tag": task.pipeline_tag or task.name,
            "tags": ["bertkit", cfg.name, task.name], **({"base_model": base} if base else {}),
            "metrics": sorted({r["name"] for r in results}),
            "model-index": [{"name": run.name, "results": [{"task": {"type": task.pipeline_tag or task.name},
                                                            "dataset": {"name": cfg.name, "type": cfg.name},
                                                            "metrics": [{"type": r["name"], "value": r["value"],
                                                                         "name": f"{r['split']} {r['name']}"}
                                                                        for r in results]}]}]}
    body = [f"# {cfg.name} fine-tuned from {cfg.model}", "",
            f"Fine-tuned with bertkit ({task.name} task). It is a plain Hugging Face checkpoint:",
            "", "```python", f"from transformers import {auto}", "",
            f'model = {auto}.from_pretrained("path/to/this/folder")', "```", "",
            "## Training", "",
            f"- base model: `{cfg.model}`; labels: {', '.join(labels) or 'n/a'}",
            f"- data: {', '.join(f'{k} {v} examples' for k, v in metrics.get('data', {}).items())}",
            f"- recipe: lr {cfg.lr}, batch {cfg.batch_size}×{cfg.grad_accum}×{t['processes']}, "
            f"epochs {cfg.epochs}, max steps {cfg.max_steps}, warm-up {cfg.warmup_ratio}, "
            f"max length {cfg.max_length}, seed {t['seed']}, precision {t['precision']}",
            f"- command: `{env.get('command', '?')}`",
            f"- hardware: {env.get('hardware', '?')}; training loop {t['train_seconds']} s "
            f"({t['examples_per_s']} examples/s)",
            f"- versions: bertkit {env.get('bertkit')}, torch {env.get('torch')}, transformers "
            f"{env.get('transformers')}, accelerate {env.get('accelerate')}, datasets {env.get('datasets')}", "",
            "## Results (best checkpoint)", "", *_metric_rows(metrics), ""]
    with atomic_path(run / "README.md") as tmp:
        tmp.write_text("---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n\n" + "\n".join(body) + "\n")
    return run / "README.md"


def write_seed_report(out, summary: dict) -> Path:
    """`report.md` + `report_seeds.png` for a multi-seed run: every seed's value and the mean ± std per metric."""
    out = Path(out)
    names = list(summary["metrics"])
    fig, ax = plt().subplots(figsize=(1.6 * len(names) + 2.5, 3.6))
    for x, name in enumerate(names):
        m = summary["metrics"][name]
        ax.scatter([x] * len(m["values"]), m["values"], color="tab:blue", zorder=3,
                   label="one seed" if x == 0 else None)
        ax.errorbar(x + 0.15, m["mean"], yerr=m["std"], fmt="s", color="tab:red", capsize=4,
                    label="mean ± std" if x == 0 else None)
    ax.set(xticks=range(len(names)), xticklabels=names, ylabel="value",
           title=f"{summary['name']}: spread over seeds {', '.join(map(str, summary['seeds']))}")
    ax.legend()
    image = save_figure(fig, out / "report_seeds.png")
    lines = [f"# {summary['name']}: {len(summary['seeds'])} seeds", "", "| metric | mean | std | per seed |",
             "|---|---|---|---|"]
    lines += [f"| {n} | {m['mean']:.4f} | {m['std']:.4f} | {', '.join(f'{v:.4f}' for v in m['values'])} |"
              for n, m in summary["metrics"].items()]
    lines += ["", f"Per-seed runs: {', '.join(f'[seed-{s}](seed-{s}/report.md)' for s in summary['seeds'])}", "",
              f"![{image}]({image})"]
    with atomic_path(out / "report.md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return out / "report.md"


if __name__ == "__main__":
    print(write_report(sys.argv[1]))
