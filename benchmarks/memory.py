"""Peak memory of training: bertkit and transformers' Trainer on the same configuration, each in a fresh process, in
one invocation; over model × sequence length × batch × precision, and bertkit with each memory option.

    python benchmarks/memory.py --models minilm-l6,bert-base --lengths 128,384 --batches 16,32 \\
        --precisions fp32,bf16 --steps 8 --output docs/memory        # memory.json, memory.md, memory.png

Every run trains `--steps` optimiser steps of sequence classification on synthetic texts that all fill
`--length` word pieces (the worst case of a padded batch), with the same model, batch, learning rate and precision
on both sides. Measured in the child process itself: the peak resident set of the training steps (Linux's per-phase
peak, `bertkit.memory`; model loading and data preparation are not in it) and of the whole process (getrusage), and
the training examples/s. `bert-base` is a randomly initialised BERT-base-sized config (12 × 768; memory and speed do
not depend on the weights) with the packaged MiniLM's vocabulary. bertkit's variants: its defaults, `--no-keep-heap`,
`--gradient-checkpointing`, `--no-fast-dropout` (fused SDPA attention instead of the unfused one), LoRA (r 8) and
`--memory-budget 8GB` (the chosen micro-batch × accumulation in the row).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"default": {}, "no-keep-heap": {"keep_heap": False}, "checkpointing": {"gradient_checkpointing": True},
            "sdpa": {"fast_dropout": False}, "lora": {"peft": "lora"}, "budget-8GB": {"memory_budget": "8GB"}}
WORDS = "the film is quite good and the story was really moving but its plot seemed a little slow".split()


def texts(n: int, length: int) -> list[str]:
    """`n` texts of at least `length` word pieces (truncated to it): every batch is full length."""
    return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(length)) for i in range(n)]


def base_model(name: str, folder: Path) -> str:
    """minilm-l6, or a random BERT-base-sized model saved in `folder` (once)."""
    if name != "bert-base":
        return name
    if not (folder / "config.json").is_file():
        from transformers import BertConfig, BertModel, BertTokenizerFast

        from bertkit.models import resolve_model

        BertModel(BertConfig()).save_pretrained(folder)
        BertTokenizerFast(vocab=str(Path(resolve_model("minilm-l6")[0]) / "vocab.txt")).save_pretrained(folder)
    return str(folder)


def child_bertkit(args) -> dict:
    from bertkit import SequenceClassification, Trainer, run_config

    options = VARIANTS[args.variant]
    n = args.batch * args.steps
    cfg = run_config(name="memory", model=args.model, max_length=args.length, batch_size=args.batch, lr=2e-5,
                     max_steps=args.steps, warmup_ratio=0.0, eval_every=str(args.steps), precision=args.precision,
                     output_dir=args.out, label_names=["a", "b"], **options)
    task = SequenceClassification.from_config(cfg, ["a", "b"])
    train = {"text": texts(n, args.length), "label": [i % 2 for i in range(n)]}
    result = Trainer(task, cfg).fit(train, {"dev": {"text": texts(8, 16), "label": [0, 1] * 4}})
    plan = result["memory"].get("budget_plan")
    return {"train_peak_gib": result["memory"]["phases"]["training"]["peak_rss_gib"],
            "examples_per_s": result["train"]["examples_per_s"],
            **({"plan": f"{plan['micro_batch']}×{plan['grad_accum']}"
                        + (", checkpointing" if plan.get("gradient_checkpointing") else "")} if plan else {})}


def child_trainer(args) -> dict:
    import datasets
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, TrainingArguments

    from bertkit.memory import peak_rss_gib, reset_peak
    from bertkit.models import load_tokenizer, resolve_model

    tok = load_tokenizer(args.model)
    n = args.batch * args.steps
    ds = datasets.Dataset.from_dict({"text": texts(n, args.length), "label": [i % 2 for i in range(n)]})
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=args.length), batched=True,
                remove_columns=["text"]).rename_column("label", "labels")
    model = AutoModelForSequenceClassification.from_pretrained(resolve_model(args.model)[0], num_labels=2)
    targs = TrainingArguments(output_dir=args.out, per_device_train_batch_size=args.batch, learning_rate=2e-5,
                              max_steps=args.steps, bf16=args.precision == "bf16", use_cpu=True, save_strategy="no",
                              report_to="none", disable_tqdm=True, logging_strategy="no")
    trainer = Trainer(model=model, args=targs, train_dataset=ds, data_collator=DataCollatorWithPadding(tok))
    reset_peak()
    t0 = time.perf_counter()
    out = trainer.train()
    return {"train_peak_gib": peak_rss_gib(), "examples_per_s": round(out.metrics.get(
        "train_samples_per_second", n / (time.perf_counter() - t0)), 1)}


def child(args) -> None:
    result = child_bertkit(args) if args.side == "bertkit" else child_trainer(args)
    result["process_peak_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3)
    print("RESULT " + json.dumps(result), flush=True)


def run_cell(side: str, variant: str, model: str, length: int, batch: int, precision: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, __file__, "--child", side, "--variant", variant, "--model", model, "--length",
               str(length), "--batch", str(batch), "--precision", precision, "--steps", str(steps), "--out",
               str(Path(out) / "run")]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200], "returncode": proc.returncode}
    return json.loads(lines[-1][len("RESULT "):])


def table(rows: list[dict]) -> str:
    lines = ["| model | length | batch | precision | run | training peak GiB | process peak GiB | examples/s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        got = r["result"]
        cells = (f"{got['train_peak_gib']:.2f} | {got['process_peak_gib']:.2f} | {got['examples_per_s']:.1f}"
                 if "error" not in got else f"failed ({got['error']}) | | ")
        run = r["run"] + (f" (chose {got['plan']})" if "plan" in got else "")
        lines.append(f"| {r['model']} | {r['length']} | {r['batch']} | {r['precision']} | {run} | {cells} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    from bertkit.plots import plt, save_figure

    ok = [r for r in rows if "error" not in r["result"]]
    runs = list(dict.fromkeys(r["run"] for r in ok))
    configs = list(dict.fromkeys((r["model"], r["length"], r["batch"], r["precision"]) for r in ok))
    fig, ax = plt().subplots(figsize=(max(8, 0.9 * len(configs)), 4))
    width = 0.8 / max(len(runs), 1)
    for k, run in enumerate(runs):
        values = [next((r["result"]["train_peak_gib"] for r in ok if r["run"] == run and
                        (r["model"], r["length"], r["batch"], r["precision"]) == c), 0) for c in configs]
        ax.bar([i + k * width for i in range(len(configs))], values, width, label=run)
    ax.set(xticks=[i + 0.4 - width / 2 for i in range(len(configs))], ylabel="training peak resident (GiB)",
           xticklabels=[f"{m}\n{n}×{b} {p}" for m, n, b, p in configs], title="Peak memory of training steps")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="minilm-l6,bert-base")
    p.add_argument("--lengths", default="128,384")
    p.add_argument("--batches", default="16,32")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--variants", default=",".join(VARIANTS), help="bertkit's runs (the Trainer runs once per cell)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--trainer", action=argparse.BooleanOptionalAction, default=True,
                   help="also run transformers' Trainer on each cell (default: yes)")
    p.add_argument("--output", default="docs/memory", help="folder for memory.json, memory.md and memory.png")
    p.add_argument("--child", choices=["bertkit", "trainer"], help=argparse.SUPPRESS)
    for name in ("variant", "model", "out", "precision"):
        p.add_argument(f"--{name}", help=argparse.SUPPRESS)
    for name in ("length", "batch"):
        p.add_argument(f"--{name}", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.side = args.child
        child(args)
        return
    from bertkit.utils import hardware

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.gettempdir()) / "bertkit-bench-bert-base"
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for name in args.models.split(","):
        model = base_model(name, cache)
        for length in map(int, args.lengths.split(",")):
            for batch in map(int, args.batches.split(",")):
                for precision in args.precisions.split(","):
                    for run in ["Trainer"] * args.trainer + args.variants.split(","):
                        side, variant = ("trainer", "default") if run == "Trainer" else ("bertkit", run)
                        result = run_cell(side, variant, model, length, batch, precision, args.steps)
                        row = {"model": name, "length": length, "batch": batch, "precision": precision,
                               "run": run if run == "Trainer" else f"bertkit {run}", "result": result}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        (out / "memory.json").write_text(json.dumps(
                            {"command": " ".join(sys.argv), "started": started, "hardware": hardware(),
                             "steps": args.steps, "rows": rows}, indent=1))
    text = (f"`python {' '.join(sys.argv)}` — {started}; {hardware()}; {args.steps} training steps per run, each "
            "run in a fresh process, one at a time.\n\n" + table(rows))
    (out / "memory.md").write_text(text)
    plot(rows, out / "memory.png")
    print(text)


if __name__ == "__main__":
    main()
