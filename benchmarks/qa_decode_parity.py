"""bertkit's SQuAD answer decoding against run_qa.py's postprocess_qa_predictions, on the same logits: one trained
checkpoint's start and end logits over the validation windows (fp32), decoded both ways and scored by the same
rules. It separates the decoders from the training when benchmarks/trainer_parity.py compares a whole bertkit run
with a whole Trainer run.

    python benchmarks/qa_decode_parity.py RUN/seed-13                   # a bertkit (or any Hugging Face) QA folder
    python benchmarks/qa_decode_parity.py RUN/seed-13 --recipe squad_v2  # SQuAD 2.0: run_qa's version_2_with_negative

Prints first how many training and validation windows the two encode alike (input ids and answer labels: bertkit's
`encode` against run_qa's prepare_train_features), then each decoder's scores and how many questions the two answer
differently. SQuAD 2.0 adds the largest difference between the two sides' null odds, the questions whose best
non-null answer differs, and those answered differently at run_qa's default threshold (0); its scores are the
official script's at the best F1 threshold chosen on these questions, bertkit's as `bertkit finetune` scores an
evaluation (its own threshold search), run_qa's by parity_sides.squad_v2_decided.
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
from parity_sides import postprocess, qa_windows, squad_v2_decided  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--data-dir", default=os.environ.get("BERTKIT_DATA_DIR", "../shared/data"))
    parser.add_argument("--model", default="minilm-l6", help="the recipe's model name (its override's settings)")
    parser.add_argument("--recipe", default="squad", choices=["squad", "squad_v2"])
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from bertkit.config_files import load_recipe
    from bertkit.inference import forward_all
    from bertkit.metrics.squad import squad_scores
    from bertkit.tasks import get_task

    cfg = load_recipe(args.recipe, {"model": args.model, "data_dir": str(Path(args.data_dir) / args.recipe)})
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

    o = cfg.task_options
    print(f"{args.checkpoint}: {len(dev)} questions in {len(features)} windows")
    width = max(len(w["start_logits"]) for w in outputs)
    padded = [np.stack([np.pad(w[k], (0, width - len(w[k])), constant_values=-100.0) for w in outputs])
              for k in ("start_logits", "end_logits")]  # as the Trainer hands them over: [windows, width], -100 pad
    references = dict(zip(dev["id"], (list(a["text"]) for a in dev["answers"]), strict=True))
    if o.allow_no_answer:
        compare_v2(task, outputs, dev, features, dev_windows, padded, references, cfg)
        return
    ours = {p["id"]: p["answer"] for p in task.answers(outputs, dev, features)}
    theirs = postprocess(dev, dev_windows, *padded, o.n_best, o.max_answer_length)
    for name, answers in (("bertkit", ours), ("run_qa's postprocess", theirs)):
        s = squad_scores(answers, references)
        print(f"  {name:22s} exact match {s['exact_match']:.2f}  F1 {s['f1']:.2f}")
    differ(ours, theirs, references, "answered differently")


def differ(ours: dict, theirs: dict, references: dict, what: str) -> None:
    questions = [q for q in references if ours[q] != theirs[q]]
    print(f"  {what}: {len(questions)} questions")
    for q in questions[:10]:
        gold = references[q][0] if references[q] else ""
        print(f"    {q}: bertkit {ours[q]!r} | run_qa {theirs[q]!r} | gold {gold!r}")


def compare_v2(task, outputs, dev, features, dev_windows, padded, references, cfg) -> None:
    from bertkit.metrics import resolve_metrics

    o = cfg.task_options
    task.null_threshold = None  # chosen on these questions, as in training
    hooks = resolve_metrics(cfg.metrics, builtins=task.metric_builtins, num_labels=len(task.label_names))
    metrics, predictions = task.score(outputs, dev, features, hooks)
    spans = {p["id"]: p["nbest"][0]["text"] if p["nbest"] else "" for p in predictions}
    odds = {p["id"]: p["null_odds"] for p in predictions}
    their_spans, their_odds = postprocess(dev, dev_windows, *padded, o.n_best, o.max_answer_length, with_null=True)
    theirs = squad_v2_decided(their_spans, their_odds, references)
    gaps = {q: abs(odds[q] - their_odds[q]) for q in references}
    worst = max(gaps, key=gaps.get)
    print(f"  null odds: largest difference {gaps[worst]:.2e} (question {worst}); "
          f"{sum(g > 1e-4 for g in gaps.values())} of {len(gaps)} questions differ by more than 1e-4")
    differ(spans, their_spans, references, "best non-null answer differs")
    at_zero = [{q: "" if odds_[q] > 0.0 else text for q, text in spans_.items()}
               for spans_, odds_ in ((spans, odds), (their_spans, their_odds))]
    differ(*at_zero, references, "answered differently at threshold 0 (run_qa's default)")
    for name, s in (("bertkit", metrics), ("run_qa's postprocess", theirs)):
        print(f"  {name:22s} best F1 {s['best_f1']:.2f} (threshold {s['best_f1_thresh']:.3f})  best exact "
              f"{s['best_exact']:.2f}  HasAns F1 {s['HasAns_f1']:.2f}  NoAns {s['NoAns_f1']:.2f}")


if __name__ == "__main__":
    main()
