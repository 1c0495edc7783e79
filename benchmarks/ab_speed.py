"""Training speed of bertkit's step with and without one change, interleaved in one process.

    python benchmarks/ab_speed.py --variant freeze-word-embeddings --batch-size 64 --blocks 12
    python benchmarks/ab_speed.py --variant unfused-qkv --batch-size 64 --blocks 12
    python benchmarks/ab_speed.py --variant mmap-malloc --batch-size 64 --blocks 12
    python benchmarks/ab_speed.py --variant no-attention-dropout --batch-size 64 --blocks 12

This machine's speed drifts by 10–20 % over minutes, so separate invocations cannot resolve a few percent.
Here two copies of the packaged MiniLM (fast dropout, fused QKV, bertkit's AdamW groups, clipping, bf16 autocast,
the kept heap) train on the same length-grouped SST-2 batches, alternating in blocks of 10 steps (the order flips
every block; the first block is warm-up), and the ratio of their examples/s is printed. The variant is applied to
the copy named after it:
  freeze-word-embeddings  the word-embedding matrix is not trained (`--freeze-word-embeddings`)
  unfused-qkv             query, key and value as three matmuls, as Hugging Face runs them (`--no-fused-qkv`)
  mmap-malloc             glibc's mmap use (blocks over 32 MiB, the highest threshold its own adjustment reaches,
                          mmapped and unmapped on free) instead of bertkit's kept heap (`--no-keep-heap`);
                          switched before each block, as both share this process's allocator
  no-attention-dropout    no dropout on the attention probabilities (`--attention-dropout 0`; bertkit's unfused
                          attention then draws no mask)
  no-dropout              no dropout anywhere (`--dropout 0 --attention-dropout 0`)
"""

from __future__ import annotations

import argparse
import copy
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from sst2_setup import make_step, sst2_features  # noqa: E402

from bertkit.batching import take_rows, train_batches  # noqa: E402
from bertkit.fast_dropout import fast_dropout, set_dropout  # noqa: E402
from bertkit.fused_qkv import fuse_qkv  # noqa: E402
from bertkit.heap import keep_heap, release_heap  # noqa: E402

BLOCK = 10
VARIANTS = ("freeze-word-embeddings", "unfused-qkv", "mmap-malloc", "no-attention-dropout", "no-dropout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=VARIANTS, default=VARIANTS[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--blocks", type=int, default=12, help="timed blocks of 10 steps per configuration")
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/sst2")
    args = parser.parse_args()
    cfg, clf, features = sst2_features(args.data_dir)
    batches = train_batches(features["length"], args.batch_size, cfg.seed, 0, True)

    names = ("bertkit", args.variant)
    runs = {}
    for name in names:
        model = fast_dropout(copy.deepcopy(clf.model)).train()
        if name != "unfused-qkv":
            fuse_qkv(model)
        model.bert.embeddings.word_embeddings.weight.requires_grad_(name != "freeze-word-embeddings")
        if name in ("no-dropout", "no-attention-dropout"):  # what --dropout 0 / --attention-dropout 0 do
            set_dropout(model, hidden=0.0 if name == "no-dropout" else None, attention=0.0)
        runs[name] = {"step": make_step(model, cfg), "s": 0.0, "n": 0}

    for block in range(args.blocks + 1):
        chunk = batches[block * BLOCK:(block + 1) * BLOCK]  # both configurations train on these batches
        for name in (names if block % 2 == 0 else names[::-1]):
            r = runs[name]
            if name == "mmap-malloc":
                release_heap(trim=False)
            else:
                keep_heap()
            t0 = time.perf_counter()
            for idx in chunk:
                r["step"](clf.collate(take_rows(features, idx)))
            if block:  # block 0 warms both up
                r["s"] += time.perf_counter() - t0
                r["n"] += sum(len(idx) for idx in chunk)

    rate = {name: r["n"] / r["s"] for name, r in runs.items()}
    print(f"\nSST-2, batch {args.batch_size}, bf16, {args.blocks} interleaved blocks of {BLOCK} steps each")
    print(f"| bertkit | {args.variant} | {args.variant} ÷ bertkit |")
    print("|---|---|---|")
    print(f"| {rate['bertkit']:.1f} examples/s | {rate[args.variant]:.1f} examples/s | "
          f"{rate[args.variant] / rate['bertkit']:.3f} |")


if __name__ == "__main__":
    main()
