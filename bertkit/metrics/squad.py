"""SQuAD v1.1 exact match and F1, exactly as the official evaluation script (`evaluate-v1.1.py`) defines them.

- `normalize_answer`: lower-case, drop ASCII punctuation (`string.punctuation`), drop the articles a/an/the,
  collapse whitespace;
- exact match: the normalised prediction equals a normalised reference;
- F1: token-level overlap (a multiset `Counter` intersection) of the normalised prediction and reference;
  0 when nothing overlaps (so an empty prediction scores 0 F1, but 1 exact match against a reference that
  normalises to the empty string, as in the official script);
- each question scores its maximum over the reference answers; the totals are averaged over the questions.

Scores are reported **in percent** (0-100) like the official script and the hub's `evaluate.load("squad")`,
so the numbers compare directly with papers (BERT-base: EM 80.8 / F1 88.5), unlike the classification metrics'
fractions. The modules take the hub `squad` metric's input format and are drop-in local replacements for it.

Example:
```python
>>> Squad().compute(predictions=[{"id": "q1", "prediction_text": "the Denver Broncos"}],
...                 references=[{"id": "q1", "answers": {"text": ["Denver Broncos"], "answer_start": [177]}}])
{'exact_match': 100.0, 'f1': 100.0}
```
"""

from __future__ import annotations

import re
import string
from collections import Counter

import datasets
import evaluate

from .base import LocalMetric

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (the official order)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    num_same = sum((Counter(prediction_tokens) & Counter(ground_truth_tokens)).values())
    if num_same == 0:
        return 0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: dict[str, str], references: dict[str, list[str]]) -> dict[str, float]:
    """Percent exact match and F1 over the questions of `references` ({id: answer texts}); a question without a
    prediction scores 0 (the official script's "unanswered question")."""
    exact = f1 = 0.0
    for qid, truths in references.items():
        if qid not in predictions:
            continue
        exact += max(exact_match_score(predictions[qid], t) for t in truths)
        f1 += max(f1_score(predictions[qid], t) for t in truths)
    total = len(references)
    return {"exact_match": 100.0 * exact / total if total else 0.0, "f1": 100.0 * f1 / total if total else 0.0}


_FEATURES = datasets.Features({
    "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
    "references": {"id": datasets.Value("string"), "answers": datasets.Sequence(
        {"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})},
})


class Squad(LocalMetric):
    """Exact match and F1 of SQuAD v1.1 (percent), computed locally; the hub `squad` metric's interface."""

    keys: tuple[str, ...] = ("exact_match", "f1")

    def _info(self):
        return evaluate.MetricInfo(
            description="SQuAD v1.1 exact match and token F1 in percent, as the official evaluation script.",
            citation="Rajpurkar et al. 2016, SQuAD: 100,000+ Questions for Machine Comprehension of Text",
            inputs_description="predictions: [{id, prediction_text}]; references: [{id, answers: {text: [...], "
                               "answer_start: [...]}}]", features=_FEATURES)

    def _compute(self, predictions, references):
        scores = squad_scores({p["id"]: p["prediction_text"] for p in predictions},
                              {r["id"]: list(r["answers"]["text"]) for r in references})
        return {k: scores[k] for k in self.keys}


class SquadExactMatch(Squad):
    keys = ("exact_match",)


class SquadF1(Squad):
    keys = ("f1",)


METRICS = {"exact_match": SquadExactMatch, "f1": SquadF1, "squad": Squad}
