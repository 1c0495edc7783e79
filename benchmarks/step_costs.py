"""Where a batch-64 SST-2 training step's time goes: MFU by padded length, and the fixed cost of a step.

    python benchmarks/step_costs.py --steps 300

bertkit's training step (packaged MiniLM, fast dropout, fused QKV, the kept heap, AdamW groups, clipping, bf16
autocast) runs over the first `--steps` length-grouped SST-2 batches, timing forward+backward and clip+AdamW for
each step. Steps are binned by their padded length; each bin's MFU is its matmul FLOP (counted as mfu.py
counts them) over its seconds and the bf16 matmul peak measured after the run. Then the same step on a batch of
two 3-token rows gives the cost that does not grow with the batch (AdamW and clipping over all parameters, the
dense word-embedding gradient, weight casts, per-operation overhead).
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
from mfu import matmul_peak  # noqa: E402
from sst2_setup import make_step, sst2_features  # noqa: E402

from bertkit.batching import take_rows, train_batches  # noqa: E402
from bertkit.fast_dropout import fast_dropout  # noqa: E402
from bertkit.fused_qkv import fuse_qkv  # noqa: E402
from bertkit.heap import keep_heap  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/sst2")
    args = parser.parse_args()
    cfg, clf, features = sst2_features(args.data_dir)
    keep_heap()
    model = fuse_qkv(fast_dropout(clf.model).train())
    step = make_step(model, cfg)
    mc = model.config
    encoder = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and ".encoder." in n)

    bins: dict[int, list] = {}
    for i, idx in enumerate(train_batches(features["length"], args.batch_size, cfg.seed, 0, True)[: args.steps]):
        batch = clf.collate(take_rows(features, idx))
        fb, opt_s = step(batch)
        if i >= 10:  # the first steps warm up
            n, seq = batch["input_ids"].shape  # [batch, padded length]
            flop = n * seq * (6 * encoder + 12 * mc.num_hidden_layers * seq * mc.hidden_size)
            bins.setdefault(min(seq // 8, 6), []).append((flop, fb, opt_s))
    tiny = {"input_ids": torch.tensor([[101, 2000, 102]] * 2), "attention_mask": torch.ones(2, 3, dtype=torch.long),
            "token_type_ids": torch.zeros(2, 3, dtype=torch.long), "labels": torch.tensor([0, 1])}
    fixed = [step(tiny) for _ in range(40)][10:]
    peak, _ = matmul_peak()

    print(f"\nSST-2, batch {args.batch_size}, bf16, steps 11–{args.steps}; bf16 matmul peak {peak / 1e12:.3f} TFLOP/s")
    print("| padded length | steps | forward+backward, mean | clip+AdamW, mean | MFU |")
    print("|---|---|---|---|---|")
    total_flop = total_s = 0.0
    for b in sorted(bins):
        rows = bins[b]
        flop, secs = sum(r[0] for r in rows), sum(r[1] + r[2] for r in rows)
        total_flop, total_s = total_flop + flop, total_s + secs
        label = f"{8 * b}–{8 * b + 7}" if b < 6 else "48+"
        print(f"| {label} | {len(rows)} | {1000 * statistics.mean(r[1] for r in rows):.0f} ms | "
              f"{1000 * statistics.mean(r[2] for r in rows):.0f} ms | {100 * flop / secs / peak:.1f} % |")
    print(f"| all | {sum(len(r) for r in bins.values())} | | | **{100 * total_flop / total_s / peak:.1f} %** |")
    fb, opt_s = (1000 * statistics.median(f[k] for f in fixed) for k in (0, 1))
    print(f"\nA step on two 3-token rows (median of 30): forward+backward {fb:.1f} ms, clip+AdamW {opt_s:.1f} ms")


if __name__ == "__main__":
    main()
