"""The run folder, claimed by one run: made and locked (an advisory lock the system drops when the process ends, so
a killed run leaves no stale lock), unlocked when the run ends. A second run into a folder in use, or one that a run
finished into meanwhile, stops with one line before it writes; the default name, taken by a run started in the same
second, becomes <name>-2, -3, ... Where the filesystem has no such locks (Windows; NFS for a folder) the run goes on
with the emptiness check alone.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from ..errors import BertkitError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks on folders; the emptiness check alone
    fcntl = None


def not_empty(path) -> str:
    """The line for a run into a folder that holds files, without --resume."""
    return f"output folder {path} is not empty; pass --resume to continue it, or a new --output-dir"


def resumable(out: Path, seeds) -> None:
    """`--resume` into `out`: a folder that holds the other kind of run (one run / one per seed) is refused; the
    seeds' runs were written into a single run's folder, or a new run into a seeds folder, its report replaced."""
    if not out.is_dir():
        raise BertkitError(f"--resume: {out} does not exist (--resume continues the run in --output-dir)")
    per_seed = (out / "summary.json").is_file() or any(p.is_dir() for p in out.glob("seed-*"))
    one = (out / "config.yaml").is_file() or (out / "checkpoints").is_dir()
    if seeds and one and not per_seed:
        raise BertkitError(f"--resume --seeds: {out} holds one run, not one per seed (resume it without --seeds, or "
                           "give a new --output-dir)")
    if not seeds and per_seed and not one:
        names = sorted(p.name.removeprefix("seed-") for p in out.glob("seed-*") if p.is_dir())
        raise BertkitError(f"--resume: {out} holds one run per seed ({', '.join(names)}): give its --seeds again")


class RunFolder:
    """`with RunFolder(out, resume, renamable) as path:` the folder this run writes, held until the block ends."""

    def __init__(self, out, resume: bool = False, renamable: bool = False):
        self.out, self.resume, self.renamable = Path(out), resume, renamable
        self.path, self.fd, self.made = None, None, False

    def __enter__(self) -> Path:
        for n in itertools.count(1):
            path = self.out if n == 1 else self.out.with_name(f"{self.out.name}-{n}")
            made = not path.exists()
            try:
                path.mkdir(parents=True, exist_ok=True)
                error = self._take(path)
            except OSError as e:  # a folder that cannot be made or opened here (permissions, a file of that name)
                raise BertkitError(f"output folder {path}: {e.strerror or e}") from None
            if error is None:
                self.path, self.made = path, made
                return path
            if not self.renamable:
                raise BertkitError(error)

    def _take(self, path: Path) -> str | None:
        if fcntl is not None:
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return f"output folder {path} is in use by another run; wait for it to end, or give a new --output-dir"
            except OSError:  # a filesystem without such locks (NFS emulates flock with locks a folder cannot take)
                os.close(fd)
            else:
                self.fd = fd
        if self.resume or not any(path.iterdir()):
            return None
        self._release()
        return not_empty(path)

    def _release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops its lock
            self.fd = None

    def __exit__(self, *exc) -> None:
        if self.made and exc[0] is not None and self.path.is_dir() and not any(self.path.iterdir()):
            self.path.rmdir()  # a run that failed before writing leaves no folder it made
        self._release()
