"""Shared start of the ONNX benchmarks: a fine-tuned run exported to ONNX fp32 and int8 (once; reused from
`--exports` when already there), and SST-2 dev sentences."""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.data.readers import read_rows
from bertkit.export.onnx import export_onnx


def exports(run: str, folder: str, per_tensor: bool = False) -> list[Path]:
    """Export folders of `run` under `folder`, exported unless they exist: fp32, int8 (per-channel scales, the
    default) and with `per_tensor` int8 with one scale per matrix."""
    out = []
    todo = [("fp32", None, True), ("int8", "int8", True)]
    todo += [("int8-per-tensor", "int8", False)] if per_tensor else []
    for name, quantize, per_channel in todo:
        target = Path(folder) / name
        if not (target / "export.json").is_file():
            export_onnx(run, target, quantize=quantize, per_channel=per_channel)
        out.append(target)
    return out


def default_data_dir() -> str:
    return os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"), "sst2")


def dev_sentences(data_dir: str, n: int | None = None) -> list[str]:
    """The first `n` SST-2 dev sentences (all 872 by default)."""
    rows = read_rows(os.path.join(data_dir, "dev.tsv"))
    return [r["sentence"].strip() for _, r in rows[:n]]
