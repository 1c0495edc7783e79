"""Host-side cost of building one training batch: rows fetched one by one vs one Arrow take (`take_rows`).

    python benchmarks/batch_fetch.py --batch-size 64 --batches 200

Both paths feed the same adapter `collate` (padding to the longest) on bertkit's own length-grouped batches of
the real SST-2 training set, alternating three times in one process; the tensors they give are checked equal.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
from sst2_setup import sst2_features  # noqa: E402

from bertkit.batching import take_rows, train_batches  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/sst2")
    args = parser.parse_args()
    cfg, clf, features = sst2_features(args.data_dir)
    batches = train_batches(features["length"], args.batch_size, cfg.seed, 0, True)[: args.batches]

    paths = {"row by row": lambda idx: [features[i] for i in idx], "take_rows": lambda idx: take_rows(features, idx)}
    for idx in batches[:3]:
        a, b = (clf.collate(f(idx)) for f in paths.values())
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the two paths disagree"
    seconds = dict.fromkeys(paths, 0.0)
    for _ in range(3):
        for name, fetch in paths.items():
            t0 = time.perf_counter()
            for idx in batches:
                clf.collate(fetch(idx))
            seconds[name] += time.perf_counter() - t0
    print(f"\nfetch + collate, SST-2 train, batch {args.batch_size}, {len(batches)} batches × 3")
    for name, s in seconds.items():
        print(f"| {name} | {1e3 * s / (3 * len(batches)):.2f} ms per batch |")


if __name__ == "__main__":
    main()
