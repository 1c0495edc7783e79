"""Training and evaluation batches as torch DataLoaders, for `accelerator.prepare` to shard across processes.

Training: `GroupedBatches` yields one epoch of bertkit's deterministic, length-grouped batch order
(`bertkit.batching.train_batches`, a function of (seed, epoch) only). Its batches vary in size (the last one of an
epoch is short), so it declares `batch_size = None`, and `drop_last = True`: with N processes accelerate gives each
process every N-th batch and drops the batches that do not divide evenly, so every process takes the same number
of steps. A resumed run replays the same order and skips the batches already trained on
(`accelerator.skip_first_batches`).

Evaluation: `SortedBatches` yields batches of similar length, longest first, all of `batch_size` but the last.
With N processes accelerate completes that last batch on every process with examples from the start, so that every
process runs the same number of forward passes (a process with nothing to do would otherwise leave the others
waiting in a collective); `accelerator.gather_for_metrics` drops those repeats again. Rows carry their index, so
outputs are put back in input order and checked to cover every feature exactly once.

On a GPU, batches are padded to a multiple of 8 (tensor-core friendly shapes), two worker processes collate them
and memory is pinned for the copy to the device.
"""

from __future__ import annotations

import math
import os

import torch
from torch.utils.data import DataLoader, Dataset

from ..batching import sorted_batches, train_batches
from ..buckets import bucket_for, pad_to_length
from .resident import Resident, ResidentRows, resident_collate, same_batches

INDEX = "_index"  # batch key of the rows' positions in the features (evaluation only)


class GroupedBatches:
    """One epoch of training batches in the (seed, epoch) order; `set_epoch` before iterating."""

    batch_size = None  # batches vary in size: accelerate must not pad or split them
    drop_last = True  # several processes: drop the batches that do not divide evenly among them

    def __init__(self, lengths, batch_size: int, seed: int, group_by_length: bool = True):
        self.lengths, self.size, self.seed, self.group = list(lengths), batch_size, seed, group_by_length
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        yield from train_batches(self.lengths, self.size, self.seed, self.epoch, self.group)

    def __len__(self) -> int:
        return math.ceil(len(self.lengths) / self.size)


class SortedBatches:
    """Evaluation batches: similar lengths together, longest first; all of `batch_size` but the last."""

    drop_last = False

    def __init__(self, lengths, batch_size: int):
        self.lengths, self.batch_size = list(lengths), batch_size

    def __iter__(self):
        yield from sorted_batches(self.lengths, self.batch_size)

    def __len__(self) -> int:
        return math.ceil(len(self.lengths) / self.batch_size)


class Rows(Dataset):
    """A features `datasets.Dataset` as torch's DataLoader reads it: a batch of rows in one Arrow take
    (`__getitems__`), each row with its index when `with_index`."""

    def __init__(self, features, with_index: bool = False):
        self.features, self.with_index = features, with_index

    def __len__(self) -> int:
        return len(self.features)

    def __getitems__(self, idx: list[int]) -> list[dict]:
        columns = self.features[idx]  # {column: [value per row]}
        rows = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
        if self.with_index:
            for row, i in zip(rows, idx, strict=True):
                row[INDEX] = i
        return rows


class Collate:
    """The adapter's collate (padding to the longest row, or to a multiple of 8), then up to the smallest of
    `buckets` that holds it (`bertkit.buckets`), keeping the rows' indices."""

    def __init__(self, adapter, buckets=()):
        self.collate, self.buckets = adapter.collate, list(buckets)
        self.pad_id = adapter.tokenizer.pad_token_id or 0
        self.label_keys, self.sequence_labels = tuple(adapter.label_keys), bool(adapter.sequence_outputs)

    def __call__(self, rows: list[dict]) -> dict:
        index = [row.pop(INDEX) for row in rows] if rows and INDEX in rows[0] else None
        batch = self.collate(rows)
        if self.buckets:
            length = bucket_for(batch["input_ids"].shape[-1], self.buckets)
            batch = pad_to_length(batch, length, self.pad_id, self.label_keys, self.sequence_labels)
        if index is not None:
            batch[INDEX] = torch.tensor(index)  # [batch]
        return batch


def loader_options(device: torch.device) -> dict:
    """Worker processes and pinned memory on a GPU; the CPU collates in the training process. Each loader has its
    own generator: torch draws a seed for every new iterator, which from the global generator would shift the
    dropout masks that follow (and a resumed run, which starts one more iterator, would train differently)."""
    options = {"generator": torch.Generator().manual_seed(0)}
    if device.type != "cuda":
        return options
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the workers are forked after the tokenizer ran
    return {**options, "num_workers": 2, "pin_memory": True, "worker_init_fn": ignore_interrupt}


def ignore_interrupt(worker_id: int) -> None:
    """A loader worker leaves Ctrl-C to the training process, which stops at a checkpoint (`launch.StopSignal`): a
    terminal's SIGINT reaches the workers too, and one that ended would fail the next batch the stop still takes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def train_loader(features, adapter, batch_size: int, seed: int, group_by_length: bool, device: torch.device,
                 buckets=(), lengths=None, multiple: int | None = None, device_data: str = "off",
                 processes: int = 1) -> tuple[DataLoader, GroupedBatches, Resident]:
    """The training DataLoader (to be prepared by accelerate), its batch order (to `set_epoch` on) and where its
    batches come from; batches padded up to `buckets` where given. `device_data` (auto, on, off): batches gathered
    from the training set collated once onto `device` (`resident.py`; auto: on one CUDA device) instead of collated
    per batch (on a GPU by worker processes)."""
    lengths = lengths if lengths is not None else features["length"][:]
    order = GroupedBatches(lengths, batch_size, seed, group_by_length)
    collate = Collate(adapter, buckets)
    resident = _resident(features, adapter, lengths, multiple, buckets, device, device_data, processes, order, collate)
    if resident.used:
        loader = DataLoader(ResidentRows(len(features)), batch_sampler=order, collate_fn=resident.gather,
                            generator=torch.Generator().manual_seed(0))
    else:
        loader = DataLoader(Rows(features), batch_sampler=order, collate_fn=collate, **loader_options(device))
    return loader, order, resident


def _resident(features, adapter, lengths, multiple, buckets, device, mode: str, processes: int, order, collate):
    if mode == "off":
        return Resident(False, "--device-data off")
    if mode == "auto" and device.type != "cuda":
        return Resident(False, f"no CUDA device ({device.type})")
    if processes > 1:
        return Resident(False, f"{processes} processes")
    gather, size = resident_collate(features, adapter, lengths, multiple, buckets, device)
    if gather is None:
        return Resident(False, size)
    order.set_epoch(0)
    differs = same_batches(gather, collate, features, list(order))
    if differs:
        return Resident(False, f"its batches are not the collate's: {differs}")
    return Resident(True, f"--device-data {mode}", size, gather)


def eval_loader(features, adapter, batch_size: int, device: torch.device, buckets=()) -> DataLoader:
    """An evaluation DataLoader whose batches carry each row's index under `INDEX` (padded up to `buckets`)."""
    return DataLoader(Rows(features, with_index=True), batch_sampler=SortedBatches(features["length"][:], batch_size),
                      collate_fn=Collate(adapter, buckets), **loader_options(device))
