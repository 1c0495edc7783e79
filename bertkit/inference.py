"""Batched forward passes of one process (predict, evaluate, serve, notebooks), returned in the input order. Training
evaluates through accelerate instead (`bertkit.training.evaluation`), with the same output format."""

from __future__ import annotations

import numpy as np
import torch

from .batching import sorted_batches, take_rows, unbatch
from .device import autocast
from .graphs import GraphedForward, bucket_batch, budget_batches, on_gpu, sequences_per_row


@torch.no_grad()
def forward_all(adapter, features, batch_size: int, precision: str = "fp32", progress: bool = False
                ) -> list[dict[str, np.ndarray]]:
    """Run the adapter's model over tokenised `features` on the device it is on.

    Returns one dict per feature, in input order, of the adapter's `output_keys`, each cut to the feature's own
    length where it has a sequence axis: a sequence classifier's logits are (num_labels,), a token classifier's
    (length, num_labels), QA start/end logits (length,); an adapter with an `output_reducer` gets what that keeps
    (QA: each window's answer candidates). On a CPU, length-sorted batches of `batch_size`; on a GPU, batches by a
    token budget over a few lengths, replayed from CUDA graphs (`bertkit.graphs`; `batch_size` is not used there).
    """
    from tqdm.auto import tqdm

    model = adapter.model
    device = next(model.parameters()).device
    lengths = features["length"][:]  # a list: a datasets column reads one row at a time
    if on_gpu(device):
        per_row = sequences_per_row(take_rows(features, [0])[0]["input_ids"]) if lengths else 1  # SWAG's: 4
        batches = budget_batches(lengths, per_row=per_row)
        forward = graphed_forward(adapter, precision, device)
    else:
        batches, forward = [(idx, None, None) for idx in sorted_batches(lengths, batch_size)], None
    if any(m.training for m in model.modules()):  # eval() walks and sets every module (docs/speed.md)
        model.eval()
    results: list = [None] * len(lengths)
    reduce = adapter.output_reducer(features)
    pad_id = adapter.tokenizer.pad_token_id or 0
    for idx, length, rows in tqdm(batches, desc="evaluate", disable=not progress or None, leave=False, unit="batch"):
        batch = adapter.collate(take_rows(features, idx))
        batch = {k: v.to(device) for k, v in batch.items() if k not in adapter.label_keys}
        if forward is None:
            with autocast(precision, device):
                out = model(**batch)
        else:
            out = forward(bucket_batch(batch, length, rows, pad_id))
        arrays = {k: out[k][:len(idx)].float().cpu().numpy() for k in adapter.output_keys}  # [batch, (seq,) ...]
        unbatch(adapter, arrays, idx, lengths, results, reduce)
    return results


def graphed_forward(adapter, precision: str, device: torch.device) -> GraphedForward:
    """The adapter's model as a `GraphedForward` of its `output_keys`, kept on the adapter (one per precision)."""
    kept = adapter.__dict__.setdefault("_graphed_forwards", {})
    if precision not in kept:
        model, keys = adapter.model, adapter.output_keys

        def fn(inputs: dict) -> dict:
            with autocast(precision, device, cache=False):
                out = model(**inputs)
            return {k: out[k] for k in keys}

        kept[precision] = GraphedForward(fn)
    return kept[precision]
