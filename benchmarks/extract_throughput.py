"""Extraction throughput: bertkit's FeatureExtractor vs `pipeline("feature-extraction")` vs a bare forward pass.

Same checkpoint (packaged MiniLM), the same real SST-2 sentences, one process, one invocation:

- pipeline, defaults: what a user gets from `pipeline("feature-extraction", model=...)` (fp32, one at a time);
- pipeline, batch 64 in bf16 (`dtype=torch.bfloat16`): the pipeline given every help it takes;
- bertkit: `FeatureExtractor(layers="last", pool="none")`, the same output (last-layer vector of every word
  piece, float32 numpy per sentence), precision auto (bf16 here), batch 64;
- bare forward: the same length-sorted batches through the model under bf16 autocast, outputs discarded — the
  practical limit.

    python benchmarks/extract_throughput.py --sentences 4000        # or: make bench
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModel, pipeline  # noqa: E402

from bertkit.batching import sorted_batches  # noqa: E402
from bertkit.data.readers import read_rows  # noqa: E402
from bertkit.device import autocast  # noqa: E402
from bertkit.extract import FeatureExtractor  # noqa: E402
from bertkit.models import load_tokenizer, resolve_model  # noqa: E402


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data-dir", default=os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"),
                                                           "sst2"))
    args = parser.parse_args()
    rows = read_rows(os.path.join(args.data_dir, "train.tsv"))
    texts = [r["sentence"].strip() for _, r in rows[: args.sentences]]
    words = [t.split() for t in texts]
    path = resolve_model("minilm-l6")[0]
    n, bs = len(texts), args.batch_size

    fx = FeatureExtractor("minilm-l6", layers="last", combine="concat", pool="none", batch_size=bs)
    fx(words[:64])  # warm-up
    t_ours = timed(lambda: fx(words))

    tok = load_tokenizer("minilm-l6")
    model = AutoModel.from_pretrained(path).eval()
    enc = tok(words, is_split_into_words=True)
    lengths = [len(x) for x in enc["input_ids"]]
    batches = [tok.pad({"input_ids": [enc["input_ids"][i] for i in idx]}, return_tensors="pt")
               for idx in sorted_batches(lengths, bs)]

    @torch.no_grad()
    def bare():
        for b in batches:
            with autocast("bf16", torch.device("cpu")):
                model(**b)

    bare()
    t_bare = timed(bare)

    pipe = pipeline("feature-extraction", model=path, tokenizer=path, device="cpu")
    sample = texts[: max(n // 8, 64)]  # the default pipeline is slow: time a slice, report per-sentence rate
    pipe(sample[:8])
    t_pipe = timed(lambda: pipe(sample)) * n / len(sample)
    pipe16 = pipeline("feature-extraction", model=path, tokenizer=path, device="cpu", dtype=torch.bfloat16)
    pipe16(texts[:64], batch_size=bs)
    t_pipe16 = timed(lambda: pipe16(texts, batch_size=bs))

    print(f"\nExtraction throughput, sentences/s (MiniLM-L6, {n} SST-2 train sentences, {torch.get_num_threads()} "
          "threads; last layer, every word piece)")
    print(f"| pipeline (defaults, fp32) | pipeline (batch {bs}, bf16) | bertkit (batch {bs}, auto={fx.precision}) | "
          "bare forward (bf16, sorted) | bertkit ÷ pipeline defaults | bertkit ÷ pipeline bf16 | bertkit ÷ bare |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {n / t_pipe:.0f} | {n / t_pipe16:.0f} | {n / t_ours:.0f} | {n / t_bare:.0f} | {t_pipe / t_ours:.2f}× | "
          f"{t_pipe16 / t_ours:.2f}× | {t_bare / t_ours:.2f} |")


if __name__ == "__main__":
    main()
