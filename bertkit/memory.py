"""Peak memory of each phase of a run: the process's peak resident set and, on CUDA, torch's peak allocated and
reserved memory.

A daemon thread samples the resident set every 5 ms (Linux: /proc/self/statm) and keeps the highest value since the
phase began, so each phase gets its own peak without touching the kernel's own counter (`VmHWM`, which
`/usr/bin/time -v` and getrusage report: resetting it would hide the process's true peak from them). A peak shorter
than the sampling interval can be missed; the process's whole-run peak is also read from `VmHWM`. Where there is no
/proc (not Linux) the phases report the process's peak so far (getrusage). CUDA's peaks are reset per phase by
torch.

Example:
```python
>>> log = MemoryLog()
>>> with log.phase("load"):
...     buffer = bytearray(64 * 2**20)  # loading a model, say
>>> log.summary()["peak_rss_gib"] > 0
True
```
"""

from __future__ import annotations

import os
import re
import resource
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .errors import BertkitError

GIB = 1024**3
STATUS, STATM = Path("/proc/self/status"), "/proc/self/statm"
INTERVAL = 0.005  # seconds between samples
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _status_kib(field: str) -> int | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _rss_bytes() -> int | None:
    try:
        with open(STATM, "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return None


def rss_gib() -> float:
    """The resident set now."""
    got = _rss_bytes()
    return round(got / GIB, 3) if got is not None else float("nan")


def process_peak_gib() -> float:
    """The process's peak resident set since it started (the kernel's VmHWM; getrusage where there is no /proc)."""
    kib = _status_kib("VmHWM")
    if kib is None:  # not Linux: ru_maxrss is KiB on Linux, bytes on macOS
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1024 if sys.platform == "darwin" else 1)
    return round(kib * 1024 / GIB, 3)


class _Sampler(threading.Thread):
    """The highest resident set seen since `reset`, sampled every INTERVAL seconds."""

    def __init__(self):
        super().__init__(name="bertkit-memory", daemon=True)
        self.high = _rss_bytes() or 0
        self.lock = threading.Lock()  # a sample read before a reset must not land after it

    def run(self) -> None:
        while True:
            self.sample()
            time.sleep(INTERVAL)

    def sample(self) -> None:
        with self.lock:
            now = _rss_bytes() or 0
            if now > self.high:
                self.high = now

    def reset(self) -> None:
        with self.lock:
            self.high = _rss_bytes() or 0

    def peak(self) -> int:
        return max(self.high, _rss_bytes() or 0)


_SAMPLER: list[_Sampler] = []


def _sampler() -> _Sampler | None:
    if not _SAMPLER and _rss_bytes() is not None:
        _SAMPLER.append(_Sampler())
        _SAMPLER[0].start()
    return _SAMPLER[0] if _SAMPLER else None


def reset_peak() -> bool:
    """Start a new peak from the resident set now; False where it cannot be sampled (then peaks are the
    process's so far)."""
    sampler = _sampler()
    if sampler is None:
        return False
    sampler.reset()
    return True


def peak_rss_gib() -> float:
    """The peak resident set since the last `reset_peak` (or since the process started)."""
    sampler = _sampler()
    return round(sampler.peak() / GIB, 3) if sampler is not None else process_peak_gib()


class MemoryLog:
    """Peak memory per named phase (a phase seen twice keeps its highest peak); `device` decides whether CUDA's
    peaks are read too."""

    def __init__(self, device=None):
        self.cuda = getattr(device, "type", None) == "cuda"
        self.phases: dict[str, dict] = {}
        self.resets = reset_peak()

    def reset_peak(self) -> None:
        """Start a new peak (the next `record` names the phase since now)."""
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        if self.resets:
            reset_peak()

    @contextmanager
    def phase(self, name: str):
        self.reset_peak()
        try:
            yield
        finally:
            self.record(name)

    def record(self, name: str) -> dict:
        """The peaks since the phase began, kept under `name` (the highest of its stretches); returns this
        stretch's."""
        got = {"peak_rss_gib": peak_rss_gib()}
        if self.cuda:
            import torch

            got.update(cuda_allocated_gib=round(torch.cuda.max_memory_allocated() / GIB, 3),
                       cuda_reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 3))
        old = self.phases.get(name, {})
        self.phases[name] = {k: max(v, old.get(k, v)) for k, v in got.items()}
        return got

    def summary(self) -> dict:
        """{peak_rss_gib (the highest of the phases), (cuda peaks), phases: {name: peaks}, per_phase: bool}."""
        out = {"peak_rss_gib": max((p["peak_rss_gib"] for p in self.phases.values()), default=peak_rss_gib())}
        if self.cuda:
            for key in ("cuda_allocated_gib", "cuda_reserved_gib"):
                out[key] = max(p[key] for p in self.phases.values())
        out["phases"] = dict(self.phases)
        out["per_phase"] = self.resets  # False: each phase's figure is the process's peak so far
        out["process_peak_gib"] = process_peak_gib()
        return out

    def summary_of_every_process(self, accelerator) -> dict:
        """`summary`; with several processes each one's (`ranks`) and the highest peak (every process calls it)."""
        mine = self.summary()
        if accelerator.num_processes == 1:
            return mine
        from accelerate.utils import gather_object

        ranks = gather_object([mine])
        return {"peak_rss_gib": max(r["peak_rss_gib"] for r in ranks), "ranks": ranks}

    def line(self) -> str:
        """One line for the end of a run: the peak and the phase that reached it."""
        s = self.summary()
        phase = max(self.phases, key=lambda k: self.phases[k]["peak_rss_gib"]) if self.phases else "run"
        cuda = f", CUDA {s['cuda_allocated_gib']} GiB allocated / {s['cuda_reserved_gib']} GiB reserved" \
            if self.cuda else ""
        return f"peak memory: {s['peak_rss_gib']} GiB resident (in {phase}){cuda}"


def parse_size(text: str, source: str = "memory_budget") -> int:
    """'8GB', '8 GiB', '7.5G', '512MB' → bytes (GB and GiB both mean 2**30 here, as `free -g` and the kernel count)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise BertkitError(f"{source}: '{text}' is not a memory size such as 8GB or 512MB")
    unit = (m.group(2) or "G").upper()[0]
    return int(float(m.group(1)) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[unit])
