"""Training throughput: bertkit vs transformers.Trainer (defaults, and with length grouping), fp32 and bf16.

Same checkpoint (packaged MiniLM), same real SST-2 training sentences, batch 32, lr 2e-5, 10 % warm-up, the
same number of optimiser steps, one process, in one invocation so the ratios are comparable.

    python benchmarks/train_throughput.py --steps 300            # or: make bench

Throughput = training examples / seconds of the training loop (bertkit: its own loop timer, which excludes
evaluation and checkpoint writes; Trainer: `train_runtime`, with evaluation and saving switched off).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

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
from bertkit.config import load_recipe  # noqa: E402
from bertkit.data import load_classification_data  # noqa: E402
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
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=32, learning_rate=2e-5, warmup_ratio=0.1,
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
        cfg = bertkit.FinetuneConfig(task="sst2", output_dir=out, max_steps=steps, precision=precision,
                                     label_names=LABELS, eval_every=str(steps))
        result = bertkit.Trainer(clf, cfg).fit(train, {"dev": dev})
    return result["train"]["examples_seen"] / result["train"]["train_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--data-dir", default=os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"),
                                                           "sst2"))
    args = parser.parse_args()
    cfg = load_recipe("sst2", {"data_dir": args.data_dir})
    train, evals, _ = load_classification_data(cfg)
    dev = evals["dev"].select(range(128))  # bertkit evaluates once at the end; not timed
    train = datasets.Dataset.from_dict(train[:])
    rows = []
    for precision in args.precisions.split(","):
        t0 = time.perf_counter()
        default = hf_trainer(train, args.steps, precision, grouped=False)
        grouped = hf_trainer(train, args.steps, precision, grouped=True)
        ours = bertkit_run(train, dev, args.steps, precision)
        rows.append((precision, default, grouped, ours))
        print(f"[{precision} done in {time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"\nTraining throughput, examples/s (MiniLM-L6, SST-2 train, batch 32, {args.steps} steps, "
          f"{torch.get_num_threads()} threads)")
    print("| precision | Trainer (defaults) | Trainer (group_by_length) | bertkit | bertkit ÷ defaults | "
          "bertkit ÷ grouped |")
    print("|---|---|---|---|---|---|")
    for precision, default, grouped, ours in rows:
        print(f"| {precision} | {default:.1f} | {grouped:.1f} | {ours:.1f} | {ours / default:.2f}× | "
              f"{ours / grouped:.2f}× |")


if __name__ == "__main__":
    main()
