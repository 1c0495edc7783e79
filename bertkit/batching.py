"""Deterministic batch orders: length-grouped shuffles for training, length-sorted batches for inference.

The order of an epoch depends only on (seed, epoch), so a resumed run replays exactly the same batches.
"""

from __future__ import annotations

import numpy as np


def train_batches(lengths, batch_size: int, seed: int, epoch: int, group_by_length: bool = True,
                  megabatch: int = 50) -> list[list[int]]:
    """Shuffle, then (optionally) sort by length inside megabatches of `megabatch` batches, then shuffle batches.

    Grouping cuts padding (each batch holds similar lengths) while the batch order stays random.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if group_by_length:
        lengths = np.asarray(lengths)
        size = batch_size * megabatch
        chunks = [order[i:i + size] for i in range(0, len(order), size)]
        order = np.concatenate([c[np.argsort(-lengths[c], kind="stable")] for c in chunks])
    batches = [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    if group_by_length:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def sorted_batches(lengths, batch_size: int) -> list[list[int]]:
    """Batches of similar length (longest first) for inference; callers restore the original order."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]


class Columns(dict):
    """Feature columns as plain lists, indexed as a `datasets.Dataset` is (a column by name, rows by a list of
    positions): inputs too small to be worth an Arrow table (a prediction request) skip `datasets` altogether."""

    def __getitem__(self, key):
        if isinstance(key, list):
            return {name: [column[i] for i in key] for name, column in self.items()}
        return super().__getitem__(key)

    @property
    def column_names(self) -> list[str]:
        return list(self)


def take_rows(features, idx: list[int]) -> list[dict]:
    """Rows `idx` of a datasets.Dataset as dicts, in order, from one Arrow take (cheaper than row by row)."""
    columns = features[idx]  # {column: [value per row]}
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def unbatch(adapter, arrays: dict, idx: list[int], lengths, results: list, reduce=None) -> None:
    """Scatter one batch's outputs `arrays` ({key: [batch, (sequence,) ...]} padded, rows for features `idx`) into
    `results`: one dict per feature, cut to its length on the adapter's `sequence_outputs`, then `reduce`d
    (`Task.output_reducer`)."""
    for j, i in enumerate(idx):
        row = {k: a[j, : lengths[i]] if k in adapter.sequence_outputs else a[j] for k, a in arrays.items()}
        if results[i] is not None:
            raise RuntimeError(f"inference: feature {i} came back twice")
        results[i] = reduce(i, row) if reduce else row
