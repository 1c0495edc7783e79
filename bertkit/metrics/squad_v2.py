"""SQuAD 2.0 metrics as the official evaluation script (`evaluate-v2.0.py`) computes them (one difference, below).

SQuAD 2.0 adds unanswerable questions (no reference answer). Per question, against every reference (or `""` for an
unanswerable one, or when every reference normalises to nothing):
- exact: the normalised prediction equals a normalised reference (v1.1's `normalize_answer`);
- F1: token overlap as in v1.1, except that an empty prediction or reference scores 1 when both are empty, else 0;
- with a no-answer score per question (`na_probs`, bertkit's null odds), a question whose score exceeds
  `na_prob_thresh` (default 1.0, the script's `--na-prob-thresh`) counts as answered "no answer";
- totals in percent over all questions (`exact`, `f1`, `total`), the answerable ones (`HasAns_*`) and the others
  (`NoAns_*`);
- `best_exact` / `best_f1` and their thresholds: the script's sweep over the questions in increasing order of their
  no-answer score, starting from "everything is no answer" and answering one more question at each step; the
  threshold is the score at which the total first reached its maximum (0.0 if answering nothing is best). One
  difference: questions that share a score (a tie, common with bf16 logits) are answered together, as a threshold
  answers them, where the script compares after each of them and can report a total between two thresholds that no
  model can keep. Without ties the two are the same; with them this `best_f1` is the F1 at `best_f1_thresh`.

The `SquadV2` module takes the hub `squad_v2` metric's input format (`no_answer_probability` is bertkit's null odds;
kept as float64) and is a local drop-in replacement for it.

Example:
```python
>>> SquadV2().compute(predictions=[{"id": "q1", "prediction_text": "", "no_answer_probability": 2.5}],
...                   references=[{"id": "q1", "answers": {"text": [], "answer_start": []}}])["NoAns_exact"]
100.0
```
"""

from __future__ import annotations

from collections import Counter

import datasets
import evaluate

from ..errors import BertkitError
from .base import LocalMetric
from .squad import normalize_answer

KEYS = ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
        "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh")


def compute_exact(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def compute_f1(gold: str, prediction: str) -> float:
    gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not gold_tokens or not pred_tokens:  # "no answer" on either side: 1 if both agree
        return int(gold_tokens == pred_tokens)
    num_same = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    if num_same == 0:
        return 0
    precision, recall = num_same / len(pred_tokens), num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def raw_scores(predictions: dict[str, str], references: dict[str, list[str]]) -> tuple[dict, dict]:
    """Per question ({id: score}, in reference order): exact and F1, each the best over the references."""
    missing = [q for q in references if q not in predictions]
    if missing:  # the official script cannot score these either (it fails on them)
        raise BertkitError(f"{len(missing)} question(s) without a prediction, e.g. {missing[0]}")
    exact, f1 = {}, {}
    for qid, answers in references.items():
        golds = [a for a in answers if normalize_answer(a)] or [""]  # unanswerable: only "" is right
        exact[qid] = max(compute_exact(g, predictions[qid]) for g in golds)
        f1[qid] = max(compute_f1(g, predictions[qid]) for g in golds)
    return exact, f1


def apply_no_answer_threshold(scores: dict, na_probs: dict, has_answer: dict, thresh: float) -> dict:
    """A question whose no-answer score exceeds `thresh` counts as answered "no answer"."""
    return {q: float(not has_answer[q]) if na_probs[q] > thresh else s for q, s in scores.items()}


def best_threshold(predictions: dict[str, str], scores: dict, na_probs: dict,
                   has_answer: dict) -> tuple[float, float]:
    """(best total in percent, its threshold): answer the questions whose no-answer score is at most the threshold
    with their prediction, the others with "no answer" (the official sweep, a tie answered whole: see the module
    docstring)."""
    total = sum(not h for h in has_answer.values())  # everything "no answer": every unanswerable one is right
    best, thresh = total, 0.0
    qids = [q for q in sorted(na_probs, key=lambda q: na_probs[q]) if q in scores]
    for i, qid in enumerate(qids):
        if has_answer[qid]:
            total += scores[qid]
        elif predictions[qid]:
            total -= 1  # an unanswerable question now gets a span: wrong
        if i + 1 < len(qids) and na_probs[qids[i + 1]] == na_probs[qid]:
            continue  # the next one shares this score: a threshold answers both or neither
        if total > best:
            best, thresh = total, na_probs[qid]
    return 100.0 * best / len(scores), thresh


def _totals(exact: dict, f1: dict, qids) -> dict:
    qids = list(qids)
    return {"exact": 100.0 * sum(exact[q] for q in qids) / len(qids), "f1": 100.0 * sum(f1[q] for q in qids)
            / len(qids), "total": len(qids)}


def squad_v2_scores(predictions: dict[str, str], references: dict[str, list[str]], na_probs: dict | None = None,
                    na_prob_thresh: float = 1.0) -> dict:
    """The official script's output for predictions ({id: text, "" for no answer}), references ({id: reference
    texts, [] when unanswerable}) and no-answer scores ({id: float}; all 0.0 when not given, as without
    `--na-prob-file`, and then without the best_* entries)."""
    has_answer = {q: bool(a) for q, a in references.items()}
    exact_raw, f1_raw = raw_scores(predictions, references)
    given = na_probs is not None
    na_probs = na_probs if given else {q: 0.0 for q in predictions}
    exact = apply_no_answer_threshold(exact_raw, na_probs, has_answer, na_prob_thresh)
    f1 = apply_no_answer_threshold(f1_raw, na_probs, has_answer, na_prob_thresh)
    out = _totals(exact, f1, exact)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, h in has_answer.items() if h == wanted]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in _totals(exact, f1, qids).items()})
    if given:
        out["best_exact"], out["best_exact_thresh"] = best_threshold(predictions, exact_raw, na_probs, has_answer)
        out["best_f1"], out["best_f1_thresh"] = best_threshold(predictions, f1_raw, na_probs, has_answer)
    return out


_FEATURES = datasets.Features({
    "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string"),
                    "no_answer_probability": datasets.Value("float64")},
    "references": {"id": datasets.Value("string"), "answers": datasets.Sequence(
        {"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})},
})


class SquadV2(LocalMetric):
    """SQuAD 2.0 metrics (percent; thresholds in the no-answer score's units), computed locally; the hub
    `squad_v2` metric's interface. `no_answer_threshold` is the official script's `--na-prob-thresh`."""

    keys: tuple[str, ...] = KEYS

    def _info(self):
        return evaluate.MetricInfo(
            description="SQuAD 2.0 exact match and F1 (all, answerable, unanswerable) and the best no-answer "
                        "thresholds, in percent, as the official evaluate-v2.0.py.",
            citation="Rajpurkar, Jia and Liang 2018, Know What You Don't Know: Unanswerable Questions for SQuAD",
            inputs_description="predictions: [{id, prediction_text ('' = no answer), no_answer_probability}]; "
                               "references: [{id, answers: {text: [...], answer_start: [...]}}]", features=_FEATURES)

    def _compute(self, predictions, references, no_answer_threshold: float = 1.0):
        scores = squad_v2_scores({p["id"]: p["prediction_text"] for p in predictions},
                                 {r["id"]: list(r["answers"]["text"]) for r in references},
                                 {p["id"]: p["no_answer_probability"] for p in predictions}, no_answer_threshold)
        return {k: scores[k] for k in self.keys if k in scores}


def _only(key: str) -> type[SquadV2]:
    return type(f"SquadV2{key.replace('_', '')}", (SquadV2,), {"keys": (key,)})


# metric names for a SQuAD 2.0 recipe: "squad_v2" (every entry) or one entry by its name in the official output
METRICS = {"squad_v2": SquadV2, **{k: _only(k) for k in KEYS}}
