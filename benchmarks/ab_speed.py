"""Is a CPU speed-up worth keeping? The training step with it against the step without it, end to end.

    python benchmarks/ab_speed.py --speedup fast_dropout --precision bf16

Two copies of the packaged MiniLM, one with every CPU speed-up that `bertkit.cpu` applies, one with all but the
one under test, train in ONE process on the same length-grouped SST-2 batches, in
alternating blocks of 10 steps (the order flips every block; the first block warms up). A step is what the Trainer
does per batch: collate, forward and backward under the precision's autocast, clipping, AdamW with bertkit's groups.
Prints the examples/s of both and their ratio. bertkit keeps a speed-up on by default only where the ratio is
≥ 1.03 at both fp32 and bf16 on the CPU where it matters (docs/speed.md).
"""

from __future__ import annotations

import argparse
import copy
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

BLOCK = 10


def steps_of(args):
    """(config, adapter, features, batches) of the SST-2 set-up."""
    from sst2_setup import sst2_features

    from bertkit.batching import train_batches

    cfg, clf, features = sst2_features(args.data_dir)
    return cfg, clf, features, train_batches(features["length"], args.batch_size, cfg.seed, 0, True)


def in_process(args) -> dict[str, float]:
    from contextlib import ExitStack

    from sst2_setup import make_step

    from bertkit.batching import take_rows
    from bertkit.cpu import cpu_speedups

    cfg, clf, features, batches = steps_of(args)
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
    return {name: r["n"] / r["s"] for name, r in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speedup", choices=["fast_dropout"], required=True)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=12, help="timed blocks of 10 steps per configuration")
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/sst2")
    args = parser.parse_args()
    rate = in_process(args)
    import torch

    how = f"{args.blocks} interleaved blocks of {BLOCK} steps in one process"
    print(f"\nSST-2, MiniLM, batch {args.batch_size}, {args.precision}, {torch.get_num_threads()} threads, {how}")
    print(f"| speed-up | with | without | with ÷ without |\n|---|---|---|---|\n| {args.speedup} | "
          f"{rate['with']:.1f} ex/s | {rate['without']:.1f} ex/s | {rate['with'] / rate['without']:.3f} |")


if __name__ == "__main__":
    main()
