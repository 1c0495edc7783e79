"""Is a CPU speed-up worth keeping? The training step with it against the step without it, end to end.

    python benchmarks/ab_speed.py --speedup fast_dropout --precision bf16
    python benchmarks/ab_speed.py --speedup keep_heap --precision bf16 --rounds 4

fast_dropout: two copies of the packaged MiniLM, one with every CPU speed-up that `bertkit.cpu` applies, one
with all but the one under test (the kept heap, process-wide, is set for both in bf16, as the trainer does), train
in ONE process on the same length-grouped SST-2 batches, in alternating blocks of 10 steps (the order flips every
block; the first block warms up). A step is what the Trainer does per batch: collate, forward and backward under
the precision's autocast, clipping, AdamW with bertkit's groups.
keep_heap changes the process's allocator, which cannot be put back exactly inside one process (glibc stops
adjusting its mmap threshold once it is set), so it alternates fresh processes instead, `--rounds` pairs of them.
Prints the examples/s of both and their ratio. bertkit applies a speed-up only where the ratio is ≥ 1.03 (fast
dropout: fp32 and bf16; the kept heap: bf16 only, docs/speed.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

BLOCK = 10


def steps_of(args):
    """(config, task, features, batches) of the SST-2 set-up."""
    from sst2_setup import sst2_features

    from bertkit.batching import train_batches

    cfg, clf, features = sst2_features(args.data_dir)
    return cfg, clf, features, train_batches(features["length"], args.batch_size, cfg.seed, 0, True)


def in_process(args) -> dict[str, float]:
    from contextlib import ExitStack

    from sst2_setup import make_step

    from bertkit.batching import take_rows
    from bertkit.cpu import cpu_speedups, heap

    cfg, clf, features, batches = steps_of(args)
    kept = args.precision == "bf16" and heap.keep_heap()  # as the trainer: in bf16, the same for both
    names, runs = ("with", "without"), {}
    with ExitStack() as stack:
        for name in names:
            model = copy.deepcopy(clf.model).train()
            options = {"fast_dropout": True}
            if name == "without":
                options[args.speedup] = False
            stack.enter_context(cpu_speedups(model, **options, log=print))
            runs[name] = {"step": make_step(model, cfg, args.precision), "s": 0.0, "n": 0}
        for block in range(args.blocks + 1):
            chunk = batches[block * BLOCK:(block + 1) * BLOCK]  # both train on these batches
            for name in names if block % 2 == 0 else names[::-1]:
                r, t0 = runs[name], time.perf_counter()
                for idx in chunk:
                    r["step"](clf.collate(take_rows(features, idx)))
                if block:  # block 0 warms both up
                    r["s"] += time.perf_counter() - t0
                    r["n"] += sum(len(idx) for idx in chunk)
    if kept:
        heap.release_heap()
    return {name: r["n"] / r["s"] for name, r in runs.items()}


def child(args) -> None:
    """One fresh process: every speed-up, with or without the kept heap (`--child with|without`)."""
    from sst2_setup import make_step

    from bertkit.batching import take_rows
    from bertkit.cpu import cpu_speedups

    cfg, clf, features, batches = steps_of(args)
    model = clf.model.train()
    with cpu_speedups(model, keep_heap=args.child == "with", log=print):
        step, seconds, n = make_step(model, cfg, args.precision), 0.0, 0
        for i, idx in enumerate(batches[: (args.blocks + 1) * BLOCK]):
            t0 = time.perf_counter()
            step(clf.collate(take_rows(features, idx)))
            if i >= BLOCK:
                seconds, n = seconds + time.perf_counter() - t0, n + len(idx)
    print("RESULT " + json.dumps({"rate": n / seconds}), flush=True)


def fresh_processes(args) -> dict[str, float]:
    rates = {"with": [], "without": []}
    for round_ in range(args.rounds):
        for name in ("with", "without") if round_ % 2 == 0 else ("without", "with"):
            proc = subprocess.run([sys.executable, __file__, "--speedup", "keep_heap", "--precision", args.precision,
                                   "--batch-size", str(args.batch_size), "--blocks", str(args.blocks), "--child", name]
                                  + (["--data-dir", args.data_dir] if args.data_dir else []),
                                  capture_output=True, text=True)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not line:
                raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
            rates[name].append(json.loads(line[-1][7:])["rate"])
        print(f"round {round_}: with {rates['with'][-1]:.1f}, without {rates['without'][-1]:.1f} examples/s")
    return {name: statistics.median(r) for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speedup", choices=["fast_dropout", "keep_heap"], required=True)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=12, help="timed blocks of 10 steps per configuration")
    parser.add_argument("--rounds", type=int, default=4, help="keep_heap: pairs of fresh processes")
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/sst2")
    parser.add_argument("--child", choices=["with", "without"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    rate = fresh_processes(args) if args.speedup == "keep_heap" else in_process(args)
    import torch

    how = f"{args.rounds} pairs of fresh processes" if args.speedup == "keep_heap" else \
        f"{args.blocks} interleaved blocks of {BLOCK} steps in one process"
    print(f"\nSST-2, MiniLM, batch {args.batch_size}, {args.precision}, {torch.get_num_threads()} threads, {how}")
    print(f"| speed-up | with | without | with ÷ without |\n|---|---|---|---|\n| {args.speedup} | "
          f"{rate['with']:.1f} ex/s | {rate['without']:.1f} ex/s | {rate['with'] / rate['without']:.3f} |")


if __name__ == "__main__":
    main()
