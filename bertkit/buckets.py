"""Length buckets: a few sequence lengths that batches are padded up to, chosen from the data's own lengths.

A GPU replays one captured graph per input shape (`bertkit.training.graphed`); padding every batch to the longest of
its rows gives a run dozens of shapes, each seen a few times. Buckets give it a handful, each seen many times, at the
cost of the positions padded from a batch's longest row up to its bucket. They are chosen to make that cost least:

    minimise  Σ over batches  (bucket(longest) − longest),   at most `count` buckets, the largest = the longest batch

over the longest row of each training batch (rounded up to the pad multiple), by dynamic programming over the
distinct lengths (at most max_length / multiple of them). Padding positions are masked: outputs and losses are the
same, up to rounding.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter

import torch


def batch_longest(lengths, batches: list[list[int]], multiple: int = 1) -> list[int]:
    """The longest row of each batch, rounded up to a multiple of `multiple` (the collate's own padding)."""
    return [math.ceil(max(lengths[i] for i in b) / multiple) * multiple for b in batches if b]


def choose_buckets(longest: list[int], count: int) -> list[int]:
    """At most `count` bucket lengths, ascending, the last one max(longest), that pad `longest` (one value per
    batch) the least in total (module docstring)."""
    if not longest or count < 1:
        raise ValueError("buckets need at least one batch and one bucket")
    weights = sorted(Counter(longest).items())  # [(length, batches)] ascending
    values = [v for v, _ in weights]
    n = len(values)
    count = min(count, n)
    w_prefix, wv_prefix = [0], [0]
    for v, w in weights:
        w_prefix.append(w_prefix[-1] + w)
        wv_prefix.append(wv_prefix[-1] + w * v)

    def cost(i: int, j: int) -> int:  # distinct lengths i..j (inclusive) padded up to values[j]
        return values[j] * (w_prefix[j + 1] - w_prefix[i]) - (wv_prefix[j + 1] - wv_prefix[i])

    # best[k][j]: least padding of lengths 0..j with k buckets, the last one at values[j]
    inf = float("inf")
    best = [[inf] * n for _ in range(count + 1)]
    back = [[-1] * n for _ in range(count + 1)]
    for j in range(n):
        best[1][j] = cost(0, j)
    for k in range(2, count + 1):
        for j in range(n):
            for i in range(j):  # the previous bucket ends at values[i]
                c = best[k - 1][i] + cost(i + 1, j)
                if c < best[k][j]:
                    best[k][j], back[k][j] = c, i
    k = min(range(1, count + 1), key=lambda k: best[k][n - 1])  # fewer buckets when more do not help
    chosen, j = [], n - 1
    while j >= 0 and k >= 1:
        chosen.append(values[j])
        j, k = back[k][j], k - 1
    return sorted(chosen)


def bucket_for(length: int, buckets: list[int]) -> int:
    """The smallest bucket that holds `length` (a length above the largest keeps its own)."""
    i = bisect.bisect_left(buckets, length)
    return buckets[i] if i < len(buckets) else length


def extra_padding(longest: list[int], buckets: list[int]) -> float:
    """Positions the buckets add, as a share of the positions batches padded to their longest row hold."""
    plain = sum(longest)
    return sum(bucket_for(n, buckets) for n in longest) / plain - 1 if plain else 0.0


def pad_to_length(batch: dict, length: int, pad_id: int, label_keys=(), sequence_labels: bool = False) -> dict:
    """`batch` with its sequence axis (the last one of `input_ids`: [batch, (choices,) pieces]) padded on the right to
    `length`: input ids with `pad_id`, every other input that has that axis (attention mask, token types) with 0,
    and the targets in `label_keys` with -100 (ignored by the loss) where they are per position
    (`sequence_labels`, e.g. NER's tags); other targets are left as they are."""
    ids = batch["input_ids"]
    have = ids.shape[-1]
    if have >= length:
        return batch
    out = {}
    for k, v in batch.items():
        per_position = isinstance(v, torch.Tensor) and v.dim() == ids.dim() and v.shape[-1] == have
        if per_position and (k not in label_keys or sequence_labels):
            value = pad_id if k == "input_ids" else -100 if k in label_keys else 0
            v = torch.nn.functional.pad(v, (0, length - have), value=value)
        out[k] = v
    return out
