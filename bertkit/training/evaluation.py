"""Evaluation on accelerate's data path: every process runs its share of the batches through the (possibly
distributed) model, the outputs are gathered, and every process gets all of them back in input order.

    prepared eval DataLoader (equal batch counts on every process)
      → model(**inputs) → outputs [batch, (seq,) ...]
      → pad_across_processes (sequence outputs differ in length between processes)
      → gather_for_metrics (drops the repeated rows that completed the last batch)
      → one dict per feature, cut to its own length (and reduced: `Task.output_reducer`), as
        `bertkit.inference.forward_all` returns them

Where the step is graphed (one CUDA device), evaluation is too: `forward_all`'s batches by a token budget over a
few lengths, each shape replayed from a CUDA graph of the run's own (`evaluation_graphs`), captured into the step's
memory pool (the two never run at once: evaluation's graphs reuse the step's free memory rather than keep their own
for the rest of the run), dropped when the run ends (a model change undone then would leave them replaying the
changed model's tensors).
"""

from __future__ import annotations

import numpy as np
import torch

from ..batching import unbatch
from .data import INDEX, eval_loader


def evaluation_graphs(plan, cfg, model, keys, precision: str, device: torch.device, capture=None):
    """(the `GraphedForward` evaluation during a run replays, or None; what the training line says of it). Graphed
    where the step is, except with --compile (evaluation batches padded to the compiled lengths instead) or
    --memory-budget (its plan sizes training's batches, not a token budget's). `capture`: the graphed step's
    `GraphCapture`, whose stream and memory pool evaluation's captures share."""
    if plan.kind != "graphed":
        return None, ""
    if cfg.compute.compile:
        return None, "evaluation eager (--compile: batches padded to the compiled lengths)"
    if cfg.compute.memory_budget:
        return None, "evaluation eager (--memory-budget: batches of --eval-batch-size)"
    from ..inference import forward_graphs

    return forward_graphs(model, keys, precision, device, capture), "evaluation graphed (batches by a token budget)"


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
