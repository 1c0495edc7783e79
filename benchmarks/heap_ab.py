"""bertkit's kept heap against glibc's own allocation, each in fresh processes, alternating.

    python benchmarks/heap_ab.py --rounds 4 --steps 130

`ab_speed.py --variant mmap-malloc` switches the allocator inside one process, which cannot bring back glibc's
own adjusting mmap threshold once `mallopt` has been called. Here every measurement is a fresh process instead:
one with glibc untouched, one that calls `keep_heap()` first (what the Trainer does), in alternating order, each
training bertkit's step (packaged MiniLM, fast dropout, fused QKV, AdamW groups, clipping, bf16 autocast) on the
same first `--steps` length-grouped SST-2 batches of 64 and timing all but the first 10. Each round prints both
rates and their ratio; the median ratio is the figure (this machine drifts between processes by several %).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def child(mode: str, steps: int, data_dir: str | None) -> None:
    from sst2_setup import make_step, sst2_features

    from bertkit.batching import take_rows, train_batches
    from bertkit.fast_dropout import fast_dropout
    from bertkit.fused_qkv import fuse_qkv
    from bertkit.heap import keep_heap

    if mode == "keep" and not keep_heap():
        raise SystemExit("keep_heap() did not take effect (not glibc?)")
    cfg, clf, features = sst2_features(data_dir)
    step = make_step(fuse_qkv(fast_dropout(clf.model).train()), cfg)
    n, t0 = 0, None
    for i, idx in enumerate(train_batches(features["length"], 64, cfg.seed, 0, True)[:steps]):
        if i == 10:  # the first steps warm up
            n, t0 = 0, time.perf_counter()
        step(clf.collate(take_rows(features, idx)))
        n += len(idx)
    print(json.dumps({"mode": mode, "examples_per_s": n / (time.perf_counter() - t0)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=130)
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/sst2")
    parser.add_argument("--child", choices=["default", "keep"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.steps, args.data_dir)

    def run(mode: str) -> float:
        cmd = [sys.executable, __file__, "--child", mode, "--steps", str(args.steps)]
        cmd += ["--data-dir", args.data_dir] if args.data_dir else []
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])["examples_per_s"]

    print(f"SST-2, batch 64, bf16, steps 11–{args.steps}, one fresh process per measurement")
    print("| round | glibc as is | kept heap | kept ÷ as is |")
    print("|---|---|---|---|")
    ratios = []
    for r in range(args.rounds):
        order = ("default", "keep") if r % 2 == 0 else ("keep", "default")
        rate = {mode: run(mode) for mode in order}
        ratios.append(rate["keep"] / rate["default"])
        print(f"| {r + 1} | {rate['default']:.1f} examples/s | {rate['keep']:.1f} examples/s | {ratios[-1]:.3f} |",
              flush=True)
    print(f"| median | | | **{statistics.median(ratios):.3f}** |")


if __name__ == "__main__":
    main()
