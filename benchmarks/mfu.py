"""Model FLOP utilisation: bertkit's training FLOP/s ÷ a bf16 matrix-multiply peak measured in the same run.

    python benchmarks/mfu.py --steps 200          # or: make bench

Peak: the best of several large bf16 `torch.matmul`s on this machine (2·m·n·k FLOP each).
Training FLOP: the usual 6 × (matmul parameters) per token (forward 2, backward 4) plus the attention score and
mix products (12 · layers · seq · hidden per token), counted on the padded tokens of the exact batches bertkit
ran (the batch order is a function of the seed, so it is recomputed here), over the seconds of bertkit's
training loop (packaged MiniLM, real SST-2 or MNLI, batch 32 unless --batch-size, bf16).
Embedding look-ups, layer norms, GELU, softmax and the optimiser are not counted: they are real work but not
matmul FLOP, so MFU understates busy-ness.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

import bertkit  # noqa: E402
from bertkit.batching import train_batches  # noqa: E402
from bertkit.config import load_recipe  # noqa: E402
from bertkit.data import load_classification_data  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--task", default="sst2", help="a sequence-classification recipe: sst2 (short sentences), "
                                                      "mnli (sentence pairs, longer)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--freeze-word-embeddings", action="store_true", help="bertkit's option of that name "
                        "(the embedding matrix is not counted in the FLOP either way)")
    parser.add_argument("--data-dir", help="default: $BERTKIT_DATA_DIR/<task>")
    args = parser.parse_args()
    data_dir = args.data_dir or os.path.join(os.environ.get("BERTKIT_DATA_DIR", "../shared/data"), args.task)
    peak_before, n = matmul_peak()

    cfg = load_recipe(args.task, {"data_dir": data_dir, "model": "minilm-l6"})
    train, evals, labels = load_classification_data(cfg)
    torch.manual_seed(42)
    clf = bertkit.SequenceClassification.from_pretrained("minilm-l6", label_names=labels)
    mc = clf.model.config
    d, layers = mc.hidden_size, mc.num_hidden_layers
    params = sum(p.numel() for name, p in clf.model.named_parameters()
                 if p.dim() == 2 and "embeddings" not in name)  # weight matrices of every linear layer
    lengths = clf.encode(train)["length"]
    with tempfile.TemporaryDirectory() as out:
        run_cfg = bertkit.FinetuneConfig(task=args.task, output_dir=out, max_steps=args.steps, precision="bf16",
                                         batch_size=args.batch_size,
                                         freeze_word_embeddings=args.freeze_word_embeddings,
                                         label_names=labels, eval_every=str(args.steps), seed=cfg.seed)
        first = next(iter(evals.values()))
        result = bertkit.Trainer(clf, run_cfg).fit(train, {"dev": first.select(range(128))})
    batches = train_batches(lengths, run_cfg.batch_size, run_cfg.seed, 0, run_cfg.group_by_length)[: args.steps]
    flop = 0.0
    for idx in batches:
        seq = max(lengths[i] for i in idx)
        tokens = seq * len(idx)
        flop += tokens * (6 * params + 12 * layers * seq * d)
    seconds = result["train"]["train_seconds"]
    achieved = flop / seconds
    peak, n = max((peak_before, n), matmul_peak())  # before and after training: the better one
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    print(f"\nModel FLOP utilisation (MiniLM-L6, {args.task}, batch {args.batch_size}, bf16, {args.steps} steps, "
          f"word embeddings {'frozen' if args.freeze_word_embeddings else 'trained'}, "
          f"{torch.get_num_threads()} threads; {params / 1e6:.1f} M matmul parameters; real/padded tokens "
          f"{real / padded:.3f})")
    print("| bf16 matmul peak (best n×n) | training FLOP/s | MFU | training examples/s |")
    print("|---|---|---|---|")
    print(f"| {peak / 1e12:.3f} TFLOP/s (n={n}) | {achieved / 1e12:.3f} TFLOP/s | {100 * achieved / peak:.1f} % | "
          f"{result['train']['examples_per_s']:.1f} |")


if __name__ == "__main__":
    main()
