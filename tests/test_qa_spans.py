"""QA spans: windows labelled with the answer tokens or CLS, and answers picked from hand-built logits
(impossible spans, an answer crossing a window boundary, ranking across windows)."""

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.tasks.qa_spans import (
    Window,
    best_spans,
    candidate_spans,
    candidates,
    label_window,
    null_logit,
    question_windows,
    rank_answers,
    rank_candidates,
)


def window(tokens, context_start, context_end, start=None, end=None):
    """A window over `tokens` = [(char start, char end)]; logits 0 except {token: value} in start/end."""
    s, e = np.zeros(len(tokens)), np.zeros(len(tokens))
    for i, v in (start or {}).items():
        s[i] = v
    for i, v in (end or {}).items():
        e[i] = v
    return Window(s, e, np.array(tokens), context_start, context_end)


CONTEXT = "Alpha beta  Gamma delta epsilon zeta"  # two spaces before Gamma: text is cut from the context itself
WORDS = [(0, 5), (6, 10), (12, 17), (18, 23), (24, 31), (32, 36)]
QUESTION = [(0, 0), (0, 3), (4, 8), (0, 0)]  # [CLS] who what [SEP]
W1 = QUESTION + WORDS[:4] + [(0, 0)]  # context tokens 4..7 = Alpha..delta
W2 = QUESTION + WORDS[2:] + [(0, 0)]  # overlap of two words: context tokens 4..7 = Gamma..zeta


def test_best_spans_skip_impossible_spans():
    w = window(W1, 4, 7, start={0: 50, 1: 40, 8: 30, 6: 5, 5: 1, 4: -20}, end={0: 50, 2: 40, 8: 30, 4: 9, 6: 2})
    spans = best_spans(w.start_logits, w.end_logits, 4, 7, n_best=20, max_answer_length=30)
    assert spans[0] == (7.0, 6, 6)  # CLS, question and SEP logits ignored; (6, 4) = 14 ends before it starts
    assert all(4 <= s <= e <= 7 for _, s, e in spans) and len(spans) == 10  # 4 + 3 + 2 + 1 ordered pairs
    assert [x[0] for x in spans] == sorted((x[0] for x in spans), reverse=True)
    short = best_spans(w.start_logits, w.end_logits, 4, 7, n_best=20, max_answer_length=1)
    assert all(s == e for _, s, e in short)
    assert len(best_spans(w.start_logits, w.end_logits, 4, 7, n_best=2, max_answer_length=30)) <= 2
    too_long = window(W1, 4, 7, start={4: 10}, end={7: 10})  # best pair spans 4 tokens
    assert best_spans(too_long.start_logits, too_long.end_logits, 4, 7, 20, 3)[0][1:] != (4, 7)


def test_answer_crossing_a_window_boundary_comes_from_the_window_holding_it_whole():
    # "Gamma delta epsilon": starts in W1 (which ends at delta), whole only in W2
    w1 = window(W1, 4, 7, start={6: 6.0}, end={7: 3.0})  # best in W1: "Gamma delta", 9.0
    w2 = window(W2, 4, 7, start={4: 6.0}, end={6: 5.0})  # "Gamma delta epsilon", 11.0
    answers = rank_answers([w1, w2], CONTEXT)
    assert answers[0]["text"] == "Gamma delta epsilon" and answers[0]["logit"] == 11.0
    assert (answers[0]["start"], answers[0]["end"]) == (12, 31)
    assert answers[1]["text"] == "Gamma delta"  # the same characters from both windows appear once
    assert len({(a["start"], a["end"]) for a in answers}) == len(answers)


def test_answers_ranked_across_windows_with_probabilities():
    w1 = window(W1, 4, 7, start={4: 2.0}, end={5: 2.0})  # "Alpha beta", 4.0
    w2 = window(W2, 4, 7, start={7: 3.0}, end={7: 3.0})  # "zeta", 6.0
    answers = rank_answers([w1, w2], CONTEXT, n_best=5)
    assert [a["text"] for a in answers[:2]] == ["zeta", "Alpha beta"]
    assert len(answers) == 5 and abs(sum(a["score"] for a in answers) - 1) < 1e-9
    assert answers[0]["score"] > answers[1]["score"] and all(CONTEXT[a["start"]:a["end"]] == a["text"]
                                                             for a in answers)
    spaced = rank_answers([window(W1, 4, 7, start={5: 9.0}, end={6: 9.0})], CONTEXT)[0]
    assert spaced["text"] == "beta  Gamma"  # original spacing and case, not detokenised word pieces


def test_label_window_inside_outside_straddling():
    offsets = np.array(W1)
    assert label_window(offsets, 4, 7, 6, 17) == (5, 6)  # "beta  Gamma"
    assert label_window(offsets, 4, 7, 14, 17) == (6, 6)  # "mma" inside a token: that token
    assert label_window(offsets, 4, 7, 24, 31) == (0, 0)  # "epsilon": after this window's piece
    assert label_window(offsets, 4, 7, 18, 31) == (0, 0)  # "delta epsilon": straddles the end
    assert label_window(np.array(W2), 4, 7, 6, 17) == (0, 0)  # "beta  Gamma": straddles the start of W2


def test_windows_of_the_real_tokenizer_label_the_answer_or_cls(tiny_bert):
    import datasets

    from bertkit import QuestionAnswering

    qa = QuestionAnswering.from_pretrained(str(tiny_bert), max_length=32, window_overlap=8, max_question_length=8)
    context = " ".join(f"w{i}" for i in range(40))  # "wN" is two word pieces: a window holds about 10 words
    spans = {"first window": "w3 w4", "straddles windows": "w9 w10 w11 w12", "last window": "w38 w39"}
    for name, text in spans.items():
        start = context.index(text)
        ex = datasets.Dataset.from_dict({"id": [name], "question": ["where is it?"], "context": [context],
                                         "answers": [{"text": [text], "answer_start": [start]}]})
        features = qa.encode(ex)
        assert len(features) > 2 and max(features["length"]) <= 32
        hits = 0
        for f in features:
            s, e = f["start_positions"], f["end_positions"]
            a, b = f["offsets"][f["context_start"]][0], f["offsets"][f["context_end"]][1]
            if (s, e) == (0, 0):
                assert not (a <= start and start + len(text) <= b), name  # CLS only if not wholly inside
            else:
                hits += 1
                assert context[f["offsets"][s][0]:f["offsets"][e][1]] == text, name
        assert hits >= 1, name
    batch = qa.collate([features[i] for i in range(len(features))])
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions"}


def test_long_questions_are_cut_and_overlap_must_fit(tiny_bert):
    from bertkit import QuestionAnswering

    qa = QuestionAnswering.from_pretrained(str(tiny_bert), max_length=32, window_overlap=8, max_question_length=4)
    assert qa._cut_questions(["  one two three four five six "]) == ["one two three four"]
    with pytest.raises(BertkitError, match="window_overlap 21 must be smaller .* = 21"):  # 32 - 8 - 3 special
        QuestionAnswering.from_pretrained(str(tiny_bert), max_length=32, window_overlap=21, max_question_length=8)


def reference_best_spans(start_logits, end_logits, context_start, context_end, n_best, max_answer_length):
    """best_spans as it was before windows were kept as candidates (0.2.0): from the full logits."""
    if context_end < context_start:
        return []
    context = np.arange(context_start, context_end + 1)
    top_start = context[np.argsort(-start_logits[context], kind="stable")[:n_best]]
    top_end = context[np.argsort(-end_logits[context], kind="stable")[:n_best]]
    scores = start_logits[top_start][:, None] + end_logits[top_end][None, :]
    length = top_end[None, :] - top_start[:, None] + 1
    si, ei = np.nonzero((length >= 1) & (length <= max_answer_length))
    order = np.argsort(-scores[si, ei], kind="stable")[:n_best]
    return [(float(scores[si[o], ei[o]]), int(top_start[si[o]]), int(top_end[ei[o]])) for o in order]


@pytest.mark.parametrize("seed", range(40))
def test_candidates_give_the_spans_of_the_full_logits(seed):
    """Kept candidates (n_best positions and logits a side, [CLS]) rank exactly as the full logits did, ties
    included (small integer logits tie often), for windows longer and shorter than n_best."""
    rng = np.random.default_rng(seed)
    tokens = int(rng.integers(4, 120))
    start, end = (rng.integers(-4, 5, tokens).astype(np.float32) for _ in range(2))  # [tokens], many ties
    cs = int(rng.integers(1, tokens))
    ce = int(rng.integers(cs - 1, tokens))  # cs - 1: a window without context tokens
    n_best, longest = int(rng.integers(1, 25)), int(rng.integers(1, 40))
    c = candidates(start, end, cs, ce, n_best)
    assert len(c.start_top) == len(c.end_top) == min(n_best, max(ce - cs + 1, 0))
    expected = reference_best_spans(start, end, cs, ce, n_best, longest)
    assert candidate_spans(c, n_best, longest) == expected == best_spans(start, end, cs, ce, n_best, longest)
    assert null_logit([c]) == null_logit([Window(start, end, None, cs, ce)]) == float(start[0] + end[0])
    offsets = np.stack([np.arange(tokens) * 2, np.arange(tokens) * 2 + 1], axis=1)  # token t = characters 2t..2t+1
    context = "ab" * tokens
    assert rank_candidates([(c, offsets)], context, n_best, longest) == \
        rank_answers([Window(start, end, offsets, cs, ce)], context, n_best, longest)


def test_question_windows_group_consecutive_windows_and_give_a_question_without_any_none():
    """Questions 0 (two windows), 1 (none) and 2 (one), then question 3 with none at the end; `outputs` as logits
    or as `Candidates` give the same; a window of an earlier question after a later one's is refused."""
    offsets = [[0, 0], [0, 3], [4, 7]]
    logits = {"start_logits": np.array([0.0, 2.0, 1.0]), "end_logits": np.array([0.0, 1.0, 3.0])}
    features = {"example_index": [0, 0, 2], "offsets": [offsets] * 3, "context_start": [1, 1, 1],
                "context_end": [2, 2, 2]}
    grouped = list(question_windows([logits] * 3, features, 4, n_best=2))
    assert [len(w) for w in grouped] == [2, 0, 1, 0]
    reduced = [candidates(logits["start_logits"], logits["end_logits"], 1, 2, 2)._asdict()] * 3
    again = list(question_windows(reduced, features, 4, n_best=2))
    for a, b in zip(grouped, again, strict=True):
        for (ca, oa), (cb, ob) in zip(a, b, strict=True):
            assert all(np.array_equal(x, y) for x, y in zip(ca, cb, strict=True)) and np.array_equal(oa, ob)
    with pytest.raises(BertkitError, match="window 2 belongs to question 0, whose windows came before"):
        list(question_windows([logits] * 3, {**features, "example_index": [0, 1, 0]}, 2))
