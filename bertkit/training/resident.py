"""Training data resident on the device: the encoded training set collated once into tensors on the GPU, and each
batch gathered there (`index_select`, then cut to its length), where worker processes would otherwise collate every
batch and send it over: on a GPU a graphed step is shorter than receiving its batch from a worker.

    tensors   every feature collated by the task's own `collate`, padded on the right to the longest (as
              `bertkit.buckets.pad_to_length` pads), one tensor per batch key: [features, (choices,) longest]
    a batch   rows `idx` of every tensor, cut to the length the worker's collate would have padded them to: their
              longest row, rounded up to the pad multiple, then up to its length bucket

The batch order is the same (`GroupedBatches`), so are the batches: the first ones are compared with the worker
path's, bit for bit, before the run relies on it; a task whose collate does more than pad (random masking) fails
that comparison and keeps the workers. Where it is used is said on the training line (`Resident.describe`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..batching import take_rows
from ..buckets import bucket_for, pad_to_length

CHUNK = 4096  # features collated at a time while building the tensors
SHARE = 0.1  # of the device's free memory the tensors may take
CHECKED = 8  # first batches compared with the worker path's


@dataclass
class ResidentRows:
    """The "dataset" of a resident loader: a batch of positions is its own rows (the collate gathers them)."""

    n: int

    def __len__(self) -> int:
        return self.n

    def __getitems__(self, idx: list[int]) -> list[int]:
        return idx


class GatherBatches:
    """collate_fn of a resident loader: positions → the batch, gathered on the tensors' device."""

    def __init__(self, tensors: dict, per_position: set, lengths: list[int], multiple: int, buckets=()):
        self.tensors, self.per_position, self.lengths = tensors, per_position, lengths
        self.multiple, self.buckets = multiple, list(buckets)
        self.device = next(iter(tensors.values())).device

    def __call__(self, idx: list[int]) -> dict:
        longest = math.ceil(max(self.lengths[i] for i in idx) / self.multiple) * self.multiple
        length = bucket_for(longest, self.buckets) if self.buckets else longest
        rows = torch.tensor(idx)  # [batch]
        if self.device.type == "cuda":  # copied without waiting for the device (a pageable copy would)
            rows = rows.pin_memory().to(self.device, non_blocking=True)
        return {k: (t[..., :length] if k in self.per_position else t).index_select(0, rows)  # a contiguous copy
                for k, t in self.tensors.items()}  # [batch, (choices,) length] or [batch, ...]


def resident_collate(features, adapter, lengths: list[int], multiple: int | None, buckets, device: torch.device):
    """(GatherBatches over `features` collated onto `device`, its size in bytes), or (None, why not)."""
    if not len(features):
        return None, "no training features"
    multiple = multiple or 1
    longest = math.ceil(max(lengths) / multiple) * multiple
    pad_id = adapter.tokenizer.pad_token_id or 0
    label_keys, sequence_labels = tuple(adapter.label_keys), bool(adapter.sequence_outputs)
    parts: dict[str, list] = {}
    for start in range(0, len(features), CHUNK):
        batch = adapter.collate(take_rows(features, list(range(start, min(start + CHUNK, len(features))))))
        for k, v in pad_to_length(batch, longest, pad_id, label_keys, sequence_labels).items():
            if not isinstance(v, torch.Tensor):
                return None, f"the collate's '{k}' is not a tensor"
            parts.setdefault(k, []).append(v)
    try:
        tensors = {k: torch.cat(v) for k, v in parts.items()}  # [features, ...]
    except RuntimeError as e:  # a collate whose shapes differ between chunks beyond the sequence axis
        return None, f"the collate's batches do not stack ({str(e).splitlines()[0]})"
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        if size > SHARE * free:
            return None, f"{size / 2**30:.2f} GiB is more than {SHARE:.0%} of the device's free memory"
    ids = tensors["input_ids"]
    per_position = {k for k, v in tensors.items() if v.dim() == ids.dim() and v.shape[-1] == longest
                    and (k not in label_keys or sequence_labels)}  # what pad_to_length pads
    tensors = {k: v.to(device) for k, v in tensors.items()}
    return GatherBatches(tensors, per_position, lengths, multiple, buckets), size


def same_batches(gather: GatherBatches, collate, features, batches: list[list[int]]) -> str | None:
    """None when `gather` gives the batches `collate` (the worker path's) gives for the first `CHECKED` of
    `batches`, bit for bit; else what differs."""
    for idx in batches[:CHECKED]:
        want, got = collate(take_rows(features, idx)), gather(idx)
        if set(want) != set(got):
            return f"keys {sorted(got)} where the collate gives {sorted(want)}"
        for k, v in want.items():
            g = got[k].cpu()
            if g.shape != v.shape or g.dtype != v.dtype or not torch.equal(g, v):
                return f"'{k}' differs from the collate's ({tuple(g.shape)} vs {tuple(v.shape)})"
    return None


@dataclass(frozen=True)
class Resident:
    """Whether the training data is resident on the device, and why (or why not)."""

    used: bool
    reason: str
    size: int = 0  # bytes
    gather: GatherBatches | None = None

    def describe(self) -> str:
        if self.used:
            return f"data on the device ({self.size / 2**20:.0f} MiB, {self.reason})"
        return f"data from the loader ({self.reason})"
