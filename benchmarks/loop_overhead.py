"""The training loop's own cost per step, without the step: data delivery and the loop's bookkeeping.

    python benchmarks/loop_overhead.py workers     # batches collated by two worker processes (as on a GPU)
    python benchmarks/loop_overhead.py inline      # collated in the training process (as on a CPU)
    python benchmarks/loop_overhead.py resident    # gathered from the training set collated once (--device-data on)

`bertkit finetune sst2 --model minilm-l6` (real SST-2, batch 32, 8 length buckets) for --steps steps with a step
whose backward and update do nothing, so its training seconds are what the loop costs around a step. On a GPU a
graphed step can be shorter than that: then the loop, not the model, bounds the run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_k, "1")
ROOT = Path(__file__).resolve().parents[1]

import torch  # noqa: E402


class NoStep:
    """A step that does nothing (the loop reads its loss sum and gradient statistics at each log line)."""

    kind = "eager"

    def __init__(self):
        self.loss_sum, self.grad_stats = torch.zeros(()), torch.zeros(4)

    def backward(self, batch) -> None:
        pass

    def update(self) -> bool:
        return True

    def summary(self) -> dict:
        return {}


def main(a) -> None:
    from bertkit.cli import main as cli
    from bertkit.training import data, loop

    loop.make_step = lambda *args, **kw: NoStep()
    if a.mode == "workers":  # as loader_options gives a CUDA device, less the pinned memory
        data.loader_options = lambda device: {"generator": torch.Generator().manual_seed(0), "num_workers": 2}
    out = Path(tempfile.mkdtemp("-loop")) / "run"
    assert cli(["finetune", "sst2", "--model", "minilm-l6", "--max-steps", str(a.steps), "--eval-every", "100000",
                "--save-every", "0", "--max-eval-samples", "32", "--length-buckets", "8", "--output-dir", str(out),
                "--data-dir", a.data_dir, "--device-data", "on" if a.mode == "resident" else "off"]) == 0
    train = json.loads((out / "metrics.json").read_text())["train"]
    print(f"RESULT {a.mode}: {train['steps']} steps in {train['train_seconds']} s, "
          f"{1e3 * train['train_seconds'] / train['steps']:.2f} ms a step")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["workers", "inline", "resident"])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "sst2"))
    main(p.parse_args())
