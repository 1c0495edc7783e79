"""Figures for run reports: matplotlib drawing headless (Agg), saved atomically as PNG next to report.md."""

from __future__ import annotations

from pathlib import Path

from .utils import atomic_path


def plt():
    """matplotlib's pyplot, drawing headless (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def save_figure(fig, path: Path) -> str:
    """`fig` as a PNG at `path` (written atomically); returns its file name for report.md."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt().close(fig)
    return path.name
