"""Evaluation on accelerate's data path: every process runs its share of the batches through the (possibly
distributed) model, the outputs are gathered, and every process gets all of them back in input order.

    prepared eval DataLoader (equal batch counts on every process)
      → model(**inputs) → outputs [batch, (seq,) ...]
      → pad_across_processes (sequence outputs differ in length between processes)
      → gather_for_metrics (drops the repeated rows that completed the last batch)
      → one dict per feature, cut to its own length (and reduced: `Task.output_reducer`), as
        `bertkit.inference.forward_all` returns them
"""

from __future__ import annotations

import numpy as np
import torch

from ..batching import unbatch
from .data import INDEX, eval_loader


@torch.no_grad()
def predict_features(accelerator, model, adapter, features, batch_size: int, buckets=()
                     ) -> list[dict[str, np.ndarray]]:
    """The adapter's `output_keys` for every feature, in input order (a sequence classifier's logits are
    (num_labels,), a token classifier's (length, num_labels); QA: each window's answer candidates). Collective: every
    process must call it. Mixed precision is the prepared model's own (accelerate's autocast). `buckets`: batches
    padded up to the training's length buckets (a compiled model then sees the shapes it compiled)."""
    loader = accelerator.prepare_data_loader(eval_loader(features, adapter, batch_size, accelerator.device, buckets))
    lengths = features["length"][:]  # a list: a datasets column reads one row at a time
    results: list = [None] * len(lengths)
    reduce = adapter.output_reducer(features)
    model.eval()
    for batch in loader:
        index = batch.pop(INDEX)  # [batch]
        out = model(**{k: v for k, v in batch.items() if k not in adapter.label_keys})
        got = {k: out[k] for k in adapter.output_keys}  # [batch, (seq,) ...]
        for k in adapter.sequence_outputs:
            got[k] = accelerator.pad_across_processes(got[k], dim=1)  # [batch, longest seq of any process, ...]
        got[INDEX] = index
        got = accelerator.gather_for_metrics(got)  # [rows of all processes, ...], repeats dropped
        arrays = {k: v.float().cpu().numpy() for k, v in got.items() if k != INDEX}
        unbatch(adapter, arrays, got[INDEX].tolist(), lengths, results, reduce)
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"evaluation: {len(missing)} features never came back (first: {missing[:5]})")
    return results
