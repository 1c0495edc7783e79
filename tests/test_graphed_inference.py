"""GPU inference (`bertkit.graphs`) checked on a CPU: token-budget batches over fixed lengths cover every row once,
padded rows and positions change no answer, and a "graph" stand-in that calls the forward again on its static inputs
(as a replay does) gives the eager path's outputs; a capture that fails leaves the forward eager."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from bertkit.graphs import BUCKETS, GraphedForward, budget_batches, pad_rows, sequences_per_row

from .conftest import gpu_inference_path

TEXTS = ["the film was good and funny", "a dull , boring plot that goes on and on and never ends at all", "wonderful",
         "the story is quite weak"] * 9


def test_budget_batches_cover_every_row_once_in_few_shapes():
    rng = random.Random(0)
    lengths = [rng.randint(3, 600) for _ in range(3000)]
    batches = budget_batches(lengths, tokens=4096)
    seen = sorted(i for idx, _, _ in batches for i in idx)
    assert seen == list(range(len(lengths)))
    for idx, length, rows in batches:
        assert all(lengths[i] <= length for i in idx) and len(idx) <= rows <= max(1, 4096 // length)
        assert length in BUCKETS or length > BUCKETS[-1]
        assert rows == max(1, 4096 // length) or rows & (rows - 1) == 0  # full, or a power of two
    assert budget_batches([7]) == [([0], 16, 1)]  # one request is one row


def test_a_multiple_choice_row_counts_every_ending_against_the_budget():
    lengths = [40] * 1000  # bucket 48
    assert {len(idx) for idx, _, _ in budget_batches(lengths, tokens=4096)} == {4096 // 48, 1000 % (4096 // 48)}
    batches = budget_batches(lengths, tokens=4096, per_row=4)
    assert max(rows for _, _, rows in batches) * 48 * 4 <= 4096 and sorted(i for b in batches for i in b[0]) == [
        *range(1000)]
    assert sequences_per_row([[101, 102], [101, 7, 102]]) == 2
    assert sequences_per_row([101, 7, 102]) == 1 and sequences_per_row([]) == 1


def test_padded_rows_attend_to_one_position():
    batch = {"input_ids": torch.tensor([[101, 5, 102]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    padded = pad_rows(batch, 4, 0)
    assert padded["input_ids"].shape == (4, 3) and padded["attention_mask"][1:].tolist() == [[1, 0, 0]] * 3


@pytest.fixture
def gpu_path(monkeypatch):
    """The GPU path on a CPU: inference takes it, its captures are stand-ins."""
    with gpu_inference_path(monkeypatch):
        yield


def test_predictions_on_the_gpu_path_are_the_plain_paths(tiny_bert, monkeypatch, request):
    from bertkit import MultipleChoice, SequenceClassification, TokenClassification, graphs, inference

    rows = [{"text": t} for t in TEXTS]
    words = [{"sentence": t} for t in TEXTS]
    choices = [{"context": t, "endings": TEXTS[i + 1:i + 4]} for i, t in enumerate(TEXTS[:-3])]
    tasks = [(SequenceClassification.from_pretrained(str(tiny_bert), label_names=["neg", "pos"]), rows),
             (TokenClassification.from_pretrained(str(tiny_bert), label_names=["O", "B-PER", "I-PER"]), words),
             (MultipleChoice.from_pretrained(str(tiny_bert), max_length=32), choices)]
    plain = [task.predict_rows(r, batch_size=4) for task, r in tasks]
    request.getfixturevalue("gpu_path")
    monkeypatch.setattr(graphs, "TOKEN_BUDGET", 256)  # several batches each (multiple choice: 2 rows of 3 × 32)
    positions = []  # the input ids of each batch the GPU path runs

    def bucketed(*args):
        batch = graphs.bucket_batch(*args)
        positions.append(batch["input_ids"].numel())
        return batch

    monkeypatch.setattr(inference, "bucket_batch", bucketed)
    for (task, r), want in zip(tasks, plain, strict=True):
        for _ in range(3):  # eager, captured, replayed
            got = task.predict_rows(r, batch_size=4)
            if isinstance(task, MultipleChoice):  # an untrained head's near-even endings: the probabilities
                np.testing.assert_allclose(*[[a["probabilities"] for a in x] for x in (got, want)], atol=1e-5)
            else:
                assert got == pytest.approx(want, abs=1e-5) if "probabilities" in want[0] else got == want
        forward = task.__dict__["_graphed_forwards"]["fp32"]
        assert forward.graphs and forward.failed is None
        assert len(positions) > 3 and max(positions) <= 256  # every ending counted against the budget
        positions.clear()


@pytest.mark.parametrize("pool", ["mean", "first", "cls", "none"])  # pooled to words on the device, or not
def test_features_on_the_gpu_path_are_the_plain_paths(pool, tiny_bert, request):
    from bertkit.extract.extractor import FeatureExtractor

    sentences = [t.split() for t in TEXTS]
    fx = FeatureExtractor(str(tiny_bert), layers="last2", combine="concat", pool=pool, precision="fp32",
                          batch_size=4, device="cpu")
    plain = fx(sentences)
    request.getfixturevalue("gpu_path")
    for _ in range(3):
        got = fx(sentences)
        for a, b in zip(plain, got, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
    assert len(fx._graphs) == 1 and next(iter(fx._graphs.values())).graphs


def test_a_forward_whose_capture_fails_stays_eager(caplog):
    def failing(fn, inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    calls = []
    forward = GraphedForward(lambda b: calls.append(1) or {"y": b["x"] * 2}, capture=failing)
    x = {"x": torch.ones(2)}
    for _ in range(3):
        assert forward(x)["y"].tolist() == [2.0, 2.0]
    assert len(calls) == 3 and forward.failed.startswith("RuntimeError") and not forward.graphs
    assert "CUDA graph capture failed" in caplog.text
