"""Model FLOP utilisation: bertkit's training FLOP/s ÷ a bf16 matrix-multiply peak measured in the same run.

    python benchmarks/mfu.py --steps 300 --batch-size 64 --repeats 3      # or: make bench

Peak: the best of several large bf16 `torch.matmul`s on this machine (2·m·n·k FLOP each), measured right before
and right after each training run; the higher of the two is that run's denominator (this machine's speed drifts
by several percent over minutes, so a peak from another moment would not be comparable).
Training FLOP: the usual 6 × (encoder matmul parameters) per token (forward 2, backward 4) plus the attention
score and mix products (12 · layers · seq · hidden per token), counted on the padded tokens of the exact batches
bertkit ran (the batch order is a function of the seed, so it is recomputed here), plus 6 × (pooler and
classifier parameters) per sentence (they see only [CLS]), over the seconds of bertkit's training loop (packaged
MiniLM, real SST-2 or MNLI, batch 32 unless --batch-size, bf16). Embedding look-ups, layer norms, GELU, softmax
and the optimiser are not counted: they are real work but not matmul FLOP, so MFU understates busy-ness.
`--repeats N` trains N times from the same start (each run its own peak) and reports every run and the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

import bertkit  # noqa: E402
from bertkit.batching import train_batches  # noqa: E402
from bertkit.config_files import load_recipe  # noqa: E402


def matmul_peak(sizes=(1024, 2048, 4096), repeats: int = 5) -> tuple[float, int]:
    best, best_n = 0.0, 0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
        torch.matmul(a, b)
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            rate = 2 * n**3 / (time.perf_counter() - t0)
            if rate > best:
                best, best_n = rate, n
    return best, best_n


def train_once(args, train, evals, labels, seed: int) -> dict:
    torch.manual_seed(42)
    clf = bertkit.SequenceClassification.from_pretrained("minilm-l6", label_names=labels)
    with tempfile.TemporaryDirectory() as out:
        run_cfg = bertkit.run_config(name=args.task, output_dir=out, max_steps=args.steps, precision="bf16",
                                     batch_size=args.batch_size, freeze_word_embeddings=args.freeze_word_embeddings,
                                     dropout=args.dropout, attention_dropout=args.attention_dropout,
                                     label_names=labels, eval_every=str(args.steps), seed=seed)
        first = next(iter(evals.values()))
        return bertkit.Trainer(clf, run_cfg).fit(train, {"dev": first.select(range(128))})["train"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--task", default="sst2", help="a sequence-classification recipe: sst2 (short sentences), "
                                                      "mnli (sentence pairs, longer)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1, help="training runs, each from the "
                        "same start (median reported)")
    parser.add_argument("--freeze-word-embeddings", action="store_true", help="bertkit's option of that name "
                        "(the embedding matrix is not counted in the FLOP either way)")
    parser.add_argument("--dropout", type=float, help="bertkit's --dropout (default: the checkpoint's 0.1)")
    parser.add_argument("--attention-dropout", type=float, help="bertkit's --attention-dropout (default: 0.1)")
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/<task>")
    args = parser.parse_args()
    data_dir = args.data_dir or os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"), args.task)

    cfg = load_recipe(args.task, {"data_dir": data_dir, "model": "minilm-l6"})
    train, evals, labels = bertkit.SequenceClassification.load_data(cfg)
    clf = bertkit.SequenceClassification.from_pretrained("minilm-l6", label_names=labels)
    mc = clf.model.config
    d, layers = mc.hidden_size, mc.num_hidden_layers
    matrices = {name: p.numel() for name, p in clf.model.named_parameters()
                if p.dim() == 2 and "embeddings" not in name}
    params = sum(n for name, n in matrices.items() if ".encoder." in name)  # every token goes through these
    head = sum(matrices.values()) - params  # pooler and classifier: the [CLS] vector only
    lengths = clf.encode(train)["length"]
    batches = train_batches(lengths, args.batch_size, cfg.seed, 0, True)[: args.steps]  # bertkit's first epoch
    flop = 0.0
    for idx in batches:
        seq = max(lengths[i] for i in idx)  # padded to the longest in the batch
        flop += seq * len(idx) * (6 * params + 12 * layers * seq * d) + len(idx) * 6 * head
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)

    rows = []
    for rep in range(args.repeats):
        before = matmul_peak()
        result = train_once(args, train, evals, labels, cfg.seed)
        after = matmul_peak()
        peak, n = max(before, after)
        achieved = flop / result["train_seconds"]
        rows.append((rep, peak, n, achieved, achieved / peak, result["examples_per_s"]))

    print(f"\nModel FLOP utilisation (MiniLM-L6, {args.task}, batch {args.batch_size}, bf16, {args.steps} steps, "
          f"word embeddings {'frozen' if args.freeze_word_embeddings else 'trained'}, "
          f"dropout {'0.1' if args.dropout is None else args.dropout}, attention dropout "
          f"{'0.1' if args.attention_dropout is None else args.attention_dropout}, "
          f"{torch.get_num_threads()} threads; {params / 1e6:.2f} M encoder + {head / 1e6:.2f} M head matmul "
          f"parameters; real/padded tokens {real / padded:.3f})")
    print("| run | bf16 matmul peak (best n×n, before/after) | training FLOP/s | MFU | training examples/s |")
    print("|---|---|---|---|---|")
    for rep, peak, n, achieved, mfu, eps in rows:
        print(f"| {rep + 1} | {peak / 1e12:.3f} TFLOP/s (n={n}) | {achieved / 1e12:.3f} TFLOP/s | {100 * mfu:.1f} % | "
              f"{eps:.1f} |")
    if len(rows) > 1:
        print(f"| median of {len(rows)} | | {statistics.median(r[3] for r in rows) / 1e12:.3f} TFLOP/s | "
              f"**{100 * statistics.median(r[4] for r in rows):.1f} %** | "
              f"{statistics.median(r[5] for r in rows):.1f} |")


if __name__ == "__main__":
    main()
