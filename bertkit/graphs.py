"""Inference forwards on a GPU: batches by a token budget over a few fixed lengths, each shape replayed from a CUDA
graph (`predict`, `evaluate`, `serve`, `extract`).

A forward pass of a small encoder on a GPU is mostly Python launching kernels (MiniLM's at 64 sentences: launching
takes longer than the GPU work; docs/speed.md, "On one GPU"). So on a GPU inference batches are

    lengths padded up to the next of `BUCKETS` (multiples of 16 growing by at most half: at most a third padding)
    rows per batch = TOKEN_BUDGET // (length × the sequences in a row: one per ending for multiple choice),
                     the last batch of a length topped up with empty rows

which gives few shapes, each run many times with thousands of positions; each shape is captured once into a CUDA
graph (after one eager warm-up run) and replayed. Empty rows attend to their first position only and their outputs
are dropped. A capture that fails (a model that reads a value on the host) leaves that forward eager, said once.
The CPU path (`bertkit.inference`) is unchanged: there, padding costs compute that launching does not.
"""

from __future__ import annotations

import bisect
import contextlib
import logging

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from .buckets import pad_to_length

log = logging.getLogger(__name__)
BUCKETS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
TOKEN_BUDGET = 16384  # positions per inference batch on a GPU


def on_gpu(device: torch.device) -> bool:
    """Whether inference on `device` takes this module's path (a CUDA device)."""
    return device.type == "cuda"


def budget_batches(lengths, tokens: int | None = None, buckets=BUCKETS,
                   per_row: int = 1) -> list[tuple[list[int], int, int]]:
    """[(rows of `lengths` in the batch, padded length, rows the batch is topped up to)], longest first: every row
    padded to the smallest bucket that holds it (a length above the largest keeps its own), `tokens` // (length ×
    `per_row`, the sequences a row holds) rows per batch; a length's last batch topped up to the next power of two
    (one request is not run as 512)."""
    tokens = TOKEN_BUDGET if tokens is None else tokens
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: dict[int, list[int]] = {}
    for i in order:
        k = bisect.bisect_left(buckets, lengths[i])
        groups.setdefault(buckets[k] if k < len(buckets) else lengths[i], []).append(i)
    batches = []
    for length, rows in groups.items():
        size = max(1, tokens // (length * per_row))
        for j in range(0, len(rows), size):
            part = rows[j:j + size]
            batches.append((part, length, min(size, 1 << (len(part) - 1).bit_length())))
    return batches


def sequences_per_row(input_ids) -> int:
    """The sequences one feature's `input_ids` hold: 1, or a multiple-choice example's endings ([choices][pieces];
    a batch's rows have as many, as its collate requires)."""
    return len(input_ids) if len(input_ids) and isinstance(input_ids[0], list | tuple) else 1


def pad_rows(batch: dict, rows: int, pad_id: int) -> dict:
    """`batch` ([batch, ...] tensors) topped up to `rows` rows: input ids `pad_id`, attention masks on the first
    position only (a row with no position to attend to gives NaN in fused attention), every other tensor 0."""
    have = len(batch["input_ids"])
    if have >= rows:
        return batch
    out = {}
    for k, v in batch.items():
        extra = torch.full((rows - have, *v.shape[1:]), pad_id if k == "input_ids" else 0, dtype=v.dtype,
                           device=v.device)
        if k == "attention_mask":
            extra[..., 0] = 1
        out[k] = torch.cat([v, extra])
    return out


def bucket_batch(batch: dict, length: int, rows: int, pad_id: int) -> dict:
    """A collated batch padded to `length` positions and `rows` rows (inputs only: no targets)."""
    return pad_rows(pad_to_length(batch, length, pad_id), rows, pad_id)


SHORT = 128  # positions up to which a graphed step's or forward's attention skips cuDNN's kernels (attention_for)


def attention_for(batch: dict):
    """The attention kernels a graphed training step or inference forward of `batch` ([batch, (choices,) positions]
    input ids) is warmed up and captured with: up to `SHORT` positions PyTorch's own (flash, memory-efficient, math),
    not cuDNN's, which plans every new shape on its first call (an eager warm-up a bucket) and ran the MiniLM's short
    SST-2 steps slower than those (docs/speed.md, "Fourth lent H100"); longer ones as PyTorch chooses."""
    if "input_ids" not in batch or batch["input_ids"].shape[-1] > SHORT:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def signature(batch: dict) -> tuple:
    """What a captured graph is specific to: every input's name, shape and dtype."""
    return tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(batch.items()))


class GraphCapture:
    """The only CUDA-specific piece of graphed inference and of the graphed training step
    (`bertkit.training.graphed`): a side stream, a memory pool all of its graphs share (they never run at once), and
    capture itself. Tests on a CPU replace it with one whose "graph" calls the function again on its inputs."""

    sync = True  # the device synchronised before and after a capture (benchmarks/gpu_profile.py's `nosync` arm: off)

    def __init__(self):
        self.stream = torch.cuda.Stream()
        self.pool = torch.cuda.graph_pool_handle()

    def run(self, fn, *args):
        """`fn` eagerly on the capture stream (a warm-up), ordered after and before the current stream's work."""
        current = torch.cuda.current_stream()
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            result = fn(*args)
        current.wait_stream(self.stream)
        return result

    def __call__(self, fn, inputs: dict):
        """A callable that replays `fn(inputs)` as captured and returns its outputs (the graph's own tensors);
        capturing runs nothing. As `torch.cuda.graph` does, less its emptying of the device's and the pinned host
        memory's caches first: a run captures a graph per shape, and each emptying frees blocks the next eager batch
        and the loader's pinned buffers allocate again."""
        graph = torch.cuda.CUDAGraph()
        if self.sync:
            torch.cuda.synchronize()
        try:
            with torch.cuda.stream(self.stream):
                # thread_local: the DataLoader's pin-memory thread may call CUDA while this thread captures
                graph.capture_begin(self.pool, capture_error_mode="thread_local")
                try:
                    outputs = fn(inputs)
                finally:
                    graph.capture_end()
        finally:
            if self.sync:
                torch.cuda.synchronize()

        def replay():
            graph.replay()
            return outputs

        return replay


class GraphedForward:
    """`fn(inputs) -> {name: tensor}` (a no-grad forward) for a few fixed input shapes: the first call of a shape runs
    eagerly, the second captures it, later ones replay it with the inputs copied into the graph's buffers. The
    returned tensors are the graph's own: read them before the next call."""

    def __init__(self, fn, capture=None):
        self.fn, self.capture = fn, capture
        self.graphs: dict = {}  # shape → (replay, static inputs)
        self.seen: set = set()
        self.failed: str | None = None

    @torch.no_grad()
    def __call__(self, inputs: dict) -> dict:
        key = signature(inputs)
        if self.failed:
            return self.fn(inputs)
        if key not in self.graphs and key not in self.seen:
            self.seen.add(key)
            with attention_for(inputs):
                return self.fn(inputs)
        if key not in self.graphs:
            static = {k: v.clone() for k, v in inputs.items()}
            try:
                self.capture = self.capture or GraphCapture()
                with attention_for(inputs):
                    self.graphs[key] = (self.capture(self.fn, static), static)
            except Exception as e:  # noqa: BLE001 - the eager forward is always right
                self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                log.warning("inference: CUDA graph capture failed (%s); forwards run eagerly", self.failed)
                return self.fn(inputs)
        replay, static = self.graphs[key]
        for k, v in inputs.items():
            static[k].copy_(v, non_blocking=True)
        return replay()
