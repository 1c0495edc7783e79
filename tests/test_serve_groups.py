"""The server's grouping of requests by length (`padding_groups`, `Engine._padding_groups`): the least padded cost,
every request whole and once."""

from __future__ import annotations

import itertools
import random

import numpy as np

from bertkit.batching import padding_groups
from bertkit.serve.engine import Engine, Job


def cost(groups, lengths, counts, batch_size, call_cost) -> float:
    total = 0.0
    for g in groups:
        items = sum(counts[i] for i in g)
        total += call_cost * -(-items // batch_size) + items * max(lengths[i] for i in g)
    return total


def brute_force(lengths, counts, batch_size, call_cost) -> float:
    """The least cost over every way of cutting the longest-first order into contiguous runs."""
    order = list(np.argsort(-np.asarray(lengths, dtype=float), kind="stable"))
    best = float("inf")
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        groups, run = [], [order[0]]
        for cut, i in zip(cuts, order[1:], strict=True):
            if cut:
                groups.append(run)
                run = []
            run.append(i)
        best = min(best, cost([*groups, run], lengths, counts, batch_size, call_cost))
    return best


def test_padding_groups_are_the_least_cost_and_hold_every_unit_once():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        lengths = [rng.randint(3, 300) for _ in range(n)]
        counts = [rng.choice([1, 1, 1, 2, 5]) for _ in range(n)]
        batch_size, call_cost = rng.choice([1, 2, 4, 16]), rng.choice([1, 20, 200, 5000])
        groups = padding_groups(lengths, counts, batch_size, call_cost)
        assert sorted(i for g in groups for i in g) == list(range(n))
        assert cost(groups, lengths, counts, batch_size, call_cost) == brute_force(lengths, counts, batch_size,
                                                                                  call_cost)


def test_mixed_lengths_are_split_and_equal_lengths_are_not():
    assert padding_groups([300, 12, 290, 15], [1] * 4, 16, 200) == [[0, 2], [3, 1]]
    assert padding_groups([40] * 12, [1] * 12, 16, 200) == [list(range(12))]
    assert padding_groups([300, 12, 290, 15], [1] * 4, 16, 10_000) == [[0, 2, 3, 1]]  # a call costs too much


def engine(call_chars: float) -> Engine:
    e = Engine.__new__(Engine)  # the grouping only: no model
    e.batch_size, e.call_chars = 16, call_chars
    return e


def test_requests_are_grouped_whole_in_arrival_order():
    long, short = "a long sentence " * 20, "short"
    jobs = [Job(("predict",), [{"text": short}]), Job(("predict",), [{"text": long}, {"text": short}]),
            Job(("predict",), [{"text": short + "!"}]), Job(("predict",), [{"text": long + "?"}])]
    groups = engine(200)._padding_groups(jobs)
    assert sorted(id(j) for g in groups for j in g) == sorted(map(id, jobs))  # every request whole, once
    assert [[jobs.index(j) for j in g] for g in groups] == [[1, 3], [0, 2]]  # by length; in arrival order inside
    assert engine(0)._padding_groups(jobs) == [jobs]  # 0: one call, as before
    words = [Job(("predict",), [{"words": ["Peter", "visited", "Paris"]}]),
             Job(("predict",), [{"words": ["x"] * 200}])]
    assert len(engine(50)._padding_groups(words)) == 2  # pre-split words count too
