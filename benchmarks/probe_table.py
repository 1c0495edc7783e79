"""The BERT paper's Table 7 for any checkpoint: CoNLL-2003 validation F1 of frozen-feature taggers.

Extracts every hidden state once (first word piece of each word, float16), then trains one probe per row on the
slices it needs. Each row equals `bertkit probe conll2003 --model M --layers L --combine C` (printed with it), up to
float16 rounding of the stored layers.

    python benchmarks/probe_table.py --model minilm-l6 [--epochs 4] [--tagger bilstm]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertkit.config_files import load_recipe  # noqa: E402
from bertkit.extract import FeatureExtractor, combine_layers, parse_layers  # noqa: E402
from bertkit.extract.probe import train_probe  # noqa: E402
from bertkit.tasks import TokenClassification  # noqa: E402

PAPER = {"embeddings": 91.0, "second-to-last": 95.6, "last": 94.9, "last4 scalar-mix": 95.9,
         "last4 concat": 96.1, "all scalar-mix": 95.5}  # BERT-base, CoNLL-2003 dev F1 (Devlin et al. 2019, Table 7)
ROWS = [("Embeddings", "embeddings", "concat"), ("Second-to-last hidden", "second-to-last", "concat"),
        ("Last hidden", "last", "concat"), ("Weighted sum last four", "last4", "scalar-mix"),
        ("Concat last four", "last4", "concat"), ("Weighted sum all layers", "all", "scalar-mix")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--tagger", default="bilstm", choices=["bilstm", "linear"])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--max-train-samples", type=int)
    parser.add_argument("--output", default="runs/probe_table.json")
    parser.add_argument("--finetuned-f1", type=float, help="validation F1 of `bertkit finetune conll2003`, in %%")
    args = parser.parse_args()

    cfg = load_recipe("conll2003", {"max_train_samples": args.max_train_samples} if args.max_train_samples else {})
    train, evals, labels = TokenClassification.load_data(cfg)
    valid = next(iter(evals.values()))  # the recipe's first validation file, as `bertkit probe`
    train, valid = train.to_dict(), valid.to_dict()  # plain lists of words and tags
    t0 = time.perf_counter()
    fx = FeatureExtractor(args.model, layers="embeddings,all", combine="none", pool="first")  # [words, L + 1, H]
    depth = fx.model.config.num_hidden_layers
    train_all, valid_all = fx(train["tokens"], dtype=np.float16), fx(valid["tokens"], dtype=np.float16)
    print(f"extracted {depth + 1} hidden states of {len(train_all)} + {len(valid_all)} sentences in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)

    results = []
    for title, spec, combine in ROWS:
        layers = parse_layers(spec, depth)

        def view(feats, layers=layers, combine=combine):
            if combine == "scalar-mix":
                return [f[:, layers] for f in feats]  # [words, layers, H]
            return [combine_layers(torch.from_numpy(f[:, layers].astype(np.float32)).transpose(0, 1),
                                   combine).numpy().astype(np.float16) for f in feats]

        t1 = time.perf_counter()
        _, best, _ = train_probe(view(train_all), train["tags"], view(valid_all), valid["tags"], labels,
                                 kind=args.tagger, hidden=args.hidden,
                                 mix_layers=len(layers) if combine == "scalar-mix" else 0, epochs=args.epochs,
                                 log=lambda m, title=title: print(f"  [{title}] {m}", flush=True))
        command = (f"bertkit probe conll2003 --model {args.model} --layers {spec} --combine {combine} "
                   f"--tagger {args.tagger} --hidden {args.hidden} --epochs {args.epochs}"
                   + (f" --max-train-samples {args.max_train_samples}" if args.max_train_samples else ""))
        results.append({"row": title, "layers": layers, "combine": combine, "f1": 100 * best["f1"],
                        "layer_weights": best.get("layer_weights"), "seconds": round(time.perf_counter() - t1),
                        "command": command,
                        "paper": PAPER.get(spec if combine == "concat" and spec != "last4" else f"{spec} {combine}")})
        print(f"{title}: F1 {100 * best['f1']:.2f} ({results[-1]['seconds']} s)", flush=True)

    print(f"\nCoNLL-2003 validation F1, frozen {args.model} features, {args.tagger} tagger ({args.epochs} epochs)")
    print(f"| features | layers | {args.model} F1 | BERT-base (paper) | command |\n|---|---|---|---|---|")
    for r in results:
        print(f"| {r['row']} | {r['layers']} | {r['f1']:.1f} | {r['paper']} | `{r['command']}` |")
    if args.finetuned_f1:
        print(f"| Fine-tuning (bertkit finetune conll2003) | all | {args.finetuned_f1:.1f} | 96.4 | |")
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
