"""`StaticStep` captured in CUDA graphs and replayed: one graph per batch shape (the length buckets keep them few)
holding the whole step (forward, backward, clipping, AdamW) when every batch is an optimiser step; under gradient
accumulation, one graph of forward + backward per shape and one of clipping + AdamW. A replay launches all the
kernels of a step at once, where eager PyTorch spends Python time on each one: for a BERT-sized step far longer than
the GPU spends on the work (docs/speed.md, "On one GPU").

How (PyTorch's CUDA-graph notes): a shape runs eagerly on a side stream, twice for the first shape (cuBLAS workspaces,
lazy optimizer state), once for each later one, then is captured on that stream into a memory pool all graphs share
(they never run at once), then replayed with its batch copied into the graph's static input buffers. A whole-step
graph's gradients live in that pool: backward writes them and AdamW reads them, with no kernel a parameter adding them
to zeros; the fused AdamW clips them as it reads them (`fold_clipping`: one read of them fewer than scaling them
first). What a graph keeps between replays lives outside the pool: gradients under accumulation (zeroed in place),
AdamW's state and its tensor learning rates (the schedule fills them between replays), the summed loss and gradient
norms, fp16's loss scale (GradScaler's, made at the first warm-up, updated in place inside the graphs). Dropout draws
from the CUDA generator, which PyTorch advances at every replay (tests/test_gpu.py checks that two replays draw
different masks). A batch of another size (an epoch's last, short one) runs the same step eagerly. If a capture fails
(a model that reads a value on the host), the run goes on eagerly with the same step and says why once.
"""

from __future__ import annotations

import time
from collections import Counter

from ..graphs import GraphCapture, attention_for, signature
from .step import StaticStep, fold_clipping

WARMUP = (2, 1)  # eager runs before a capture: the first shape seen (lazy optimizer state, cuBLAS), each later one


class GraphedStep(StaticStep):
    kind = "graphed"

    def __init__(self, accelerator, model, optimizer, task, max_grad_norm: float, batch_size: int, log=print):
        super().__init__(accelerator, model, optimizer, task, max_grad_norm)
        for group in self.optimizer.param_groups:
            group["capturable"] = True  # AdamW refuses capture otherwise; its step counters are device tensors
        self.batch_size, self.log = batch_size, log
        self.whole = self.accumulation == 1  # one graph a shape holds the update too
        self.keep_gradients = not self.whole
        self.fold_clip = accelerator.device.type == "cuda" and fold_clipping(self.optimizer)
        self.updated = False  # the last backward's graph (or its warm-up) has made the update already
        self.capture = GraphCapture()  # the CUDA-specific piece, shared with graphed inference
        self.seen: Counter = Counter()  # eager runs per shape (and of the update) so far
        self.graphs: dict = {}  # signature → (replay, static inputs)
        self.update_graph = None
        self.failed: str | None = None  # why capturing stopped; the step then runs eagerly
        self.replays = 0
        self.setup_seconds = 0.0  # host time of the shapes' eager warm-ups and captures (a capture synchronises)
        self.capture_seconds = 0.0  # of which the captures

    def _work(self, inputs: dict) -> None:
        """What one shape's graph holds: the static step's backward (its attention kernels chosen by length), and its
        update when there is no accumulation."""
        with attention_for(inputs):
            StaticStep.backward(self, inputs)
        if self.whole:
            StaticStep.update(self)

    def backward(self, batch: dict) -> None:
        self.updated = False
        if self.failed or len(batch["input_ids"]) != self.batch_size:  # an epoch's last, short batch
            return super().backward(batch)
        key = signature(batch)
        if key not in self.graphs:
            t0 = time.perf_counter()
            self.seen[key] += 1
            if self.seen[key] <= WARMUP[key != next(iter(self.seen))]:  # (the first key seen: the first shape's)
                self.capture.run(self._work, batch)
                self.updated = self.whole
                self.setup_seconds += time.perf_counter() - t0
                return
            captured = self._capture(self._work, batch)
            self.setup_seconds += time.perf_counter() - t0
            if captured is None:
                return super().backward(batch)
            self.graphs[key] = captured
        replay, inputs = self.graphs[key]
        for k, v in batch.items():
            inputs[k].copy_(v, non_blocking=True)
        replay()
        self.replays += 1
        self.updated = self.whole

    def update(self) -> bool:
        if self.updated:  # done by the step's graph
            self.updated = False
            return True
        if self.failed or self.whole:  # (whole: a short batch's update, eagerly: its gradients are new tensors)
            return super().update()
        if self.update_graph is None:
            t0 = time.perf_counter()
            self.seen["update"] += 1
            if self.seen["update"] <= WARMUP[0]:
                done = self.capture.run(super().update)
                self.setup_seconds += time.perf_counter() - t0
                return done
            captured = self._capture(lambda _: StaticStep.update(self), {})
            self.setup_seconds += time.perf_counter() - t0
            if captured is None:
                return super().update()
            self.update_graph = captured[0]
        self.update_graph()
        self.replays += 1
        return True

    def _capture(self, fn, batch: dict):
        """(replay, its static inputs: copies of `batch`), or None when capture fails (the step then runs eagerly
        from here, and says why once)."""
        inputs = {k: v.clone() for k, v in batch.items()}
        t0 = time.perf_counter()
        try:
            return self.capture(fn, inputs), inputs
        except Exception as e:  # noqa: BLE001 - any failure: the eager step is always right
            if not self.keep_gradients:  # a backward captured before the failure left gradients no kernel filled
                self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:  # fp16: a failure inside the update left GradScaler's step half-way
                self.scaler._per_optimizer_states.clear()  # (a defaultdict: the next step starts afresh)
            self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            self.log(f"training step: CUDA graph capture failed ({self.failed}); the step runs eagerly from here "
                     "(the usual cause: a host tensor or a value read on the host in the model or in the task's "
                     "loss; docs/tasks.md)")
            return None
        finally:
            self.capture_seconds += time.perf_counter() - t0

    def summary(self) -> dict:
        """Graphs captured, replays, the seconds their shapes' warm-ups and captures took and of them the captures
        (part of the training time: an epoch's replays took the rest, less the eager short batches), and why
        capturing stopped (None: it did not)."""
        return {"graphs": len(self.graphs) + (self.update_graph is not None), "replays": self.replays,
                "setup_seconds": round(self.setup_seconds, 2),
                "capture_seconds": round(self.capture_seconds, 2), "capture_failed": self.failed}
