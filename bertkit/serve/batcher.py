"""Dynamic batching for `bertkit serve`: requests that arrive together share one model call.

Requests wait in a bounded queue (counted in items: texts, sentences, questions). One worker takes them: as soon as
`max_batch` items are waiting, or `max_wait` seconds after the oldest one arrived, it hands up to `max_batch` items
(at least one whole request) to `run` on a single model thread, so the event loop keeps accepting, validating and
answering while the model computes. When more is waiting than one call takes (under load), a call takes the oldest
request and then those closest to it in length (characters per item; the same kind of request first), so that
its model batches pad little; the oldest is always in the next call, so no request waits behind newer ones for
ever. Inside the call the items are sorted by length into model batches and answered in their own order
(`Engine.run`). A full queue refuses a request at once
(`QueueFull`, HTTP 429 with Retry-After) instead of letting latency grow without bound; a request whose client has
gone is dropped from the queue before it costs any model time.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from .engine import Job


class QueueFull(Exception):
    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class Batcher:
    def __init__(self, run, max_batch: int, max_wait: float = 0.005, max_queue: int = 1024, executor=None):
        self.run, self.max_batch, self.max_wait, self.max_queue = run, max_batch, max_wait, max_queue
        self.pending: deque[tuple[Job, asyncio.Future, float]] = deque()
        self.queued = 0  # items waiting
        self.arrived = asyncio.Event()
        self.executor = executor or ThreadPoolExecutor(1, thread_name_prefix="bertkit-model")
        self.item_seconds = 0.01  # running estimate of model time per item, for Retry-After
        self.stats = {"accepted": 0, "answered": 0, "dropped": 0, "refused": 0, "batches": 0, "items": 0,
                      "model_seconds": 0.0}
        self.task: asyncio.Task | None = None
        self.busy = False  # a batch is on the model thread

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._work())

    def submit(self, job: Job) -> asyncio.Future:
        """Queue `job`; the future resolves to the job once it ran (its `result` or `error` set)."""
        n = len(job.items)
        if self.queued + n > self.max_queue:
            self.stats["refused"] += 1
            raise QueueFull(max(1, math.ceil((self.queued + n) * self.item_seconds)))
        future = asyncio.get_running_loop().create_future()
        self.pending.append((job, future, time.monotonic()))
        self.queued += n
        self.stats["accepted"] += 1
        self.arrived.set()
        return future

    async def _next_batch(self) -> list[tuple[Job, asyncio.Future]]:
        while not self.pending:
            self.arrived.clear()
            await self.arrived.wait()
        deadline = self.pending[0][2] + self.max_wait
        while self.queued < self.max_batch and (left := deadline - time.monotonic()) > 0:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except TimeoutError:
                break
        for entry in [e for e in self.pending if e[1].cancelled()]:  # clients that went away while they waited
            self.pending.remove(entry)
            self.queued -= len(entry[0].items)
            self.stats["dropped"] += 1
        order = list(range(len(self.pending)))
        if self.queued > self.max_batch:  # more than one call takes: the oldest, then the nearest in length
            first = self.pending[0][0]
            order[1:] = sorted(order[1:], key=lambda i: (self.pending[i][0].key != first.key,
                                                         abs(self.pending[i][0].size - first.size)))
        take, items = [], 0
        for i in order:
            n = len(self.pending[i][0].items)
            if take and items + n > self.max_batch:
                break
            take.append(i)
            items += n
        taken = set(take)
        batch = [self.pending[i][:2] for i in take]
        self.pending = deque(e for i, e in enumerate(self.pending) if i not in taken)  # the rest in arrival order
        self.queued -= items
        return batch

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            n = sum(len(job.items) for job, _ in batch)
            start, self.busy = time.perf_counter(), True
            try:
                await loop.run_in_executor(self.executor, self.run, [job for job, _ in batch])
            finally:
                self.busy = False
            seconds = time.perf_counter() - start
            self.item_seconds = 0.8 * self.item_seconds + 0.2 * seconds / n
            self.stats["model_seconds"] += seconds
            self.stats["batches"] += 1
            self.stats["items"] += n
            for job, future in batch:
                if not future.done():
                    future.set_result(job)

    async def close(self) -> None:
        """Finish what is queued (the server has stopped taking requests), then stop the worker and its thread."""
        for _ in range(6000):  # at most a minute: the server's own graceful shutdown waited for the requests
            if not self.pending and not self.busy:
                break
            await asyncio.sleep(0.01)
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)
