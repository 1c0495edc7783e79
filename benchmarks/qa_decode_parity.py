"""bertkit's SQuAD answer decoding against run_qa.py's postprocess_qa_predictions, on the same logits: one trained
checkpoint's start and end logits over the validation windows (fp32), decoded both ways and scored by the same
SQuAD v1.1 rules. It separates the decoders from the training when benchmarks/trainer_parity.py compares a whole
bertkit run with a whole Trainer run.

    python benchmarks/qa_decode_parity.py RUN/seed-13/model        # a bertkit (or any Hugging Face) QA folder

Prints first how many training and validation windows the two encode alike (input ids and answer labels: bertkit's
`encode` against run_qa's prepare_train_features), then exact match and F1 of each decoder, and how many questions
the two answer differently.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from parity_sides import postprocess, qa_windows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--data-dir", default=os.environ.get("BERTKIT_DATA_DIR", "../shared/data"))
    parser.add_argument("--model", default="minilm-l6", help="the recipe's model name (its override's settings)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from bertkit.config_files import load_recipe
    from bertkit.inference import forward_all
    from bertkit.metrics.squad import squad_scores
    from bertkit.tasks import get_task

    cfg = load_recipe("squad", {"model": args.model, "data_dir": str(Path(args.data_dir) / "squad")})
    task_class = get_task(cfg.task).resolve(cfg.task_options)
    train, evals, _ = task_class.load_data(cfg)
    dev = evals["validation"]
    tok = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForQuestionAnswering.from_pretrained(args.checkpoint).eval()
    task = task_class(model, tok, max_length=cfg.max_length, options=cfg.task_options)
    features = task.encode(dev)

    dev_windows = qa_windows(cfg, tok, dev, keep_offsets=True)  # run_qa's, with what its post-processing reads
    for name, ours, theirs in (("training", task.encode(train), qa_windows(cfg, tok, train, keep_offsets=False)),
                               ("validation", features, dev_windows)):
        columns = ("input_ids", "token_type_ids", "start_positions", "end_positions")
        rows = [list(zip(*(side[c] for c in columns), strict=True)) for side in (ours, theirs)]
        alike = sum(a == b for a, b in zip(*rows, strict=True)) if len(ours) == len(theirs) else 0
        print(f"{name} windows encoded alike (input ids, answer labels): {alike} of {len(ours)} "
              f"(run_qa's: {len(theirs)})")

    task.output_reducer = lambda features: None  # keep each window's logits: run_qa's decoding reads them all
    outputs = forward_all(task, features, args.batch_size)  # per window: {start_logits, end_logits} (length,), fp32

    ours = {p["id"]: p["answer"] for p in task.answers(outputs, dev, features)}
    references = dict(zip(dev["id"], (a["text"] for a in dev["answers"]), strict=True))
    width = max(len(o["start_logits"]) for o in outputs)
    padded = [np.stack([np.pad(o[k], (0, width - len(o[k])), constant_values=-100.0) for o in outputs])
              for k in ("start_logits", "end_logits")]  # as the Trainer hands them over: [windows, width], -100 pad
    o = cfg.task_options
    theirs = postprocess(dev, dev_windows, *padded, o.n_best, o.max_answer_length)
    differ = [q for q in references if ours[q] != theirs[q]]
    print(f"{args.checkpoint}: {len(dev)} questions in {len(features)} windows")
    for name, answers in (("bertkit", ours), ("run_qa's postprocess", theirs)):
        s = squad_scores(answers, references)
        print(f"  {name:22s} exact match {s['exact_match']:.2f}  F1 {s['f1']:.2f}")
    print(f"  answered differently: {len(differ)} questions")
    for q in differ[:10]:
        print(f"    {q}: bertkit {ours[q]!r} | run_qa {theirs[q]!r} | gold {references[q][0]!r}")


if __name__ == "__main__":
    main()
