"""Experiment trackers (`--report-to`): accelerate's, checked up front because accelerate silently drops a
tracker whose package is missing."""

from __future__ import annotations

from .errors import BertkitError


def check_trackers(names: list[str]) -> None:
    """accelerate silently drops a tracker that is not installed: say so instead."""
    if not names:
        return
    from accelerate.tracking import get_available_trackers
    from accelerate.utils import LoggerType

    known, available = {t.value for t in LoggerType} - {"all"}, {str(getattr(t, "value", t)) for t in
                                                               get_available_trackers()}
    for name in names:
        if name not in known:
            raise BertkitError(f"--report-to {name}: unknown tracker (accelerate knows: {', '.join(sorted(known))})")
        if name not in available:
            install = "'bertkit[trackers]'" if name == "tensorboard" else name  # the extra holds the tested floor
            raise BertkitError(f"--report-to {name}: the {name} package is not installed (pip install {install})")
