"""Answer spans of extractive QA, as functions over windows' tokens and answers in numpy (no model, no tokenizer).

A *window* is one model input `[CLS] question [SEP] context-piece [SEP]`; a long context gives several windows
that overlap. Per window we know each token's character `offsets` into its text (`[tokens, 2]`, end exclusive)
and the inclusive token range `context_start..context_end` of the context piece.

- `label_window`: training target of a window: the tokens of the answer's first and last character, or the
  [CLS] position for both when the window does not hold the whole answer (`say_unreachable` counts the questions
  no window holds);
- `best_spans`: a window's best (start, end) token pairs: the `n_best` highest start and end logits among the
  context tokens (its `Candidates`: all that ranking needs, kept by evaluation instead of the window's logits),
  then only pairs with end ≥ start and at most `max_answer_length` tokens, ranked by start logit + end logit;
- `rank_answers`: an example's answers over all its windows: spans mapped to characters of the original
  context (so the text is cut from it, spacing and case intact; white space at a span's ends, which byte-level and
  sentencepiece tokens carry, left out), the same span from overlapping windows kept once
  with its best logit, the `n_best` best, each with a probability (softmax over those kept);
- SQuAD 2.0 (questions may have no answer; BERT §4.3): `null_logit`, the no-answer score of a question (the
  [CLS] "span"), `with_null`, the n best spans against it (null odds = null logit − best span logit), and
  `decide`, the answer: "no answer" when the null odds exceed a threshold, else the best span.
- `window_rows`: the offsets and context range of each window of an encoded Dataset, read from Arrow in chunks;
  `question_windows`: the windows of each question in turn, with their `Candidates`;
- `consensus_first`: which reference answer a training question with several trains on (`train_answer:
  consensus`, the one the others agree with most); `training_answers`: a training set's questions so ordered.

Example:
```python
>>> offsets = np.array([[0, 0], [0, 3], [0, 0], [0, 5], [6, 11], [0, 0]])  # [CLS] who [SEP] hello world [SEP]
>>> start = np.array([9.0, 8, 0, 1, 3, 0]); end = np.array([9.0, 0, 0, 1, 4, 0])
>>> rank_answers([Window(start, end, offsets, 3, 4)], "hello world", n_best=2)[0]["text"]
'world'
```
"""

from __future__ import annotations

from typing import NamedTuple

import datasets
import numpy as np

from ..errors import BertkitError
from ..utils import say
from .scores import softmax


class Window(NamedTuple):
    start_logits: np.ndarray  # [tokens]
    end_logits: np.ndarray  # [tokens]
    offsets: np.ndarray  # [tokens, 2] character (start, end) of each token in its own text
    context_start: int  # first context token (inclusive)
    context_end: int  # last context token (inclusive)


def label_window(offsets: np.ndarray, context_start: int, context_end: int, start_char: int, end_char: int,
                 cls_index: int = 0) -> tuple[int, int]:
    """(start token, end token) of the answer characters `[start_char, end_char)` in this window, or
    (cls_index, cls_index) when the window's context piece does not contain the whole answer."""
    offsets = np.asarray(offsets)
    if context_end < context_start:  # no context tokens at all
        return cls_index, cls_index
    starts = offsets[context_start:context_end + 1, 0]  # [context tokens], non-decreasing
    ends = offsets[context_start:context_end + 1, 1]  # [context tokens], non-decreasing
    if starts[0] > start_char or ends[-1] < end_char:
        return cls_index, cls_index  # the answer begins before or ends after this piece of the context
    start = context_start + int(np.searchsorted(starts, start_char, side="right")) - 1  # last token starting ≤ it
    end = context_start + int(np.searchsorted(ends, end_char, side="left"))  # first token ending ≥ it
    return start, end


def say_unreachable(examples: datasets.Dataset, features: datasets.Dataset) -> None:
    """How many answerable questions have their answer in no window (longer than a window's room for context): they
    train on [CLS], as run_qa.py's do, and cannot be answered right; said, not hidden."""
    found = [False] * len(examples)
    for q, s, lo, hi in zip(features["example_index"], features["start_positions"], features["context_start"],
                            features["context_end"], strict=True):
        found[q] = found[q] or lo <= s <= hi  # a span in the context: the answer is in this window
    missed = sum(bool(a["text"]) and not f for a, f in zip(examples["answers"], found, strict=True))
    if missed:
        say(f"{missed} of {len(examples)} question(s) have their answer in no window (longer than a window's room "
            "for context): their windows target [CLS], as run_qa.py's do")


class Candidates(NamedTuple):
    """What answer ranking needs of one window's logits, kept instead of them (`candidates`): the `n_best` highest
    start and the `n_best` highest end logits among its context tokens, with their positions (ascending), and the
    [CLS] start and end logits. About 4 × n_best + 2 numbers a window, not 2 × its tokens."""

    start_top: np.ndarray  # [k ≤ n_best] token positions, ascending
    start_top_logits: np.ndarray  # [k]
    end_top: np.ndarray  # [k] token positions, ascending
    end_top_logits: np.ndarray  # [k]
    cls_logits: np.ndarray  # [2] start and end logit at [CLS] (position 0)


def _top(logits: np.ndarray, context_start: int, context_end: int, n_best: int) -> np.ndarray:
    """[k] positions of the `n_best` highest logits among the context tokens (ties: the earlier), ascending."""
    context = np.arange(context_start, max(context_end + 1, context_start))  # [c] token indices of the context
    return np.sort(context[np.argsort(-logits[context], kind="stable")[:n_best]])


def candidates(start_logits: np.ndarray, end_logits: np.ndarray, context_start: int, context_end: int,
               n_best: int = 20) -> Candidates:
    """One window's `Candidates` from its full start and end logits ([tokens] each)."""
    s, e = _top(start_logits, context_start, context_end, n_best), _top(end_logits, context_start, context_end, n_best)
    return Candidates(s, start_logits[s], e, end_logits[e], np.array([start_logits[0], end_logits[0]]))


def candidate_spans(c: Candidates, n_best: int = 20, max_answer_length: int = 30) -> list[tuple[float, int, int]]:
    """Up to `n_best` (start logit + end logit, start token, end token) of one window, best first: pairs of its
    candidate starts and ends with end ≥ start and at most `max_answer_length` tokens."""
    if not len(c.start_top) or not len(c.end_top):
        return []
    s_order = np.argsort(-c.start_top_logits, kind="stable")  # best first; ties: the earlier position
    e_order = np.argsort(-c.end_top_logits, kind="stable")
    top_start, top_end = c.start_top[s_order], c.end_top[e_order]  # [k_start], [k_end]
    scores = c.start_top_logits[s_order][:, None] + c.end_top_logits[e_order][None, :]  # [k_start, k_end]
    length = top_end[None, :] - top_start[:, None] + 1  # [k_start, k_end] tokens in the span
    si, ei = np.nonzero((length >= 1) & (length <= max_answer_length))  # [pairs] valid (end ≥ start, short)
    order = np.argsort(-scores[si, ei], kind="stable")[:n_best]  # [≤ n_best] best pairs first
    return [(float(scores[si[o], ei[o]]), int(top_start[si[o]]), int(top_end[ei[o]])) for o in order]


def best_spans(start_logits: np.ndarray, end_logits: np.ndarray, context_start: int, context_end: int,
               n_best: int = 20, max_answer_length: int = 30) -> list[tuple[float, int, int]]:
    """Up to `n_best` (start logit + end logit, start token, end token) of one window, best first."""
    if context_end < context_start:
        return []
    return candidate_spans(candidates(start_logits, end_logits, context_start, context_end, n_best), n_best,
                           max_answer_length)


def trim_span(context: str, start: int, end: int) -> tuple[int, int]:
    """Character span [start, end) without white space at its ends: byte-level BPE ('Ġred') and sentencepiece
    ('▁red') tokenizers give a token the offsets of the space before it too."""
    while start < end and context[start].isspace():
        start += 1
    while end > start and context[end - 1].isspace():
        end -= 1
    return start, end


def rank_answers(windows: list[Window], context: str, n_best: int = 20, max_answer_length: int = 30) -> list[dict]:
    """The example's best answers over all its windows: [{text, score, logit, start, end}], best first.

    `start`/`end` are character offsets into `context` (end exclusive: `context[start:end] == text`), `logit` is
    start logit + end logit, and `score` the probability of the answer among those returned.
    """
    return rank_candidates([(candidates(w.start_logits, w.end_logits, w.context_start, w.context_end, n_best),
                             w.offsets) for w in windows], context, n_best, max_answer_length)


def rank_candidates(windows: list[tuple[Candidates, np.ndarray]], context: str, n_best: int = 20,
                    max_answer_length: int = 30) -> list[dict]:
    """`rank_answers` over windows given as (their `Candidates`, their offsets [tokens, 2])."""
    best: dict[tuple[int, int], float] = {}  # (start char, end char) → best logit over the windows
    for c, offsets in windows:
        for logit, s, e in candidate_spans(c, n_best, max_answer_length):
            span = trim_span(context, int(offsets[s][0]), int(offsets[e][1]))
            if span[0] == span[1]:
                continue  # white space only (a sentencepiece '▁' piece alone)
            if span not in best or logit > best[span]:
                best[span] = logit
    ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:n_best]
    if not ranked:
        return []
    probs = softmax(np.array([logit for _, logit in ranked]))  # [answers]
    return [{"text": context[a:b], "score": float(p), "logit": logit, "start": a, "end": b}
            for ((a, b), logit), p in zip(ranked, probs, strict=True)]


def null_logit(windows: list[Window] | list[Candidates]) -> float:
    """A question's no-answer score: start logit + end logit at [CLS] (position 0 of every window), the minimum over
    its windows, as Google's run_squad.py and Hugging Face's `postprocess_qa_predictions` take it."""
    return min(float(w.cls_logits[0] + w.cls_logits[1]) if isinstance(w, Candidates)
               else float(w.start_logits[0] + w.end_logits[0]) for w in windows)


def with_null(answers: list[dict], null: float) -> tuple[list[dict], float, float]:
    """SQuAD 2.0: (the answers re-scored with probabilities over the spans and the null answer together, the null
    answer's probability, the null odds). Null odds = null logit − the best span's logit (run_squad.py's
    `score_diff`; a question without any span counts its best span logit as 0, as run_qa.py's empty prediction)."""
    probs = softmax(np.array([a["logit"] for a in answers] + [null]))  # [answers + 1], the null last
    odds = null - (answers[0]["logit"] if answers else 0.0)
    spans = [{**a, "score": float(p)} for a, p in zip(answers, probs[:-1], strict=True)]
    return spans, float(probs[-1]), float(odds)


def decide(answers: list[dict], null_odds: float, null_probability: float, threshold: float) -> dict:
    """{text, score, start, end, no_answer}: "no answer" (text "", the null's probability, start = end = 0) when
    `null_odds` > `threshold` or there is no span, else the best span."""
    if null_odds > threshold or not answers:
        return {"text": "", "score": null_probability, "start": 0, "end": 0, "no_answer": True}
    top = answers[0]
    return {"text": top["text"], "score": top["score"], "start": top["start"], "end": top["end"], "no_answer": False}


def window_rows(features, chunk: int = 1024):
    """(question, offsets [tokens, 2], context_start, context_end) of each window, in order, read `chunk` windows at
    a time (from Arrow: one array of offsets per chunk, not Python lists)."""
    names = ["example_index", "offsets", "context_start", "context_end"]
    if not isinstance(features, datasets.Dataset):
        yield from zip(*(features[n] for n in names), strict=True)
        return
    for part in features.select_columns(names).with_format("arrow").iter(batch_size=chunk):
        offsets = part["offsets"].combine_chunks()  # list<list<int>>: [windows][tokens][2]
        bounds = offsets.offsets.to_numpy()  # [windows + 1] token bounds of each window (from the slice's start)
        flat = offsets.flatten().flatten().to_numpy().reshape(-1, 2)  # [tokens of the chunk, 2]
        bounds = bounds - bounds[0]
        q, start, end = (part[n].to_numpy() for n in ("example_index", "context_start", "context_end"))
        for w in range(len(q)):
            yield int(q[w]), flat[bounds[w]:bounds[w + 1]], int(start[w]), int(end[w])


def question_windows(outputs, features, n_questions: int, n_best: int = 20):
    """Each question's windows in turn, `n_questions` lists of (Candidates, offsets [tokens, 2]): a question's
    windows are consecutive features (`example_index`); `outputs[i]` is window i's start and end logits or its
    `Candidates` (evaluation's `output_reducer`)."""
    wins: list[tuple[Candidates, np.ndarray]] = []  # the current question's windows
    current = 0
    for i, (q, offsets, start, end) in enumerate(window_rows(features)):
        while current < q:  # the windows of question `current` are complete
            yield wins
            wins, current = [], current + 1
        if q < current:
            raise BertkitError(f"window {i} belongs to question {q}, whose windows came before")
        out = outputs[i]
        c = Candidates(**out) if "cls_logits" in out else \
            candidates(out["start_logits"], out["end_logits"], start, end, n_best)
        wins.append((c, np.asarray(offsets)))
    while current < n_questions:
        yield wins
        wins, current = [], current + 1


def consensus_first(answers: dict) -> dict:
    """`answers` reordered so the reference with the highest mean F1 against the others comes first (ties to the
    earliest); training labels the first one. Official SQuAD training questions have one answer; evaluation-style
    sets (three crowd answers) often disagree on a span's edges ("Santa Clara" / "Santa Clara, California")."""
    texts = answers["text"]
    if len(texts) < 2:
        return answers
    from ..metrics.squad import f1_score  # (with evaluate: only where a run reads evaluation-style answers)

    agreement = [sum(f1_score(t, o) for j, o in enumerate(texts) if j != i) for i, t in enumerate(texts)]
    best = max(range(len(texts)), key=lambda i: (agreement[i], -i))
    order = [best] + [i for i in range(len(texts)) if i != best]
    return {"text": [texts[i] for i in order], "answer_start": [answers["answer_start"][i] for i in order]}


def training_answers(train: datasets.Dataset, how: str) -> datasets.Dataset:
    """The training questions with the reference each one trains on first: as the file has them ('first'), or
    the one the other references agree with most ('consensus', `consensus_first`)."""
    if how == "first":
        return train
    columns = train.to_dict()
    columns["answers"] = [consensus_first(a) for a in columns["answers"]]
    moved = sum(bool(a["text"]) and (a["answer_start"][0] != b["answer_start"][0] or a["text"][0] != b["text"][0])
                for a, b in zip(columns["answers"], train["answers"], strict=True))
    say(f"train_answer consensus: {moved} of {len(train)} training questions train on another reference than their "
        "first")
    return datasets.Dataset.from_dict(columns, features=train.features)
