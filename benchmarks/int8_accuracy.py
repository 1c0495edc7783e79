"""What int8 costs in accuracy: a fine-tuned SST-2 run scored on the whole dev set (872 sentences) with torch
(fp32), ONNX Runtime fp32 and ONNX Runtime int8 (`bertkit export --quantize int8`: dynamic quantisation, int8
weights with a scale per output channel, activations quantised per batch; and, for comparison, one scale per
weight matrix), through the same task encoding and scoring as `bertkit evaluate`.
Prints the accuracies, the change against torch in points, the agreement with torch's labels and the largest logit
difference.

    bertkit finetune sst2 --model minilm-l6 --epochs 1 --output-dir runs/sst2        # the run to measure
    python benchmarks/int8_accuracy.py --model runs/sst2 --exports runs/sst2-exports
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
from onnx_setup import default_data_dir, exports  # noqa: E402

from bertkit.config_files import load_recipe  # noqa: E402
from bertkit.export.runtime import load_onnx_task  # noqa: E402
from bertkit.metrics import resolve_metrics  # noqa: E402
from bertkit.tasks import load_task  # noqa: E402
from bertkit.utils import hardware  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned SST-2 run folder")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--exports", help="folder for the fp32/ and int8/ exports (default: a temporary one)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    folder = args.exports or tempfile.mkdtemp(prefix="bertkit-int8-")
    fp32, int8, int8_tensor = exports(args.model, folder, per_tensor=True)

    torch_task = load_task(args.model)
    cfg = load_recipe("sst2", {"data_dir": args.data_dir})
    examples = type(torch_task).load_split(cfg, "dev", torch_task.label_names)
    features = torch_task.encode(examples)
    hooks = resolve_metrics(["accuracy"], builtins=torch_task.metric_builtins, num_labels=len(torch_task.label_names))
    rows = {}
    for name, task in (("torch fp32", torch_task), ("onnx fp32", load_onnx_task(fp32)),
                       ("onnx int8 (bertkit's default: per-channel)", load_onnx_task(int8)),
                       ("onnx int8, per-tensor", load_onnx_task(int8_tensor))):
        t0 = time.perf_counter()
        outputs = task.infer(features, args.batch_size, "fp32")
        seconds = time.perf_counter() - t0
        metrics, predictions = task.score(outputs, examples, features, hooks)
        rows[name] = (metrics["accuracy"], [p["label"] for p in predictions],
                      np.stack([o["logits"] for o in outputs]), seconds)

    acc0, labels0, logits0, _ = rows["torch fp32"]
    print(f"\nSST-2 dev ({len(examples)} sentences), {args.model}; {hardware()}")
    print("| backend | accuracy | Δ vs torch (points) | same label as torch | max abs logit diff | seconds |")
    print("|---|---|---|---|---|---|")
    for name, (acc, labels, logits, seconds) in rows.items():
        agree = np.mean([a == b for a, b in zip(labels, labels0, strict=True)])
        print(f"| {name} | {100 * acc:.2f} | {100 * (acc - acc0):+.2f} | {100 * agree:.2f} % | "
              f"{np.abs(logits - logits0).max():.2e} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
