"""Peak memory of each phase of a run: the process's peak resident set and, on CUDA, torch's peak allocated and
reserved memory.

On Linux the kernel keeps the peak resident set of a process (`VmHWM` in /proc/self/status) and resets it when
asked (writing 5 to /proc/self/clear_refs), so each phase gets its own peak; elsewhere the phases report the peak
so far (`resource.getrusage`, which cannot be reset). CUDA's peaks are reset per phase by torch.

Example:
```python
>>> log = MemoryLog()
>>> with log.phase("load"):
...     model = load()
>>> log.summary()["peak_rss_gib"] > 0
True
```
"""

from __future__ import annotations

import resource
import sys
from contextlib import contextmanager
from pathlib import Path

GIB = 1024**3
STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_gib() -> float:
    """The resident set now."""
    kib = _status_kib("VmRSS")
    return round(kib * 1024 / GIB, 3) if kib is not None else float("nan")


def peak_rss_gib() -> float:
    """The peak resident set since the last `reset_peak` (or since the process started)."""
    kib = _status_kib("VmHWM")
    if kib is None:  # not Linux: ru_maxrss is KiB on Linux, bytes on macOS
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1024 if sys.platform == "darwin" else 1)
    return round(kib * 1024 / GIB, 3)


def reset_peak() -> bool:
    """Start a new peak from the resident set now; False where the kernel does not offer it."""
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


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

    def record(self, name: str) -> None:
        """The peaks since the phase began, kept under `name`."""
        got = {"peak_rss_gib": peak_rss_gib()}
        if self.cuda:
            import torch

            got.update(cuda_allocated_gib=round(torch.cuda.max_memory_allocated() / GIB, 3),
                       cuda_reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 3))
        old = self.phases.get(name, {})
        self.phases[name] = {k: max(v, old.get(k, v)) for k, v in got.items()}

    def summary(self) -> dict:
        """{peak_rss_gib (the highest of the phases), (cuda peaks), phases: {name: peaks}, per_phase: bool}."""
        out = {"peak_rss_gib": max((p["peak_rss_gib"] for p in self.phases.values()), default=peak_rss_gib())}
        if self.cuda:
            for key in ("cuda_allocated_gib", "cuda_reserved_gib"):
                out[key] = max(p[key] for p in self.phases.values())
        out["phases"] = dict(self.phases)
        out["per_phase"] = self.resets  # False: each phase's figure is the process's peak so far
        return out

    def line(self) -> str:
        """One line for the end of a run: the peak and the phase that reached it."""
        s = self.summary()
        phase = max(self.phases, key=lambda k: self.phases[k]["peak_rss_gib"]) if self.phases else "run"
        cuda = f", CUDA {s['cuda_allocated_gib']} GiB allocated / {s['cuda_reserved_gib']} GiB reserved" \
            if self.cuda else ""
        return f"peak memory: {s['peak_rss_gib']} GiB resident (in {phase}){cuda}"
