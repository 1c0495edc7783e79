"""Streaming feature files: shards of rows + a JSONL index, written atomically; and a reader.

Layout of an output folder:
    index.jsonl        one line per sentence: {"id", "words", "shard", "start", "end"} (rows start:end); with pool
                       none also "row_words", the word (its index in "words") of each row, a word piece
    shard-00000.npy    float16/float32 rows [n_rows, (layers,) dim] (or .safetensors with tensor "features")
    meta.json          model, layers, combine, pool, dtype, dim, sentences, rows
Sentence-level pooling gives one row per sentence; word pooling one row per word; `none` one per piece.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import numpy as np

from ..errors import BertkitError
from ..utils import temporary_beside, write_error, written


class ShardWriter:
    def __init__(self, directory, sentence_level: bool, fmt: str = "npy", dtype: str = "float16",
                 shard_rows: int = 65536):
        if fmt not in ("npy", "safetensors"):
            raise BertkitError(f"--format {fmt!r}: expected npy or safetensors")
        if dtype not in ("float16", "float32"):
            raise BertkitError(f"--dtype {dtype!r}: expected float16 or float32")
        self.final = Path(directory)
        if self.final.exists() and (not self.final.is_dir() or any(self.final.iterdir())):
            raise BertkitError(f"output folder {self.final} is " + ("not empty" if self.final.is_dir() else "a file"))
        self.tmp = temporary_beside(self.final)  # a shared `.feats.tmp` let a second run remove the first's shards
        self.fmt, self.dtype, self.shard_rows = fmt, np.dtype(dtype), shard_rows
        self.sentence_level = sentence_level
        self.pending: list[np.ndarray] = []
        self.pending_rows, self.shard, self.rows, self.sentences = 0, 0, 0, 0
        self.index = None

    def begin(self) -> None:
        """Make the temporary folder the shards go to (beside the output, renamed onto it by `close`). Called inside
        the `try` whose handler calls `abort`, so that an interruption at any point removes it; `add` calls it
        when it has not been."""
        try:
            self.tmp.mkdir(parents=True)
        except OSError as e:  # the temporary folder beside it is made first: the output is what the user named
            raise BertkitError(f"cannot make the output folder {self.final}: {e.strerror or e}") from None
        self.index = open(self.tmp / "index.jsonl", "w")

    def add(self, sentence_id, words: list[str], features: np.ndarray, extra: dict | None = None) -> None:
        if self.index is None:
            self.begin()
        rows = features[None] if self.sentence_level else features  # [rows, (layers,) dim]
        start = self.pending_rows
        self.pending.append(rows.astype(self.dtype))
        self.pending_rows += len(rows)
        try:  # not `written`: a context manager per sentence would weigh on the hot path
            self.index.write(json.dumps({"id": sentence_id, "words": words, "shard": self.shard, "start": start,
                                         "end": self.pending_rows, **(extra or {})}) + "\n")
        except OSError as e:  # a full disk met by the index's buffer: the output asked for is named
            raise (write_error(e, self.final) or e) from e
        self.sentences += 1
        if self.pending_rows >= self.shard_rows:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        rows = np.concatenate(self.pending)
        name = self.tmp / f"shard-{self.shard:05d}.{self.fmt}"
        with written(self.final):
            if self.fmt == "npy":
                np.save(name, rows)
            else:
                from safetensors.numpy import save_file

                save_file({"features": rows}, str(name))
        self.rows += len(rows)
        self.pending, self.pending_rows, self.shard = [], 0, self.shard + 1

    def close(self, meta: dict) -> Path:
        """Write the last shard and meta.json, then rename the folder into place."""
        if self.index is None:
            self.begin()
        self._flush()
        with written(self.final):
            self.index.close()
            (self.tmp / "meta.json").write_text(json.dumps({**meta, "dtype": str(self.dtype), "format": self.fmt,
                                                            "sentence_level": self.sentence_level,
                                                            "sentences": self.sentences, "rows": self.rows},
                                                           indent=2))
        try:
            if self.final.exists():
                self.final.rmdir()  # empty when this run began (checked in __init__); not when another wrote it since
            self.tmp.rename(self.final)
        except OSError as e:
            self.abort()
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise OSError(e.errno, e.strerror, str(self.final)) from None  # named by the path asked for
            raise BertkitError(f"output folder {self.final} is not empty: another run wrote it while this one "
                               "ran") from None
        return self.final

    def abort(self) -> None:
        """Remove the temporary folder, whatever was made of it."""
        if self.index is not None:
            self.index.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class FeatureReader:
    """Random access to an extracted folder: `reader[i]` → (words, array); shards are memory-mapped (npy)."""

    def __init__(self, directory):
        self.dir = Path(directory)
        if not (self.dir / "meta.json").is_file():
            raise BertkitError(f"{self.dir} is not a bertkit feature folder (no meta.json)")
        self.meta = json.loads((self.dir / "meta.json").read_text())
        self.index = [json.loads(line) for line in (self.dir / "index.jsonl").read_text().splitlines()]
        self._shards: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.index)

    def _shard(self, k: int) -> np.ndarray:
        if k not in self._shards:
            path = self.dir / f"shard-{k:05d}.{self.meta['format']}"
            if self.meta["format"] == "npy":
                self._shards[k] = np.load(path, mmap_mode="r", allow_pickle=False)
            else:
                from safetensors.numpy import load_file

                self._shards[k] = load_file(str(path))["features"]
        return self._shards[k]

    def __getitem__(self, i: int) -> tuple[list[str], np.ndarray]:
        entry = self.index[i]
        rows = self._shard(entry["shard"])[entry["start"]: entry["end"]]
        return entry["words"], (rows[0] if self.meta["sentence_level"] else rows)

    def __iter__(self):
        return (self[i] for i in range(len(self)))
