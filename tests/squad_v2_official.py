"""Test helper: the official SQuAD 2.0 evaluation, re-implemented independently of bertkit's metric module.

Reference: "Official evaluation script for SQuAD version 2.0", `evaluate-v2.0.py`
(https://rajpurkar.github.io/SQuAD-explorer/, CodaLab bundle 0x6b567e1cf2e041ec80d7098f031c5c9e), by the SQuAD
authors (Rajpurkar, Jia and Liang 2018, "Know What You Don't Know: Unanswerable Questions for SQuAD"). This file
follows that script's definitions step by step, walking the dataset JSON and the prediction and no-answer-probability
dicts as it does, so that bertkit/metrics/squad_v2.py is checked against the script's behaviour rather than against
itself. It is written separately and structured differently: the best threshold is found by scoring every cut of
the questions sorted by no-answer probability and taking the first best cut, not by bertkit's running sweep.
Answer normalisation is the official v1.1 script's (`squad_v1_official.normalize_answer`; v2.0 only adds the
`re.UNICODE` flag, the default for Python 3 strings).

Command line as the script's: `python tests/squad_v2_official.py data.json predictions.json --na-prob-file
null_odds.json [--na-prob-thresh 1.0]`.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json

try:
    from .squad_v1_official import normalize_answer
except ImportError:  # run as a script
    from squad_v1_official import normalize_answer


def questions(dataset):
    """(id, reference texts) of every question of the dataset's articles, in file order."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa["id"], [a["text"] for a in qa["answers"]]


def tokens(text):
    return normalize_answer(text).split() if text else []


def exact(gold, pred):
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1(gold, pred):
    g, p = tokens(gold), tokens(pred)
    if len(g) == 0 or len(p) == 0:
        return int(g == p)  # one side is "no answer": right only if both are
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(p), 1.0 * same / len(g)
    return (2 * precision * recall) / (precision + recall)


def scores_per_question(dataset, preds):
    """{id: exact}, {id: f1}, {id: has an answer}; questions without a prediction are left out (the script prints
    them and goes on)."""
    ex, f, has = {}, {}, {}
    for qid, texts in questions(dataset):
        has[qid] = bool(texts)
        golds = [t for t in texts if normalize_answer(t)]
        if not golds:
            golds = [""]
        if qid in preds:
            ex[qid] = max(exact(g, preds[qid]) for g in golds)
            f[qid] = max(f1(g, preds[qid]) for g in golds)
    return ex, f, has


def with_threshold(raw, na_probs, has, thresh):
    out = {}
    for qid in raw:
        out[qid] = float(not has[qid]) if na_probs[qid] > thresh else raw[qid]
    return out


def percent(values, qids):
    return {"exact": 100.0 * sum(values[0][q] for q in qids) / len(qids),
            "f1": 100.0 * sum(values[1][q] for q in qids) / len(qids), "total": len(qids)}


def best_cut(preds, raw, na_probs, has):
    """Questions sorted by no-answer probability; cut k answers the first k with their prediction and the rest with
    "no answer". Score of every cut, then the first cut with the highest score; its threshold is the probability of
    its last answered question (0.0 for the cut that answers nothing)."""
    order = [q for q in sorted(na_probs, key=lambda q: na_probs[q]) if q in raw]
    gains = [raw[q] if has[q] else (-1 if preds[q] else 0) for q in order]
    cuts = list(itertools.accumulate(gains, initial=sum(1 for v in has.values() if not v)))
    k = max(range(len(cuts)), key=lambda i: (cuts[i], -i))
    return 100.0 * cuts[k] / len(raw), (na_probs[order[k - 1]] if k else 0.0)


def evaluate(dataset, preds, na_probs=None, na_prob_thresh=1.0):
    """The script's output dict (without its precision-recall plots)."""
    given = na_probs is not None
    if not given:
        na_probs = {k: 0.0 for k in preds}
    ex_raw, f1_raw, has = scores_per_question(dataset, preds)
    ex = with_threshold(ex_raw, na_probs, has, na_prob_thresh)
    f = with_threshold(f1_raw, na_probs, has, na_prob_thresh)
    out = percent((ex, f), list(ex))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, h in has.items() if h == wanted]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in percent((ex, f), qids).items()})
    if given:
        out["best_exact"], out["best_exact_thresh"] = best_cut(preds, ex_raw, na_probs, has)
        out["best_f1"], out["best_f1_thresh"] = best_cut(preds, f1_raw, na_probs, has)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser("SQuAD 2.0 evaluation (test reference)")
    parser.add_argument("data_file")
    parser.add_argument("pred_file")
    parser.add_argument("--na-prob-file", "-n")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0)
    args = parser.parse_args()
    with open(args.data_file) as fh:
        data = json.load(fh)["data"]
    with open(args.pred_file) as fh:
        predictions = json.load(fh)
    probs = None
    if args.na_prob_file:
        with open(args.na_prob_file) as fh:
            probs = json.load(fh)
    print(json.dumps(evaluate(data, predictions, probs, args.na_prob_thresh), indent=2))
