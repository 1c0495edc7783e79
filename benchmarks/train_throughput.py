"""Training throughput: bertkit vs transformers.Trainer (defaults, and with length grouping).

Same checkpoint (packaged MiniLM), same real SST-2 training sentences, batch 32, lr 2e-5, 10 % warm-up, the
same number of optimiser steps. Each configuration runs in a fresh Python process, one after another (never two
at once: they would share the cores), so no run inherits another's allocator or thread-pool state; with
`--repeats N` the configurations take turns N times and the median counts.

    python benchmarks/train_throughput.py --steps 300                       # fp32 and bf16
    python benchmarks/train_throughput.py --precisions auto --compare-with ../bertkit-old   # two commits

`--compare-with DIR` adds the bertkit of another checkout (e.g. a `git worktree` of an older commit) as one more
configuration of the same invocation, run by that checkout's own copy of this script.
Throughput = training examples / seconds of the training loop (bertkit: its own loop timer, which excludes
evaluation and checkpoint writes; Trainer: `train_runtime`, with evaluation and saving switched off).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402
import torch  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

import bertkit  # noqa: E402
from bertkit.config_files import load_recipe  # noqa: E402
from bertkit.models import load_tokenizer, resolve_model  # noqa: E402

LABELS = ["negative", "positive"]


def hf_trainer(train, steps: int, precision: str, grouped: bool) -> float:
    path, _ = resolve_model("minilm-l6")
    tok = load_tokenizer("minilm-l6")
    torch.manual_seed(42)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    enc = train.map(lambda b: tok(b["text"], truncation=True, max_length=128), batched=True, remove_columns=["text"])
    enc = enc.rename_column("label", "labels")
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=32, learning_rate=2e-5, warmup_steps=0.1,
                                 weight_decay=0.01, max_steps=steps, bf16=precision == "bf16", use_cpu=True,
                                 save_strategy="no", eval_strategy="no", report_to="none", logging_steps=10_000,
                                 seed=42, disable_tqdm=True,
                                 train_sampling_strategy="group_by_length" if grouped else "random")
        result = Trainer(model=model, args=args, train_dataset=enc, data_collator=DataCollatorWithPadding(tok)).train()
    return steps * 32 / result.metrics["train_runtime"]


def bertkit_run(train, dev, steps: int, precision: str) -> float:
    torch.manual_seed(42)
    clf = bertkit.SequenceClassification.from_pretrained("minilm-l6", label_names=LABELS)
    with tempfile.TemporaryDirectory() as out:
        cfg = bertkit.run_config(name="sst2", output_dir=out, max_steps=steps, precision=precision,
                                 label_names=LABELS, eval_every=str(steps))
        result = bertkit.Trainer(clf, cfg).fit(train, {"dev": dev})
    return result["train"]["examples_seen"] / result["train"]["train_seconds"]


RUNNERS = {"trainer": lambda tr, dev, st, pr: hf_trainer(tr, st, pr, grouped=False),
           "trainer-grouped": lambda tr, dev, st, pr: hf_trainer(tr, st, pr, grouped=True),
           "bertkit": bertkit_run}


def resolved(precision: str) -> str:
    """`auto` as bertkit decides it on this machine (the Trainer gets the same)."""
    from bertkit.device import choose_precision

    return choose_precision(precision, torch.device("cpu")).precision


def one(name: str, precision: str, steps: int, data_dir: str) -> None:
    """Child process: one configuration; prints its throughput as a JSON line."""
    cfg = load_recipe("sst2", {"data_dir": data_dir})
    train, evals, _ = bertkit.SequenceClassification.load_data(cfg)
    dev = evals["dev"].select(range(128))  # bertkit evaluates once at the end; not timed
    train = datasets.Dataset.from_dict(train[:])
    print("RESULT " + json.dumps({"rate": RUNNERS[name](train, dev, steps, precision)}), flush=True)


def run_child(script: str, name: str, precision: str, args) -> float:
    """One configuration in a fresh process of `script` (this file, or another checkout's copy of it)."""
    tree = Path(script).resolve().parent.parent
    proc = subprocess.run([sys.executable, script, "--one", name, precision, "--steps", str(args.steps),
                           "--data-dir", args.data_dir], capture_output=True, text=True, cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not line:
        raise SystemExit(f"{name} {precision} ({tree}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[-1][7:])["rate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16, auto")
    parser.add_argument("--repeats", type=int, default=1, help="turns each configuration takes (median reported)")
    parser.add_argument("--compare-with", help="another checkout of bertkit whose bertkit runs as one more column")
    parser.add_argument("--data-dir", default=os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"),
                                                           "sst2"))
    parser.add_argument("--one", nargs=2, metavar=("RUNNER", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(*args.one, args.steps, args.data_dir)
    args.data_dir = os.path.abspath(args.data_dir)  # the other checkout's child runs from its own folder
    configs = [(name, __file__) for name in RUNNERS]
    if args.compare_with:
        configs.append(("bertkit@" + Path(args.compare_with).name,
                        str(Path(args.compare_with) / "benchmarks" / "train_throughput.py")))
    rows = []
    for precision in [resolved(p) for p in args.precisions.split(",")]:
        rates = {name: [] for name, _ in configs}
        for turn in range(args.repeats):
            for name, script in configs if turn % 2 == 0 else configs[::-1]:
                rates[name].append(run_child(script, name.split("@")[0], precision, args))
                print(f"{precision} {name}: {rates[name][-1]:.1f} examples/s", flush=True)
        rows.append((precision, {name: statistics.median(r) for name, r in rates.items()}))
    names = [name for name, _ in configs]
    print(f"\nTraining throughput, examples/s (MiniLM-L6, SST-2 train, batch 32, {args.steps} steps, "
          f"{torch.get_num_threads()} threads, fresh process per run, median of {args.repeats})")
    print("| precision | " + " | ".join(names) + " | " + " | ".join(f"{n} ÷ trainer" for n in names[2:]) + " |")
    print("|---" * (1 + len(names) + len(names) - 2) + "|")
    for precision, r in rows:
        print(f"| {precision} | " + " | ".join(f"{r[n]:.1f}" for n in names) + " | "
              + " | ".join(f"{r[n] / r['trainer']:.2f}×" for n in names[2:]) + " |")


if __name__ == "__main__":
    main()
