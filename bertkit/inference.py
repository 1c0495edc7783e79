"""Batched forward passes of one process (predict, evaluate, notebooks) in length-sorted order, returned in the input
order. Training evaluates through accelerate instead (`bertkit.training.evaluation`), with the same output format."""

from __future__ import annotations

import numpy as np
import torch

from .batching import sorted_batches, take_rows, unbatch
from .device import autocast


@torch.no_grad()
def forward_all(adapter, features, batch_size: int, precision: str = "fp32", progress: bool = False
                ) -> list[dict[str, np.ndarray]]:
    """Run the adapter's model over tokenised `features` on the device it is on.

    Returns one dict per feature, in input order, of the adapter's `output_keys`, each cut to the feature's own
    length where it has a sequence axis: a sequence classifier's logits are (num_labels,), a token classifier's
    (length, num_labels), QA start/end logits (length,); an adapter with an `output_reducer` gets what that keeps
    (QA: each window's answer candidates).
    """
    from tqdm.auto import tqdm

    model = adapter.model
    device = next(model.parameters()).device
    lengths = features["length"]
    batches = sorted_batches(lengths, batch_size)
    if any(m.training for m in model.modules()):  # eval() walks and sets every module: ~0.25 ms a call
        model.eval()
    results: list = [None] * len(lengths)
    reduce = adapter.output_reducer(features)
    for idx in tqdm(batches, desc="evaluate", disable=not progress or None, leave=False, unit="batch"):
        batch = adapter.collate(take_rows(features, idx))
        batch = {k: v.to(device) for k, v in batch.items() if k not in adapter.label_keys}
        with autocast(precision, device):
            out = model(**batch)
        arrays = {k: out[k].float().cpu().numpy() for k in adapter.output_keys}  # [batch, (seq,) ...] padded
        unbatch(adapter, arrays, idx, lengths, results, reduce)
    return results
