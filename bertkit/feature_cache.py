"""Tokenised features cached on disk and reused across runs.

`cached_map(examples, function, identity)` is `examples.map(function, batched=True)` whose result is stored as an
Arrow file under the cache folder, named by a hash of everything that decides it: the examples' content, the
tokenizer (its full serialised form and the inputs it gives), and `identity` (adapter class, max length, window
settings, bertkit's version). A second run with the same data and settings memory-maps that file instead of
tokenising again.

Folder: `$BERTKIT_CACHE`, else `$XDG_CACHE_HOME/bertkit/features`, else `~/.cache/bertkit/features`;
`BERTKIT_CACHE=off` keeps everything in memory, and so does a folder the file system refuses (a home that cannot be
written, as in a container run under another user) or a disk too full to take an entry, said once. `datasets`
writes the file under a temporary name and renames it, so an interrupted run never leaves a half-written cache entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from pathlib import Path

import datasets
import pyarrow as pa

from .utils import say

FORMAT = 2  # bump when an adapter's encoding changes, so old cache entries are not reused (2: NER's bare '▁' pieces)


_OFF = [False]  # `disable()`: this process caches nothing (a server's request batches)
_WRITABLE: dict[Path, bool] = {}  # folder → whether cache files can be written there (checked once a process)


def disable() -> None:
    """No cache for the rest of this process (without touching its environment)."""
    _OFF[0] = True


def cache_dir() -> Path | None:
    if _OFF[0]:
        return None
    value = os.environ.get("BERTKIT_CACHE")
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "none", "false") else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bertkit" / "features"


def writable(folder: Path) -> bool:
    """Whether cache files can be written in `folder` (made where missing); where the file system refuses, said once,
    and the run goes on with its features in memory."""
    if folder not in _WRITABLE:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
            _WRITABLE[folder] = True
        except OSError as e:
            _WRITABLE[folder] = False
            say(f"feature cache off: {folder} cannot be written ({e.strerror or e}); tokenised features stay in "
                "memory (BERTKIT_CACHE names another folder)")
    return _WRITABLE[folder]


def held_open(folder: Path) -> list[Path]:
    """The files in `folder` this process holds open, by Linux's /proc/self/fd (elsewhere none): after a failed
    `map`, the temporary file datasets did not remove (its `finalize` raised again on the full disk first)."""
    fds, folder = Path("/proc/self/fd"), folder.resolve()
    paths = []
    for fd in fds.iterdir() if fds.is_dir() else ():
        try:
            target = Path(os.readlink(fd))
        except OSError:  # closed since the listing
            continue
        if target.parent == folder and target.name.startswith("tmp"):
            paths.append(target)
    return paths


def content_hash(examples: datasets.Dataset, tokenizer, identity: dict) -> str:
    from . import __version__

    h = hashlib.sha256()
    table = examples.with_format("arrow")[:] if len(examples) else examples.data.table.slice(0, 0)  # visible rows
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    h.update(sink.getvalue())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    h.update((backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))).encode())
    h.update(json.dumps({**identity, "tokenizer": type(tokenizer).__name__, "format": FORMAT,
                         "inputs": list(getattr(tokenizer, "model_input_names", [])),  # token type ids or not
                         "bertkit": __version__}, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


def cached_map(examples: datasets.Dataset, function, tokenizer, identity: dict, desc: str | None = None,
               **kwargs) -> datasets.Dataset:
    folder = cache_dir()
    if folder is None or len(examples) == 0 or not writable(folder):
        return examples.map(function, batched=True, remove_columns=examples.column_names, desc=desc,
                            new_fingerprint=uuid.uuid4().hex, **kwargs)  # in memory; skip hashing the model
    key = content_hash(examples, tokenizer, identity)
    try:
        return examples.map(function, batched=True, remove_columns=examples.column_names, desc=desc,
                            new_fingerprint=key, cache_file_name=str(folder / f"{key}.arrow"),
                            load_from_cache_file=True, **kwargs)
    except OSError as e:  # a disk that fills: the features are a cache, the run goes on with them in memory
        _WRITABLE[folder] = False
        for leftover in held_open(folder):  # datasets' temporary: its clean-up met the same full disk and stopped
            leftover.unlink(missing_ok=True)
        say(f"feature cache off: {folder} could not take {key}.arrow ({e.strerror or e}); tokenised features stay "
            "in memory")
        return cached_map(examples, function, tokenizer, identity, desc, **kwargs)
