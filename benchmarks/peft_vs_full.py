"""LoRA against full fine-tuning on real SST-2 with the packaged MiniLM, in one invocation: trainable parameters,
peak memory of the training steps, examples/s and dev accuracy, over seeds (the two methods alternate seed by
seed, one run at a time).

    python benchmarks/peft_vs_full.py --seeds 13,42,87 --epochs 1 --output runs/peft-vs-full

Full fine-tuning is the recipe with its MiniLM setting (lr 1e-4, batch 64); LoRA is the same run with `--peft lora
--lora-r 8 --lora-alpha 16 --lora-target query,value` at `--lora-lr` (default 5e-4: the LoRA paper's rate for
RoBERTa-base on SST-2, Hu et al. 2021, Table 9; LoRA's few weights train at a higher rate than a whole model).
Each run is `bertkit finetune sst2` in a fresh process; the figures are read from its run folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def run(out: Path, seed: int, epochs: float, extra: list[str]) -> dict:
    if not (out / "metrics.json").is_file():
        cmd = [sys.executable, "-m", "bertkit", "finetune", "sst2", "--model", "minilm-l6", "--seed", str(seed),
               "--epochs", str(epochs), "--output-dir", str(out), *extra]
        if out.is_dir():
            cmd.append("--resume")
        print("$", " ".join(cmd[2:]), flush=True)
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        (out / "stderr.txt").write_text(proc.stderr)
    metrics = json.loads((out / "metrics.json").read_text())
    log = (out / "stderr.txt").read_text() if (out / "stderr.txt").is_file() else ""
    found = re.search(r"peft \w+: ([\d,]+) of ([\d,]+) parameters train", log)
    return {"accuracy": metrics["dev"]["accuracy"], "examples_per_s": metrics["train"]["examples_per_s"],
            "train_peak_gib": metrics["memory"]["phases"]["training"]["peak_rss_gib"],
            "trainable": int(found.group(1).replace(",", "")) if found else None,
            "total": int(found.group(2).replace(",", "")) if found else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="13,42,87")
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--lora-lr", default="5e-4")
    p.add_argument("--output", default="runs/peft-vs-full")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from bertkit.utils import hardware

    out = Path(args.output).resolve()  # the runs start in the repository root (cwd=REPO)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    methods = {"full": [], "lora": ["--peft", "lora", "--lora-r", "8", "--lora-alpha", "16", "--lora-target",
                                    "query,value", "--lr", args.lora_lr]}
    results = {m: [] for m in methods}
    for seed in map(int, args.seeds.split(",")):
        for method, extra in methods.items():
            results[method].append(run(out / f"{method}-seed-{seed}", seed, args.epochs, extra))
    lines = [f"`python {' '.join(sys.argv)}` — {started}; {hardware()}", "",
             "| method | trainable parameters | training peak GiB | examples/s | dev accuracy (mean ± std) "
             "| per seed |",
             "|---|---|---|---|---|---|"]
    for method, runs in results.items():
        acc = [100 * r["accuracy"] for r in runs]
        trainable = runs[0]["trainable"]
        params = f"{trainable:,} of {runs[0]['total']:,}" if trainable else "all (22.7 M)"
        lines.append(f"| {method} | {params} | {np.mean([r['train_peak_gib'] for r in runs]):.2f} | "
                     f"{np.mean([r['examples_per_s'] for r in runs]):.1f} | {np.mean(acc):.2f} ± "
                     f"{np.std(acc, ddof=1) if len(acc) > 1 else 0:.2f} | {', '.join(f'{a:.2f}' for a in acc)} |")
    text = "\n".join(lines) + "\n"
    (out / "peft_vs_full.md").write_text(text)
    (out / "peft_vs_full.json").write_text(json.dumps({"args": vars(args), "started": started,
                                                       "results": results}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
