"""Attention alone, forward + backward on CPU in bf16: bertkit's unfused path against torch's SDPA, by length.

    python benchmarks/attention_paths.py

MiniLM's shapes (12 heads of 32), half the rows padded to half length, the heap kept as in training. Four ways,
median of 6 timed calls each:
  unfused + fast dropout   bertkit's training path with attention dropout (matmul, softmax, FastDropout, matmul)
  SDPA, dropout 0.1        what Hugging Face runs with attention dropout (torch picks its kernel)
  unfused, no dropout      bertkit's training path with `--attention-dropout 0`
  SDPA, no dropout         what Hugging Face runs with `attention_probs_dropout_prob` 0 (torch's fused kernel)
The table shows why bertkit/fast_dropout.py trains with the unfused path on CPU (per row of the batch, in ms).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from bertkit.fast_dropout import attention
from bertkit.heap import keep_heap

SHAPES = ((64, 14), (64, 32), (32, 64), (32, 128), (24, 192), (16, 256), (16, 384))  # (batch, length)


TRAINING = torch.nn.Module().train()  # bertkit's attention takes its training path for a module in train mode


def unfused(q, k, v, mask, p):
    return attention(TRAINING, q, k, v, mask, dropout=p)[0]  # the code the Trainer runs on CPU


def sdpa(q, k, v, mask, p):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)


def per_row_ms(fn, batch: int, length: int, p: float) -> float:
    q, k, v = (torch.randn(batch, 12, length, 32, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.ones(batch, 1, length, length, dtype=torch.bool)
    mask[: batch // 2, :, :, length // 2:] = False  # padding
    times = []
    for _ in range(8):
        t = time.perf_counter()
        fn(q, k, v, mask, p).float().sum().backward()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times[2:]) / batch


def main() -> None:
    torch.manual_seed(0)
    keep_heap()  # as in training: large buffers reuse mapped pages instead of faulting fresh ones
    print("\nattention forward+backward on CPU, bf16, ms per row of the batch")
    print("| batch × length | unfused + fast dropout | SDPA, dropout 0.1 | unfused, no dropout | SDPA, no dropout |")
    print("|---|---|---|---|---|")
    for batch, length in SHAPES:
        cells = [per_row_ms(fn, batch, length, p) for p in (0.1, 0.0) for fn in (unfused, sdpa)]
        print(f"| {batch} × {length} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
