"""A graphed fine-tune's evaluations, as bertkit runs them (arm `graphed`: inference's GPU path, batches by a token
budget replayed from the run's own CUDA graphs, `bertkit.training.evaluation.evaluation_graphs`) against
accelerate's loader of --eval-batch-size rows (arm `eager`: how they ran before), alternated in one process.

    source .gpu/setup.sh && python3 benchmarks/gpu_eval_ab.py        # GPU machine (benchmarks/gpu_session.sh: evalab)
    python benchmarks/gpu_eval_ab.py --quick                          # CPU rehearsal: both arms take the CPU's path

Each fit: the MiniLM with the SST-2 recipe's settings (bf16 on a GPU), --steps steps on SST-2 train's first --train
sentences, evaluated three times (every --steps / 3 steps) on the --eval sentences after those as its dev set (the real
dev set, 872 sentences, is too small to time). The three evaluations' seconds, synchronised (the graphed arm's first
runs each shape eagerly, its second captures them, its third replays), their total and the dev accuracy; per round
`ab round R ARM: evaluations a, b, c s; total T s; accuracy X`, then whether `graphed`'s total was ≥ 3 % under
`eager`'s in every round (the speed rule of docs/speed.md).
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_k, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("BERTKIT_DATA_DIR", str(ROOT.parent / "shared" / "data"))  # setup.sh sets it on the GPU

import torch  # noqa: E402

from bertkit import SequenceClassification, Trainer  # noqa: E402
from bertkit.config_files import load_recipe  # noqa: E402
from bertkit.training import loop  # noqa: E402

EVALUATIONS = 3


def write_data(folder: Path, n_train: int, n_eval: int) -> None:
    """GLUE-format train.tsv and dev.tsv of SST-2 train's first rows (the data folder itself is never written)."""
    with open(Path(os.environ["BERTKIT_DATA_DIR"]) / "sst2" / "train.tsv", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    header, rows = rows[0], rows[1:]
    if len(rows) < n_train + n_eval:
        raise SystemExit(f"SST-2 train has {len(rows)} rows, fewer than --train + --eval")
    for name, part in (("train.tsv", rows[:n_train]), ("dev.tsv", rows[n_train:n_train + n_eval])):
        (folder / name).write_text("\n".join("\t".join(r) for r in [header, *part]) + "\n")


class Timed(Trainer):
    """A Trainer that times each `evaluate` call, the device synchronised before and after."""

    def evaluate(self, eval_sets):
        sync()
        t0 = time.perf_counter()
        result = super().evaluate(eval_sets)
        sync()
        self.seconds.append(time.perf_counter() - t0)
        return result


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def fit(arm: str, a, data: Path, out: Path) -> tuple[list[float], float]:
    """(the evaluations' seconds during training, the last one's dev accuracy) of one fit in `arm`."""
    graphs = loop.evaluation_graphs
    if arm == "eager":  # the loop as it was: every evaluation through accelerate's loader
        loop.evaluation_graphs = lambda *args: (None, "")
    try:
        cfg = load_recipe("sst2", {"model": a.model, "data_dir": str(data), "output_dir": str(out),
                                   "max_steps": a.steps, "eval_every": str(a.steps // EVALUATIONS), "save_every": 0,
                                   "eval_batch_size": a.eval_batch_size, **({"precision": "fp32"} if a.quick else {})})
        train, evals, names = SequenceClassification.load_data(cfg)
        task = SequenceClassification.from_pretrained(cfg.model, label_names=names, max_length=cfg.max_length)
        trainer = Timed(task, cfg)
        trainer.seconds = []
        result = trainer.fit(train, evals)
    finally:
        loop.evaluation_graphs = graphs
    return trainer.seconds[:EVALUATIONS], result["dev"]["accuracy"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--train", type=int, default=4000)
    p.add_argument("--eval", type=int, default=20000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--eval-batch-size", type=int, default=128)  # the config's default
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--arms", default="eager,graphed")
    p.add_argument("--quick", action="store_true", help="a CPU rehearsal: 256 + 512 sentences, 6 steps, one round")
    a = p.parse_args()
    if a.quick:
        a.train, a.eval, a.steps, a.rounds = 256, 512, 6, 1
    print(f"device {torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}; torch {torch.__version__}; "
          f"{a.model}, {a.train} training and {a.eval} evaluation sentences, {a.steps} steps, {EVALUATIONS} "
          "evaluations a fit", flush=True)
    arms = a.arms.split(",")
    totals: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "data")
        data.mkdir()
        write_data(data, a.train, a.eval)
        fit(arms[0], a, data, Path(tmp, "warm"))  # a first fit pays the process's warm-ups (CUDA, the feature cache)
        for r in range(1, a.rounds + 1):
            for arm in arms:
                seconds, accuracy = fit(arm, a, data, Path(tmp, f"{arm}-{r}"))
                totals[arm, r] = sum(seconds)
                print(f"ab round {r} {arm}: evaluations {', '.join(f'{s:.3f}' for s in seconds)} s; total "
                      f"{sum(seconds):.3f} s; accuracy {accuracy:.4f}", flush=True)
    if "graphed" in arms and "eager" in arms:
        faster = all(totals["graphed", r] <= 0.97 * totals["eager", r] for r in range(1, a.rounds + 1))
        print(f"ab: graphed {'≥' if faster else 'not ≥'} 3 % faster than eager in every round")


if __name__ == "__main__":
    main()
