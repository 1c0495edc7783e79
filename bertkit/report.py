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

from .utils import atomic_path


def eval_splits(result: dict) -> list[str]:
    """The evaluation split names in a metrics.json result (the other dict entries are train and data)."""
    return [k for k, v in result.items() if isinstance(v, dict) and k not in ("train", "data")]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> str:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return path.name


def plot_training(run: Path, train_log: list[dict], evals: list[dict], main_metric: str) -> list[str]:
    plt, images = _plt(), []
    if train_log:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
        steps = [r["step"] for r in train_log]
        a.plot(steps, [r["loss"] for r in train_log], marker=".")
        a.set(xlabel="optimiser step", ylabel="training loss (mean since last point)", title="Loss")
        b.plot(steps, [r["lr"] for r in train_log], color="tab:orange")
        b.set(xlabel="optimiser step", ylabel="learning rate", title="Learning rate")
        b.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
        images.append(_save(fig, run / "report_loss_lr.png"))
    keys = sorted({k for e in evals for k in e if k.endswith(f"/{main_metric}")})
    if evals and keys:
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        for k in keys:
            ax.plot([e["step"] for e in evals], [e[k] for e in evals], marker="o", label=k)
        ax.set(xlabel="optimiser step", ylabel=main_metric, title=f"Validation {main_metric}")
        ax.legend()
        images.append(_save(fig, run / "report_metric.png"))
    return images


def plot_confusion(run: Path, split: str, preds: list[dict], labels: list[str]) -> str | None:
    if not preds or not isinstance(preds[0].get("gold"), str) or not labels:  # one class per example only
        return None
    import numpy as np

    index = {n: i for i, n in enumerate(labels)}
    m = np.zeros((len(labels), len(labels)), dtype=int)  # [gold, predicted]
    for p in preds:
        m[index[p["gold"]], index[p["label"]]] += 1
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2.5, 1.1 * len(labels) + 1.8))
    ax.imshow(m, cmap="Blues")
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", color="white" if v > m.max() / 2 else "black")
    ax.set(xticks=range(len(labels)), yticks=range(len(labels)), xticklabels=labels, yticklabels=labels,
           xlabel="predicted label", ylabel="gold label", title=f"Confusion matrix ({split})")
    return _save(fig, run / f"report_confusion_{split}.png")


def plot_per_type(run: Path, split: str, per_type: dict) -> str:
    """NER: entity F1 (and support) per entity type."""
    plt = _plt()
    types = list(per_type)
    fig, ax = plt.subplots(figsize=(1.1 * len(types) + 2.5, 3.4))
    bars = ax.bar(types, [100 * per_type[t]["f1"] for t in types], color="tab:green")
    for bar, t in zip(bars, types):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{100 * per_type[t]['f1']:.1f}\n"
                f"n={per_type[t]['support']}", ha="center", va="bottom", fontsize=8)
    ax.set(xlabel="entity type", ylabel="entity F1 (%)", ylim=(0, 110), title=f"F1 per entity type ({split})")
    return _save(fig, run / f"report_per_type_{split}.png")


QUESTION_WORDS = ("what", "who", "when", "where", "which", "how", "why")


def plot_question_types(run: Path, split: str, preds: list[dict]) -> str | None:
    """QA: exact match and F1 (official v1.1 definitions) by the question's wh-word."""
    if not preds or "gold" not in preds[0] or "question" not in preds[0]:
        return None
    from .metrics.squad import exact_match_score, f1_score

    groups: dict[str, list] = {}
    for p in preds:
        words = p["question"].lower().split()
        kind = next((w for w in QUESTION_WORDS if w in words), "other")
        em = max(exact_match_score(p["answer"], g) for g in p["gold"])
        f1 = max(f1_score(p["answer"], g) for g in p["gold"])
        groups.setdefault(kind, []).append((em, f1))
    kinds = [k for k in (*QUESTION_WORDS, "other") if k in groups]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.0 * len(kinds) + 3, 3.4))
    x = range(len(kinds))
    ax.bar([i - 0.2 for i in x], [100 * sum(e for e, _ in groups[k]) / len(groups[k]) for k in kinds], 0.4,
           label="exact match")
    ax.bar([i + 0.2 for i in x], [100 * sum(f for _, f in groups[k]) / len(groups[k]) for k in kinds], 0.4, label="F1")
    ax.set(xticks=list(x), xticklabels=[f"{k}\n(n={len(groups[k])})" for k in kinds], ylabel="score (%)",
           ylim=(0, 110), title=f"EM and F1 by question word ({split})")
    ax.legend()
    return _save(fig, run / f"report_question_types_{split}.png")


def _metric_rows(metrics: dict) -> list[str]:
    rows = ["| split | metric | value |", "|---|---|---|"]
    for split in eval_splits(metrics):
        rows += [f"| {split} | {k} | {v:.4f} |" for k, v in metrics[split].items() if isinstance(v, (int, float))]
    return rows


def write_report(run) -> Path:
    """Write `report.md` and its plots, and the model card, from the files of a finished run."""
    run = Path(run)
    metrics = json.loads((run / "metrics.json").read_text())
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    env = json.loads((run / "versions.json").read_text())
    evals = _jsonl(run / "eval_metrics.jsonl")
    images = plot_training(run, _jsonl(run / "train_log.jsonl"), evals, cfg["main_metric"])
    labels = cfg.get("label_names") or []
    for split in eval_splits(metrics):
        preds = _jsonl(run / f"predictions_{split}.jsonl")
        image = None
        if cfg["adapter"] == "sequence-classification":
            image = plot_confusion(run, split, preds, labels)
        elif cfg["adapter"] == "token-classification" and "per_type" in metrics[split]:
            image = plot_per_type(run, split, metrics[split]["per_type"])
        elif cfg["adapter"] == "question-answering":
            image = plot_question_types(run, split, preds)
        images += [image] if image else []
    t = metrics["train"]
    lines = [f"# Run report: {cfg['task']} ({cfg['model']})", "",
             f"- command: `{env.get('command', '?')}`",
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
    lines += ["## Plots", ""] + [f"![{name}]({name})" for name in images]
    with atomic_path(run / "report.md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    write_model_card(run, cfg, metrics, env)
    return run / "report.md"


PIPELINES = {"sequence-classification": "text-classification", "token-classification": "token-classification",
             "question-answering": "question-answering"}
AUTO_CLASSES = {"sequence-classification": "AutoModelForSequenceClassification",
                "token-classification": "AutoModelForTokenClassification",
                "question-answering": "AutoModelForQuestionAnswering"}


def write_model_card(run: Path, cfg: dict, metrics: dict, env: dict) -> Path:
    """`README.md` following the Hub's model-card conventions: YAML metadata, then the facts of the run."""
    t, auto = metrics["train"], AUTO_CLASSES.get(cfg["adapter"], "AutoModel")
    results = [{"name": k, "value": round(v, 4), "split": split} for split in eval_splits(metrics)
               for k, v in metrics[split].items() if isinstance(v, (int, float))]
    meta = {"library_name": "transformers", "pipeline_tag": PIPELINES.get(cfg["adapter"], cfg["adapter"]),
            "tags": ["bertkit", cfg["task"]], "base_model": cfg["model"],
            "metrics": sorted({r["name"] for r in results}),
            "model-index": [{"name": run.name, "results": [{"task": {"type": PIPELINES.get(cfg["adapter"])},
                                                            "dataset": {"name": cfg["task"], "type": cfg["task"]},
                                                            "metrics": [{"type": r["name"], "value": r["value"],
                                                                         "name": f"{r['split']} {r['name']}"}
                                                                        for r in results]}]}]}
    body = [f"# {cfg['task']} fine-tuned from {cfg['model']}", "",
            f"Fine-tuned with bertkit ({cfg['adapter']} adapter). It is a plain Hugging Face checkpoint:",
            "", "```python", f"from transformers import {auto}", "",
            f'model = {auto}.from_pretrained("path/to/this/folder")', "```", "",
            "## Training", "",
            f"- base model: `{cfg['model']}`; labels: {', '.join(cfg.get('label_names') or []) or 'n/a'}",
            f"- data: {', '.join(f'{k} {v} examples' for k, v in metrics.get('data', {}).items())}",
            f"- recipe: lr {cfg['lr']}, batch {cfg['batch_size']}×{cfg['grad_accum']}×{t['processes']}, "
            f"epochs {cfg['epochs']}, max steps {cfg['max_steps']}, warm-up {cfg['warmup_ratio']}, "
            f"max length {cfg['max_length']}, seed {t['seed']}, precision {t['precision']}",
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
    out, plt = Path(out), _plt()
    names = list(summary["metrics"])
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2.5, 3.6))
    for x, name in enumerate(names):
        m = summary["metrics"][name]
        ax.scatter([x] * len(m["values"]), m["values"], color="tab:blue", zorder=3,
                   label="one seed" if x == 0 else None)
        ax.errorbar(x + 0.15, m["mean"], yerr=m["std"], fmt="s", color="tab:red", capsize=4,
                    label="mean ± std" if x == 0 else None)
    ax.set(xticks=range(len(names)), xticklabels=names, ylabel="value",
           title=f"{summary['task']}: spread over seeds {', '.join(map(str, summary['seeds']))}")
    ax.legend()
    image = _save(fig, out / "report_seeds.png")
    lines = [f"# {summary['task']}: {len(summary['seeds'])} seeds", "", "| metric | mean | std | per seed |",
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
