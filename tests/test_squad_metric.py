"""SQuAD v1.1 exact match and F1: parity with the official evaluation script (tests/squad_v1_official.py) on
cases that exercise every normalisation rule, and on random strings."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.metrics import SQUAD_BUILTIN, Squad, compute_metrics, resolve_metrics
from bertkit.metrics.squad import exact_match_score, f1_score, squad_scores

from . import squad_v1_official as official

CASES = [
    ("Denver Broncos", ["Denver Broncos"]),
    ("the Denver Broncos!", ["Denver Broncos"]),  # article and punctuation
    ("DENVER   broncos", ["denver broncos"]),  # case and whitespace
    ("An apple, a banana", ["apple banana"]),  # articles go, but not the 'an' inside 'banana'
    ("Broncos", ["Denver Broncos", "the Broncos", "Carolina"]),  # best of several references
    ("Carolina Panthers Denver", ["Denver Broncos", "Carolina Panthers"]),  # partial overlap → F1 only
    ("", ["Denver Broncos"]),  # empty prediction
    ("", ["the"]),  # both normalise to "": exact match 1, F1 0 (as the official script)
    ("a a a b", ["a b b"]),  # multiset overlap of repeated tokens (after articles go: "b" vs "b b")
    ("x x y", ["x y y"]),
    ("24–10", ["24-10"]),  # en dash is not ASCII punctuation: kept
    ("U.S.", ["US"]), ("don't", ["dont"]), ("1,000", ["1000"]),
    ("\tThe\nend\u00a0", ["end"]),  # tabs, newlines, non-breaking space
]


@pytest.mark.parametrize("prediction, references", CASES)
def test_exact_match_and_f1_equal_the_official_definitions(prediction, references):
    for ref in references:
        assert exact_match_score(prediction, ref) == official.exact_match_score(prediction, ref)
        assert f1_score(prediction, ref) == official.f1_score(prediction, ref)


def test_totals_equal_the_official_evaluate_in_percent():
    dataset = [{"paragraphs": [{"context": "", "qas": [
        {"id": str(i), "answers": [{"text": t} for t in refs]} for i, (_, refs) in enumerate(CASES)]}]}]
    predictions = {str(i): p for i, (p, _) in enumerate(CASES)}
    references = {str(i): refs for i, (_, refs) in enumerate(CASES)}
    unanswered = {k: v for k, v in predictions.items() if k != "3"}  # scores 0, as in the official script
    assert squad_scores(unanswered, references) == pytest.approx(official.evaluate(dataset, unanswered), abs=1e-12)
    expected = official.evaluate(dataset, predictions)
    assert squad_scores(predictions, references) == pytest.approx(expected, abs=1e-12)
    module = Squad().compute(predictions=[{"id": k, "prediction_text": v} for k, v in predictions.items()],
                             references=[{"id": k, "answers": {"text": v, "answer_start": [0] * len(v)}}
                                         for k, v in references.items()])
    assert module == pytest.approx(expected, abs=1e-12)
    # by hand: 10 of the 15 cases match exactly; F1 is 1 for those 10 except ("", ["the"]) (0), 0.8 for the partial
    # overlap, 2/3 for each repeated-token case, 0 for the rest
    assert expected == pytest.approx({"exact_match": 100 * 10 / 15, "f1": 100 * (9 + 0.8 + 2 / 3 + 2 / 3) / 15})
    hooks = resolve_metrics(["exact_match", "f1"], builtins=SQUAD_BUILTIN, num_labels=2)
    preds = [{"id": "q", "prediction_text": "the answer"}]
    assert compute_metrics(hooks, preds, [{"id": "q", "answers": {"text": ["Answer"], "answer_start": [0]}}]) == {
        "exact_match": 100.0, "f1": 100.0}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aAnTthe .,!-'x\t\n", max_size=20), st.lists(st.text(alphabet="aAnthe .,-bx", max_size=20),
                                                                     min_size=1, max_size=3))
def test_metric_parity_on_random_strings(prediction, references):
    for fn, ref_fn in ((exact_match_score, official.exact_match_score), (f1_score, official.f1_score)):
        assert official.metric_max_over_ground_truths(ref_fn, prediction, references) == max(
            fn(prediction, r) for r in references)
