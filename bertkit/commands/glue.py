"""`bertkit finetune glue [flags]`: every GLUE task that has data, each with its own recipe, into one table laid out
as the BERT paper's Table 1 (Devlin et al. 2019).

For each task (`--tasks` to choose) the recipe is loaded with the command line's flags on top (`--model`, `--seeds`,
`--epochs`, ...; flags that name a task's files, columns or labels are refused) and run into `<output_dir>/<task>/`
exactly as `bertkit finetune <task>` would. Data: `--data-dir ROOT/<task>/` (a root with one folder per task; given,
it is the only place looked at), else `$BERTKIT_DATA_DIR/<task>/`, else the hub's GLUE copy when online; a task
with a validation file but no training file (QNLI here) is trained and measured on that file cut in two
(`--carve-eval`, default 20 %), which the table marks.
A task without data is listed as such. Resumable task by task: with `--resume`, a task whose `metrics.json`
(`summary.json` with --seeds) exists is not run again and an interrupted one resumes from its checkpoint.

Table 1's columns and metrics: MNLI-m/mm accuracy, QQP F1, QNLI accuracy, SST-2 accuracy, CoLA Matthews
correlation, STS-B Spearman, MRPC F1, RTE accuracy, and the average of those nine numbers (MNLI counts twice:
the paper's BERT-base row, 84.6/83.4, 71.2, 90.5, 93.5, 52.1, 85.8, 88.9, 66.4, averages to its 79.6 that way).
WNLI is reported on its own line, outside the average, as in the paper. Written to `table.md` and `table.json`.

Example:
```
bertkit finetune glue --model minilm-l6 --seeds 13,42,87 --output-dir runs/glue
bertkit finetune glue --model minilm-l6 --seeds 13,42,87 --output-dir runs/glue --resume   # after a stop
```
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..errors import BertkitError

# (column, task, metric); MNLI's column holds two numbers (matched, mismatched: its first two evaluation splits)
COLUMNS = [("MNLI-m/mm", "mnli", "accuracy"), ("QQP", "qqp", "f1"), ("QNLI", "qnli", "accuracy"),
           ("SST-2", "sst2", "accuracy"), ("CoLA", "cola", "mcc"), ("STS-B", "stsb", "spearman"),
           ("MRPC", "mrpc", "f1"), ("RTE", "rte", "accuracy")]
WNLI = ("WNLI", "wnli", "accuracy")
TASKS = [t for _, t, _ in COLUMNS] + ["wnli"]
# flags that describe one task's data or head; the runner takes them from each task's recipe: the run's data fields
# and the classification options that say so themselves (`dataset=True`)
RUN_DATA = ["name", "train_file", "validation_files", "test_file", "hub_dataset", "hub_config", "hub_splits",
            "hub_revision", "metrics", "main_metric"]


def per_task() -> list[str]:
    from ..tasks.classification import ClassificationOptions
    from ..typed import dataset_options

    return RUN_DATA + dataset_options(ClassificationOptions)


def task_source(cfg) -> tuple[str | None, str]:
    """Where a task's data comes from: ('local' | 'carved' | 'hub' | None, a few words for the table)."""
    from ..data.sources import local_path, offline, resolve_data_dir

    data_dir = resolve_data_dir(cfg)
    if data_dir is None:
        if cfg.hub.dataset and not offline():
            return "hub", f"hub {cfg.hub.dataset}/{cfg.hub.config}"
        return None, "no local data" + (" (hub offline)" if cfg.hub.dataset else "")
    if local_path(data_dir, cfg.train_file).is_file():
        return "local", f"{data_dir}/{cfg.train_file}"
    if cfg.validation_files and local_path(data_dir, cfg.validation_files[0]).is_file():
        return "carved", f"{data_dir}/{cfg.validation_files[0]} carved"
    return None, f"{data_dir} has neither {cfg.train_file} nor {cfg.validation_files[0]}"


def _values(path: Path, metric: str) -> tuple[list[str], dict[str, list[float]], dict, int | None, float]:
    """(evaluation splits, {split: the metric per seed}, data sizes, carve_eval, training seconds over the seeds) of
    a finished task folder."""
    import yaml

    from ..report import eval_splits

    if (path / "summary.json").is_file():
        summary = json.loads((path / "summary.json").read_text())
        folders = [path / f"seed-{s}" for s in summary["seeds"]]
    else:
        folders = [path]
    runs = [json.loads((f / "metrics.json").read_text()) for f in folders]
    saved = yaml.safe_load((folders[0] / "config.yaml").read_text()) or {}
    carved = (saved.get("task_options") or saved).get("carve_eval")  # this version's layout, or 0.2's
    splits = eval_splits(runs[0])
    values = {s: [r[s][metric] for r in runs] for s in splits if metric in runs[0][s]}
    return splits, values, runs[0]["data"], carved, sum(r["train"]["train_seconds"] for r in runs)


def _cell(values: list[float]) -> str:
    import numpy as np

    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * np.mean(values):.1f} ± {100 * np.std(values, ddof=1):.1f}"


def glue_table(root: Path, sources: dict[str, str]) -> dict:
    """The table's numbers (fractions, one per seed) and notes from the task folders under `root`."""
    import numpy as np

    table, notes, entries = {}, {}, []  # entries: the nine averaged numbers, one list of per-seed values each
    for name, task, metric in [*COLUMNS, WNLI]:
        folder = root / task
        done = (folder / "summary.json").is_file() or (folder / "metrics.json").is_file()
        if not done:
            table[name], notes[name] = None, sources.get(task, "not run (not in --tasks)")
            continue
        splits, values, data, carved, seconds = _values(folder, metric)
        used = splits[:2] if task == "mnli" else splits[:1]
        table[name] = {"metric": metric, "splits": used, "values": [values[s] for s in used], "carved": carved}
        spent = f"{seconds:.{1 if seconds < 10 else 0}f}"  # a tiny run's 0.3 s was "0 s"
        notes[name] = (f"{sources[task]}; " if task in sources else "") + ", ".join(
            f"{k} {v} examples" for k, v in data.items()) + f"; training loops {spent} s in all"
        if task != "wnli":
            entries += table[name]["values"]
    seeds = {len(v) for v in entries}
    average = None
    if entries and len(seeds) == 1:  # per seed: the mean over the columns; then mean ± std over seeds
        per_seed = np.mean(np.asarray(entries), axis=0).tolist()
        average = {"values": per_seed, "over": len(entries), "of": 9}
    return {"columns": table, "average": average, "notes": notes}


def format_table(result: dict) -> str:
    head = [name for name, _, _ in COLUMNS] + ["Average"]
    cells = []
    for name, _, _ in COLUMNS:
        entry = result["columns"][name]
        cells.append("—" if entry is None else "/".join(_cell(v) for v in entry["values"])
                     + (" †" if entry["carved"] else ""))
    avg = result["average"]
    cells.append("—" if avg is None else _cell(avg["values"]) + ("" if avg["over"] == 9 else
                                                                   f" ({avg['over']} of 9)"))
    wnli = result["columns"]["WNLI"]
    about = result.get("run", {})
    lines = [f"# GLUE, the BERT paper's Table 1 layout: {about.get('model', '?')}", "",
             *[f"`{c}` (before)" for c in about.get("commands_before", [])],
             f"`{about.get('command', '?')}` ({about.get('date', '?')}; {about.get('hardware', '?')})", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head), "| " + " | ".join(cells) + " |", "",
             f"WNLI (outside the average, as in the paper): {'—' if wnli is None else _cell(wnli['values'][0])}", "",
             "Metrics as the paper's Table 1: F1 for QQP and MRPC, Spearman for STS-B, Matthews correlation for CoLA, "
             "accuracy otherwise; × 100, on the evaluation splits named below (the paper's Table 1 is GLUE test). "
             "The average is over the nine numbers (MNLI-m and -mm both); with some missing it is over those "
             "present and not comparable. ± is the standard deviation over seeds (ddof 1).", ""]
    for name, note in result["notes"].items():
        entry = result["columns"][name]
        if entry is None:
            lines.append(f"- {name}: not in the table: {note}")
            continue
        lines.append(f"- {name}: {entry['metric']} on {'/'.join(entry['splits'])}; {note}"
                     + (f" († trained and evaluated on two parts of one file, cut by the carve_eval {entry['carved']} "
                        "rule: not comparable to a GLUE dev result)" if entry["carved"] else ""))
    return "\n".join(lines) + "\n"


def run_glue(args: argparse.Namespace, overrides: dict) -> int:
    """`finetune glue` with the command line's flags (`args`) and its config overrides (`overrides`, flat)."""
    from ..config_files import load_recipe
    from ..training.launch import is_main_process
    from ..training.runs import finetune
    from ..typed import check_type
    from ..utils import COMMAND, atomic_path, hardware, write_json

    t0 = time.perf_counter()
    overrides = dict(overrides)
    bad = [k for k in per_task() if k in overrides]
    if bad:
        raise BertkitError(f"--{bad[0].replace('_', '-')} names one task's data; `finetune glue` takes each task's "
                           "from its recipe (data: BERTKIT_DATA_DIR or --data-dir with one folder per task)")
    data_root = overrides.pop("data_dir", None)  # the root of the task folders
    seeds = check_type("seeds", args.seeds, list[int]) if args.seeds else None
    tasks = [t.strip() for t in (args.tasks or ",".join(TASKS)).split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise BertkitError(f"--tasks: unknown GLUE task(s) {', '.join(unknown)} (GLUE: {', '.join(TASKS)})")
    root = Path(overrides.pop("output_dir", None) or "runs/glue")
    carve = overrides.pop("carve_eval", None) or 20
    if not args.resume and root.exists() and any(root.iterdir()):
        raise BertkitError(f"output folder {root} is not empty; pass --resume to continue it, or a new --output-dir")
    sources = {}
    for task in tasks:
        folder = root / task
        local = {"data_dir": str(Path(data_root) / task)} if data_root and (Path(data_root) / task).is_dir() else {}
        if data_root and not local:  # --data-dir is the only local root asked for: not $BERTKIT_DATA_DIR
            print(f"glue: {task}: skipped (no {task}/ folder in --data-dir {data_root})")
            sources[task] = f"no {task}/ folder in --data-dir"
            continue
        cfg = load_recipe(task, {**overrides, **local, "output_dir": str(folder)}, "command line")
        kind, sources[task] = task_source(cfg)  # sources: why a task is missing from the table
        if kind is None:
            print(f"glue: {task}: skipped ({sources[task]})")
            continue
        if (folder / ("summary.json" if seeds else "metrics.json")).is_file():
            print(f"glue: {task}: finished before, not run again")
            continue
        if kind == "carved":
            cfg = load_recipe(task, {**overrides, **local, "output_dir": str(folder), "carve_eval": carve},
                              "command line")
        resume = folder.is_dir() and any(folder.iterdir())
        print(f"glue: {task}: {'resuming' if resume else 'training'} ({sources[task]})")
        finetune(cfg, seeds=seeds, resume=resume, allow_pickle=args.allow_pickle)
    if not is_main_process():
        return 0
    if not any((root / t / "metrics.json").is_file() or (root / t / "summary.json").is_file() for t in TASKS):
        raise BertkitError("no GLUE task has data here (" + "; ".join(f"{t}: {why}" for t, why in sources.items())
                           + "); point BERTKIT_DATA_DIR (or --data-dir) at a folder with one sub-folder per task")
    result = glue_table(root, sources)
    result["run"] = {"model": overrides.get("model") or "each recipe's model", "command": COMMAND[0],
                     "date": time.strftime("%Y-%m-%d %H:%M"), "hardware": hardware(),
                     "wall_seconds": round(time.perf_counter() - t0, 1)}
    if args.resume and (root / "table.json").is_file():  # the commands before (a --tasks one wrote part of it)
        before = json.loads((root / "table.json").read_text()).get("run", {})
        result["run"]["commands_before"] = [*before.get("commands_before", []), before.get("command", "?")]
    text = format_table(result)
    write_json(root / "table.json", result)
    with atomic_path(root / "table.md") as tmp:
        tmp.write_text(text)
    print(text)
    return 0
