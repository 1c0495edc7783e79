"""ONNX Runtime (fp32, int8) against torch for `predict` and `extract`, sentences/s on SST-2 dev sentences.

One process, the same fine-tuned run, one configuration at a time, each warmed up then timed `--repeats` times
(median). predict: `task.predict(texts)` (tokenise, length-sorted batches of 64, softmax); extract:
`FeatureExtractor` with layers last4, combine concat, pool mean (float32 vectors per word). torch runs at fp32 and
at `auto` (bf16 where the CPU has it); the ONNX graphs are `bertkit export` folders (fp32, and int8 by dynamic
quantisation), run on CPU by onnxruntime with its default threads.

    python benchmarks/onnx_speed.py --model runs/sst2 --exports runs/sst2-exports --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ["BERTKIT_CACHE"] = "off"  # tokenisation counts in predict's time, as for a user's new text

import torch  # noqa: E402
from onnx_setup import default_data_dir, dev_sentences, exports  # noqa: E402

from bertkit.device import choose_precision  # noqa: E402
from bertkit.export.runtime import OnnxFeatureExtractor, load_onnx_task  # noqa: E402
from bertkit.extract import FeatureExtractor  # noqa: E402
from bertkit.tasks import load_task  # noqa: E402
from bertkit.utils import hardware  # noqa: E402


def rate(fn, n: int, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned sequence-classification run folder")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--sentences", type=int, help="first N dev sentences (default: all 872)")
    parser.add_argument("--exports", help="folder for the fp32/ and int8/ exports (default: a temporary one)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    texts = dev_sentences(args.data_dir, args.sentences)
    words = [t.split() for t in texts]
    n, bs = len(texts), args.batch_size
    fp32, int8 = exports(args.model, args.exports or tempfile.mkdtemp(prefix="bertkit-onnx-"))
    auto = choose_precision("auto", torch.device("cpu")).precision

    task = load_task(args.model)
    predict = {f"torch {p}": (lambda p=p: task.predict(texts, batch_size=bs, precision=p)) for p in ("fp32", auto)}
    for name, folder in (("onnx fp32", fp32), ("onnx int8", int8)):
        onnx_task = load_onnx_task(folder)
        predict[name] = lambda t=onnx_task: t.predict(texts, batch_size=bs)
    extract = {f"torch {p}": FeatureExtractor(args.model, "last4", "concat", "mean", precision=p, batch_size=bs)
               for p in ("fp32", auto)}
    for name, folder in (("onnx fp32", fp32), ("onnx int8", int8)):
        extract[name] = OnnxFeatureExtractor(folder, "last4", "concat", "mean", batch_size=bs)

    results = {name: (rate(predict[name], n, args.repeats), rate(lambda fx=extract[name]: fx(words), n,
                                                                  args.repeats)) for name in predict}
    base = results["torch fp32"]
    print(f"\nSentences/s, {args.model}, {n} SST-2 dev sentences, batch {bs}, median of {args.repeats}; "
          f"{hardware()}, torch threads {torch.get_num_threads()}")
    print("| backend | predict | ÷ torch fp32 | extract (last4, concat, mean) | ÷ torch fp32 |")
    print("|---|---|---|---|---|")
    for name, (p, x) in results.items():
        print(f"| {name} | {p:.1f} | {p / base[0]:.2f}× | {x:.1f} | {x / base[1]:.2f}× |")


if __name__ == "__main__":
    main()
