"""Tokenised-feature cache: encoding time of real training sets on a cache miss (tokenise, write the Arrow file)
vs a hit (memory-map the file), in one invocation with a fresh cache folder.

    python benchmarks/feature_cache.py
"""

from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from bertkit.config import load_recipe  # noqa: E402
from bertkit.tasks import get_adapter_class  # noqa: E402


def main() -> None:
    data = os.environ.get("BERTKIT_DATA_DIR", "../shared/data")
    print("| task | training examples | features | no cache | cache miss (tokenise + write) | cache hit | "
          "hit speed-up |")
    print("|---|---|---|---|---|---|---|")
    for task in ("sst2", "conll2003", "squad"):
        cfg = load_recipe(task, {"model": "minilm-l6", "data_dir": os.path.join(data, task)})
        cls = get_adapter_class(cfg.adapter)
        train, _, labels = cls.load_data(cfg)
        adapter = cls.from_config(cfg, labels)
        times = {}
        with tempfile.TemporaryDirectory() as cache:
            for mode, folder in (("off", "off"), ("miss", cache), ("hit", cache)):
                os.environ["BERTKIT_CACHE"] = folder
                t0 = time.perf_counter()
                features = adapter.encode(train)
                times[mode] = time.perf_counter() - t0
        print(f"| {task} | {len(train)} | {len(features)} | {times['off']:.2f} s | {times['miss']:.2f} s | "
              f"{times['hit']:.2f} s | {times['off'] / times['hit']:.0f}× |")


if __name__ == "__main__":
    main()
