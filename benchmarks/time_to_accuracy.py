"""Time to accuracy: wall time from `bertkit finetune sst2` starting to SST-2 dev accuracy ≥ a target (90 %),
beside transformers.Trainer (length-grouped, bf16, the issue's best Trainer set-up) given the same number of steps.

    python benchmarks/time_to_accuracy.py                 # or: make bench
    python benchmarks/time_to_accuracy.py -- --epochs 0.75   # extra flags for bertkit finetune after --

bertkit runs as the real command in a subprocess (`bertkit finetune sst2 --model minilm-l6 --epochs 1
--eval-every N`); this script notes the wall time at which each evaluation line appears in the run's
eval_metrics.jsonl, so the figure counts everything a user waits for: start-up, loading, tokenising,
training and the evaluations themselves. The Trainer runs in this process on the same tokenised data with
the same hyper-parameters; its clock starts before the model is loaded and stops after its final evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402


def run_bertkit(data_dir: str, eval_every: int, target: float, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "bertkit.cli", "finetune", "sst2", "--model", "minilm-l6", "--epochs", "1",
           "--eval-every", str(eval_every), "--data-dir", data_dir, "--output-dir", str(out), *extra]
    print("$", " ".join(cmd[2:]), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen, timeline = 0, []
    log = out / "eval_metrics.jsonl"
    while True:
        finished = proc.poll() is not None
        lines = log.read_text().splitlines() if log.exists() else []
        for line in lines[seen:]:
            if line.endswith("}"):
                rec = json.loads(line)
                timeline.append((time.perf_counter() - t0, rec["step"], rec["dev/accuracy"]))
                seen += 1
        if finished:
            break
        time.sleep(0.25)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bertkit failed:\n{proc.stderr.read()[-3000:]}")
    hit = next(((t, s, a) for t, s, a in timeline if a >= target), None)
    from bertkit.config_files import load_run_config

    metrics = json.loads((out / "metrics.json").read_text())
    cfg = load_run_config(out / "config.yaml")  # the resolved settings the run used (recipe + flags)
    return {"timeline": timeline, "hit": hit, "wall": wall, "final": metrics["dev"]["accuracy"],
            "steps": metrics["train"]["steps"], "lr": cfg.lr, "batch_size": cfg.batch_size,
            "precision": metrics["train"]["precision"]}


def run_trainer(data_dir: str, steps: int, lr: float, batch_size: int) -> dict:
    import datasets
    import torch
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, TrainingArguments

    from bertkit.config_files import load_recipe
    from bertkit.models import load_tokenizer, resolve_model
    from bertkit.tasks import SequenceClassification

    t0 = time.perf_counter()
    cfg = load_recipe("sst2", {"data_dir": data_dir})
    train, evals, _ = SequenceClassification.load_data(cfg)
    tok = load_tokenizer("minilm-l6")
    torch.manual_seed(42)
    model = AutoModelForSequenceClassification.from_pretrained(resolve_model("minilm-l6")[0], num_labels=2)

    def enc(ds: datasets.Dataset) -> datasets.Dataset:
        ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=128), batched=True, remove_columns=["text"])
        return ds.rename_column("label", "labels")

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch_size,
                                 per_device_eval_batch_size=64,
                                 learning_rate=lr, warmup_steps=0.1, weight_decay=0.01, max_steps=steps,
                                 bf16=True, use_cpu=True, save_strategy="no", eval_strategy="no", report_to="none",
                                 logging_steps=10_000, seed=42, disable_tqdm=True,
                                 train_sampling_strategy="group_by_length")
        trainer = Trainer(model=model, args=args, train_dataset=enc(train), data_collator=DataCollatorWithPadding(tok),
                          compute_metrics=lambda p: {"accuracy": float((np.argmax(p.predictions, -1) ==
                                                                        p.label_ids).mean())})
        trainer.train()
        acc = trainer.evaluate(enc(evals["dev"]))["eval_accuracy"]
    return {"wall": time.perf_counter() - t0, "final": acc, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, default=0.90)
    parser.add_argument("--eval-every", type=int, default=250, help="bertkit evaluates every N steps")
    parser.add_argument("--data-dir", default=os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"),
                                                           "sst2"))
    parser.add_argument("--skip-trainer", action="store_true")
    parser.add_argument("bertkit_flags", nargs="*", help="extra flags for bertkit finetune (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours = run_bertkit(args.data_dir, args.eval_every, args.target, Path(tmp) / "run", args.bertkit_flags)
    lr, batch_size = ours["lr"], ours["batch_size"]  # the Trainer gets bertkit's resolved lr and batch
    print("bertkit evaluations (wall s from command start, step, dev accuracy):")
    for t, s, a in ours["timeline"]:
        print(f"  {t:7.1f} s  step {s:5d}  {100 * a:.2f} %")
    theirs = None if args.skip_trainer else run_trainer(args.data_dir, ours["steps"], lr, batch_size)
    print(f"\nSST-2 time to {100 * args.target:.0f} % dev accuracy (MiniLM-L6, {ours['steps']} steps, lr {lr:g}, "
          f"batch {batch_size}; bertkit {ours['precision']}, Trainer bf16)")
    print("| | steps | wall to target | accuracy at target | wall, whole run | final dev accuracy |")
    print("|---|---|---|---|---|---|")
    hit = ours["hit"]
    print(f"| bertkit | {ours['steps']} | " + (f"{hit[0]:.0f} s (step {hit[1]}) | {100 * hit[2]:.2f} %" if hit else
                                               "not reached | –") +
          f" | {ours['wall']:.0f} s | {100 * ours['final']:.2f} % |")
    if theirs:
        print(f"| Trainer (group_by_length) | {theirs['steps']} | " +
              ("–" if theirs["final"] < args.target else "end of run") +
              f" | – | {theirs['wall']:.0f} s | {100 * theirs['final']:.2f} % |")


if __name__ == "__main__":
    main()
