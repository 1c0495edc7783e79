"""The host's share of `bertkit extract`: FeatureExtractor's call with the model forward replaced by zeros of its
output's shape (tokenising, batching, combining layers, pooling pieces to words, the float16 copy).

    python benchmarks/extract_host.py 5000 mean        # SST-2's first 5,000 training sentences, MiniLM, last4 concat

On a GPU the host's part is what bounds `extract` (the model forward is a small share of the call: docs/speed.md,
"On one GPU").
"""

import csv
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertkit.commands.extract import CHUNK  # noqa: E402
from bertkit.extract import FeatureExtractor  # noqa: E402
from bertkit.extract.inputs import split_text  # noqa: E402

DATA = Path(os.environ.get("BERTKIT_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def main(n: int, pool: str) -> None:
    torch.set_num_threads(1)
    with open(DATA / "sst2" / "train.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:n]
    fx = FeatureExtractor("minilm-l6", layers="last4", combine="concat", pool=pool, precision="fp32")
    words = [split_text(r["sentence"], fx.tokenizer) for r in rows]

    def zeros(batch):  # [layers, batch, pieces, H], as the model's chosen layers
        b, p = batch["input_ids"].shape
        return torch.zeros(len(fx.layers), b, p, fx.config.hidden_size)

    fx.hidden_states = zeros
    t = time.perf_counter()
    for i in range(0, len(words), CHUNK):  # chunks as the CLI
        fx(words[i:i + CHUNK], dtype=np.float16)
    seconds = time.perf_counter() - t
    print(f"RESULT {pool} {n} sentences: {seconds:.2f} s on the host, {n / seconds:,.0f} sentences/s")


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentences", nargs="?", type=int, default=5000, help="SST-2 training sentences (default 5000)")
    p.add_argument("pool", nargs="?", default="mean", help="the extractor's pool (default mean)")
    a = p.parse_args()
    main(a.sentences, a.pool)
