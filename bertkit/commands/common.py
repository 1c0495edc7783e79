"""Pieces shared by the inference commands (evaluate, predict)."""

from __future__ import annotations

import argparse
import contextlib

from ..errors import BertkitError


def positive(kind=int):
    """An argparse type: a number of `kind` above 0; anything else is argparse's one line and exit 2 (a batch of 0
    would fail deep inside, after the model loaded)."""
    def parse(text: str):
        value = kind(text)
        if not value > 0:  # NaN too
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse's "invalid int value: 'x'"
    return parse


def add_inference_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a fine-tuned run folder, or a fine-tuned checkpoint's folder or "
                                                  "hub id (e.g. textattack/bert-base-uncased-SST-2)")
    p.add_argument("--batch-size", type=positive(), default=128, help="examples per batch (default 128)")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="auto = fp32 for a run that trained in fp32 (its own numbers), else bf16 where the "
                        "hardware computes it natively and faster, else fp32 (fp16 on older GPUs)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="also load pickle (.bin) weights; only for checkpoints you trust")
    p.add_argument("--backend", default="auto", choices=["auto", "torch", "onnx"],
                   help="auto (default): ONNX Runtime on CPU for a `bertkit export` folder, torch for anything else")


def resolve_backend(backend: str, model: str) -> str:
    """`--backend auto`: onnx for a `bertkit export` folder (it has export.json), torch for anything else."""
    if backend != "auto":
        return backend
    from ..export.runtime import is_export

    return "onnx" if is_export(model) else "torch"


def load_for_inference(args):
    """The task matching the checkpoint's head, on the best device, with its resolved precision; for an export
    folder (`--backend auto` or onnx), the export's task answering through ONNX Runtime, and the export's
    precision."""
    from ..device import choose_precision, default_device, model_precision
    from ..precast import precast
    from ..tasks import load_task
    from ..tasks.saved import inference_precision

    if resolve_backend(getattr(args, "backend", "torch"), args.model) == "onnx":
        from ..export.runtime import load_onnx_task, read_export

        if args.precision not in ("auto", "fp32"):
            raise BertkitError(f"--precision {args.precision} is for the torch backend; an ONNX export runs as it "
                               "was exported (fp32, or int8 with bertkit export --quantize int8)")
        return load_onnx_task(args.model), read_export(args.model)["precision"]

    task = load_task(args.model, allow_pickle=args.allow_pickle)
    device = default_device()
    task.model.to(device).eval()
    asked = inference_precision(args.precision, args.model)
    precision = model_precision(choose_precision(asked, device), asked, task.model).precision
    precast(task.model, precision)  # the linear weights in bf16 once, not at every batch (same answers)
    return task, precision


def model_task(argv: list[str] | None):
    """(task class or None, error or None) of the `--model` on a command line: a run folder's, an export's or a
    checkpoint's head task; nothing is loaded but config files."""
    if not argv:
        return None, None
    model = next((a.split("=", 1)[1] for a in argv if a.startswith("--model=")), None)
    if model is None and "--model" in argv[:-1]:
        model = argv[argv.index("--model") + 1]
    if model is None:
        return None, None
    from ..tasks import checkpoint_task

    try:
        return checkpoint_task(model)[0], None
    except BertkitError as e:
        return None, str(e)


def task_flags(p: argparse.ArgumentParser, task, add) -> str | None:
    """`add()` the task's flags to `p`; one that the command has already (a task's option named `seed`, or
    `--output`) is the command's error, returned, and said by --help where the task's flags would be."""
    try:
        add()
        return None
    except (BertkitError, argparse.ArgumentError) as e:
        error = str(e) if isinstance(e, BertkitError) else f"the {task.name} task's flag {e}"
        p.add_argument_group("task options", f"not shown: {error}")
        return error


def quiet_libraries() -> None:
    """No progress bars or loading reports from transformers and datasets (a short command prints its result and
    nothing else; `--verbose` keeps them)."""
    import datasets
    import transformers

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def plain_library_logs() -> None:
    """transformers' messages without terminal colour codes (its load report writes them whatever the stream): for
    a log, where they are noise. The formatter of transformers' own handler is wrapped; the messages are kept."""
    import logging
    import re

    from transformers.utils import logging as hf_logging

    class Plain(logging.Formatter):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def format(self, record):
            return re.sub(r"\x1b\[[0-9;]*m", "", (self.inner or logging.Formatter()).format(record))

    for handler in hf_logging.get_logger().handlers:
        if not isinstance(handler.formatter, Plain):
            handler.setFormatter(Plain(handler.formatter))


def output_file(path: str | None, read: str | None = None) -> None:
    """Said before any work is done: `--output` names a file, and a folder there could not be replaced by one, nor
    the input file `read` (its answers would replace it)."""
    from pathlib import Path

    if path and Path(path).is_dir():
        raise BertkitError(f"--output {path} is a folder: give the path of a file to write")
    if path and read and read != "-" and Path(read).is_file() and Path(path).resolve() == Path(read).resolve():
        raise BertkitError(f"--output {path} is the input file: give another path (the answers would replace it)")


@contextlib.contextmanager
def open_output(output: str | None):
    """A text stream for predictions: `output` (written under a temporary name, renamed when the block ends without
    an error: never half-written) or standard output."""
    import sys

    from ..utils import atomic_path

    if not output:
        yield sys.stdout
        return
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as f:
        yield f
