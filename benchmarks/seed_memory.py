"""Does a process keep memory from one seed to the next? `--seeds` and `bertkit search` run every seed or trial in
one process. This runs `train_one` for seeds 1..N in one process (CoNLL-2003 and MiniLM by default, a few steps
each, no length grouping), and after each seed collects garbage, counts the live Python objects, tensors and
modules, returns the heap's free memory (`malloc_trim(0)`) and prints the resident set (docs/memory.md has the
table):

    python benchmarks/seed_memory.py --seeds 9 --steps 20
    python benchmarks/seed_memory.py --seeds 5 --steps 20 --set keep_heap=false
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 python benchmarks/seed_memory.py --seeds 5 --steps 20
"""

import argparse
import ctypes
import gc
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import yaml  # noqa: E402

from bertkit.config_files import load_recipe  # noqa: E402
from bertkit.memory import MemoryLog, rss_gib  # noqa: E402
from bertkit.tasks import get_task  # noqa: E402
from bertkit.training.runs import load_checked, train_one  # noqa: E402
from bertkit.utils import say  # noqa: E402


def census() -> tuple[int, int, int]:
    """(Python objects the collector tracks, tensors, modules), after a collection."""
    gc.collect()
    objects = gc.get_objects()
    return (len(objects), sum(isinstance(o, torch.Tensor) for o in objects),
            sum(isinstance(o, torch.nn.Module) for o in objects))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="conll2003")
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--data-dir", default=os.environ.get("BERTKIT_DATA_DIR", "../shared/data"))
    parser.add_argument("--seeds", type=int, default=5, help="seeds 1..N, one after another in this process")
    parser.add_argument("--steps", type=int, default=20, help="optimiser steps a seed")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a recipe setting (YAML)")
    args = parser.parse_args()
    overrides = {"model": args.model, "data_dir": str(Path(args.data_dir) / args.recipe), "max_steps": args.steps,
                 "max_eval_samples": 200, "group_by_length": False, "test_file": None}
    overrides.update({k.strip(): yaml.safe_load(v) for k, _, v in (s.partition("=") for s in args.set)})
    cfg = load_recipe(args.recipe, overrides)
    task = get_task(cfg.task).resolve(cfg.task_options)
    changes, data = load_checked(task, cfg, say)
    cfg = cfg.replace("seed_memory", **changes)
    libc = ctypes.CDLL("libc.so.6")
    memory = MemoryLog(torch.device("cpu"))
    print(f"before: resident {rss_gib():.3f} GiB; objects, tensors, modules {census()}", flush=True)
    with tempfile.TemporaryDirectory() as out:
        for seed in range(1, args.seeds + 1):
            train_one(task, cfg.replace("seed_memory", seed=seed, output_dir=f"{out}/seed-{seed}"), *data,
                      memory=memory)
            counts = census()
            libc.malloc_trim(0)
            print(f"after seed {seed}: resident after the trim {rss_gib():.3f} GiB; objects, tensors, modules "
                  f"{counts}", flush=True)


if __name__ == "__main__":
    main()
