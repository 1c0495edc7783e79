"""Small helpers: atomic writes, seeding, package versions, a note on standard error."""

from __future__ import annotations

import codecs
import json
import os
import random
import secrets
import shutil
import sys
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path


def say(message: str) -> None:
    """`message` on standard error, once: under a launcher (torchrun, accelerate launch) by the first process only,
    where every process reads the same data and loads the same model."""
    if os.environ.get("RANK", "0") == "0":
        print(message, file=sys.stderr)


def temporary_beside(final: Path) -> Path:
    """A hidden name beside `final` that nothing has (`.name.<random>.tmp`), for a temporary of its own: one run's,
    which another run writing the same output does not share."""
    while (tmp := final.with_name(f".{final.name}.{secrets.token_hex(6)}.tmp")).exists():
        pass
    return tmp


WRITER_FAILED = r"PytorchStreamWriter|inline_container|iostream error|file write failed"  # torch's zip writer


def write_error(e: BaseException, final) -> OSError | None:
    """A failure to write `final` as the OSError naming it (the command's one line: the system's words and the path
    asked for), or None when `e` is not one: an OSError without a path (a full disk meets `write`), safetensors'
    "I/O error: ... (os error 28)" (0.4.3's: "IoError(Os { code: 28, ... })"), or a write that stopped short
    without an errno (torch's zip writer, numpy's `tofile`), where the disk's free space is said instead."""
    import errno
    import re

    def short() -> OSError:  # the library's write stopped short and kept no errno: the disk's room is the clue
        folder = next(p for p in Path(final).absolute().parents if p.exists())
        free = shutil.disk_usage(folder).free / 2**30
        return OSError(errno.EIO, f"could not be written in full ({free:.1f} GiB free on its disk)", str(final))

    text = str(e)
    if isinstance(e, OSError) and e.filename is None:
        return OSError(e.errno, e.strerror, str(final)) if e.errno else short()  # numpy's: "N requested, M written"
    if type(e).__name__ == "SafetensorError" and (number := re.search(r"os (?:error |\{ code: )(\d+)", text, re.I)):
        return OSError(int(number.group(1)), os.strerror(int(number.group(1))), str(final))
    if isinstance(e, RuntimeError) and re.search(WRITER_FAILED, text):
        return short()
    return None


@contextmanager
def written(final):
    """The block writes `final`: a failure to write (`write_error`) leaves it as the OSError naming `final`."""
    try:
        yield
    except Exception as e:
        error = write_error(e, final)
        if error is None:
            raise
        raise error from e


@contextmanager
def atomic_path(final: str | os.PathLike, is_dir: bool = False):
    """Yield a temporary path next to `final`; rename it onto `final` only if the block succeeds.

    Readers never see a half-written file or folder: on an exception the temporary is removed.
    """
    final = Path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # named by the path asked for, not by its temporary's
        raise OSError(e.errno, e.strerror, str(final)) from None
    tmp = temporary_beside(final)  # never another's: the `finally` below removes whatever is at `tmp`
    target = tmp if is_dir else tmp / final.name
    try:  # made inside the `try`: an interruption (Ctrl-C, SIGTERM) between making it and using it removes it too
        try:
            tmp.mkdir()  # the umask's permissions, as the folder it replaces would have
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(final)) from None
        with written(final):
            yield target
        if is_dir and final.exists():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            try:
                os.replace(final, old)
                os.replace(tmp, final)
            except BaseException:  # interrupted between the two: what was there is put back
                if not final.exists() and old.exists():
                    os.replace(old, final)
                raise
            finally:
                shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                os.replace(target, final)
            except OSError as e:  # e.g. a folder where the file goes: named by the path asked for
                raise OSError(e.errno, e.strerror, str(final)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def append_jsonl(path, obj) -> None:
    """Append one JSON line and flush it to disk (metric logs survive a crash line by line)."""
    with written(path), open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())


def set_seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


COMMAND = [""]  # the bertkit command line of this process, set by the CLI


def versions(*names: str) -> dict[str, str]:
    """{package: installed version, or 'not installed'}."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def package_versions() -> dict[str, str]:
    out = versions("bertkit", "torch", "transformers", "datasets", "evaluate", "accelerate", "scikit-learn",
                   "seqeval", "safetensors", "numpy", "tokenizers")
    import platform
    import sys

    out["python"] = platform.python_version()
    out["command"] = COMMAND[0] or " ".join(sys.argv)
    out["hardware"] = hardware()
    return out


def hardware() -> str:
    """CPU model and core count, and the GPU if one is used."""
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    desc = f"{cpu}, {os.cpu_count()} cores"
    if torch.cuda.is_available():
        desc += f", GPU {torch.cuda.get_device_name(0)}"
    return desc


def truncate_jsonl(path: Path, step: int) -> None:
    """Drop the lines of a step-indexed JSONL log written after `step` (they are replayed after a resume)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
    with atomic_path(path) as p:
        p.write_text("".join(line + "\n" for line in keep))


@contextmanager
def quiet_maps():
    """datasets' progress bars off for a call, then as they were: a notebook's `predict` of a few texts prints its
    answers, not a "Map" bar (as a transformers pipeline); also a decorator."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def as_list(texts) -> list:
    """A notebook's input as a list: one str is one input (not its characters), any other sequence its items."""
    if texts is None or not hasattr(texts, "__iter__"):
        from .errors import BertkitError

        raise BertkitError(f"expected an input or a list of inputs, got {type(texts).__name__}")
    return [texts] if isinstance(texts, str) else list(texts)


def not_utf8(raw: bytes, at: int) -> str:
    """What is wrong with bytes that are not UTF-8 at `at`: a file saved as UTF-16 (Windows' "Unicode") is named."""
    if at == 0 and raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "UTF-16 text (its byte-order mark says so): save it as UTF-8"
    return f"not UTF-8 text (byte 0x{raw[at]:02x})"


SURROGATE_ESCAPE = r"\\[uU][dD][89a-fA-F]"  # JSON's escape of a surrogate (a pair's half, or alone)
LONE_SURROGATE = "a lone surrogate (a \\uD800-\\uDFFF escape without its pair): not a Unicode character"


def lone_surrogate(value, where: str = "") -> str | None:
    """The path (`texts[2]`, `questions[0].context`) of the first string in parsed JSON `value` that holds a lone
    surrogate (JSON's `\\ud800` alone decodes to one: no encoder takes it, the tokenizer fails on it), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        path = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        if (found := lone_surrogate(item, path)) is not None:
            return found
    return None


def load_yaml(path):
    """A YAML file's value; a file that is not UTF-8 text or not YAML is one line naming the file and line."""
    import yaml

    from .errors import DataError

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        line = e.object[: e.start].count(b"\n") + 1
        raise DataError(not_utf8(e.object, e.start), file=str(path), line=line) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "context_mark", None) or getattr(e, "problem_mark", None)
        said = [str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x]
        raise DataError("not valid YAML: " + ("; ".join(said) or str(e).splitlines()[0]), file=str(path),
                        line=mark.line + 1 if mark else None) from None
