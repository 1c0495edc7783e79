"""Batched forward passes in length-sorted order, sharded across processes, returned in the input order."""

from __future__ import annotations

import numpy as np
import torch

from .batching import sorted_batches, take_rows
from .models import autocast


@torch.no_grad()
def forward_all(adapter, features, batch_size: int, precision: str = "fp32", accelerator=None, model=None,
                progress: bool = False) -> list[dict[str, np.ndarray]]:
    """Run the adapter's model (or `model`, e.g. a distributed wrapper of it) over tokenised `features`.

    Returns one dict per feature, in input order, of the adapter's `output_keys`, each cut to the feature's own
    length where it has a sequence axis: a sequence classifier's logits are (num_labels,), a token classifier's
    (length, num_labels), QA start/end logits (length,).
    """
    from tqdm.auto import tqdm

    model = model or adapter.model
    device = accelerator.device if accelerator else next(model.parameters()).device
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    lengths = features["length"]
    batches = sorted_batches(lengths, batch_size)[rank::world]
    model.eval()
    local: list[tuple[int, dict]] = []
    for idx in tqdm(batches, desc="evaluate", disable=not progress or None, leave=False, unit="batch"):
        batch = adapter.collate(take_rows(features, idx))
        batch = {k: v.to(device) for k, v in batch.items() if k not in adapter.label_keys}
        with autocast(precision, device):
            out = model(**batch)
        arrays = {k: out[k].float().cpu().numpy() for k in adapter.output_keys}  # [batch, (seq,) ...] padded
        for j, i in enumerate(idx):
            local.append((i, {k: a[j, : lengths[i]] if k in adapter.sequence_outputs else a[j]
                              for k, a in arrays.items()}))
    if world > 1:
        from accelerate.utils import gather_object

        gathered = gather_object(local)  # every example exactly once: the shards are disjoint
    else:
        gathered = local
    results: list = [None] * len(lengths)
    for i, out in gathered:
        results[i] = out
    return results
