"""Tests of the AboveThreshold state machine: halting, the query cap, grid rounding and bad input.

Where a test needs a deterministic answer it uses noise scales of 1/1000 grid unit: a discrete Laplace variable
with scale 1/1000 is non-zero with probability 2e^{-1000}/(1 + e^{-1000}) < 10^{-433}, so the comparison is
exactly the rounded one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import BudgetExceeded, InvalidParameter
from dpaudit.mechanisms.above_threshold import AboveThreshold
from dpaudit.mechanisms.randomness import SeededRandom

GRID = 0.5
TINY = GRID / 1000


def _noiseless(threshold: float, max_queries: int = 10, seed: int = 0) -> AboveThreshold:
    return AboveThreshold(threshold, TINY, TINY, GRID, max_queries, SeededRandom(seed))


def test_halts_after_the_first_true():
    at = _noiseless(threshold=1.0)
    assert [at.test(v) for v in (0.0, -3.0, 0.5)] == [False, False, False]
    assert not at.halted
    assert at.test(7.0) is True
    assert at.halted
    assert at.queries_made == 4
    with pytest.raises(BudgetExceeded):
        at.test(0.0)
    assert at.queries_made == 4


def test_refuses_queries_beyond_the_cap():
    at = _noiseless(threshold=100.0, max_queries=3)
    assert [at.test(0.0) for _ in range(3)] == [False, False, False]
    with pytest.raises(BudgetExceeded):
        at.test(1e9)
    assert at.queries_made == 3
    assert not at.halted
    assert at.max_queries == 3


@pytest.mark.parametrize(
    "value, expected",
    # threshold 1.0 = 2 grid units; 0.75 = 1.5 units rounds (to even) to 2, 0.74 to 1, 1.25 = 2.5 to 2.
    [(0.75, True), (0.74, False), (1.25, True), (0.7499999, False), (1.0, True), (-1e6, False), (10**20, True)],
)
def test_compares_rounded_values_on_the_grid(value, expected):
    assert _noiseless(threshold=1.0).test(value) is expected


def test_the_threshold_is_rounded_too():
    # threshold 1.26 = 2.52 units rounds to 3; 1.25 = 2.5 units rounds to 2: below.
    assert _noiseless(threshold=1.26).test(1.25) is False
    assert _noiseless(threshold=1.26).test(1.3) is True


def test_the_noisy_threshold_is_not_exposed():
    at = AboveThreshold(0.0, 1.0, 2.0, 0.01, 5, SeededRandom(1))
    assert not any("threshold" in name and not name.startswith("_") for name in dir(at))


def test_the_same_seed_gives_the_same_answers():
    def run(seed):
        at = AboveThreshold(0.0, 1.0, 2.0, 0.01, 50, SeededRandom(seed))
        answers = []
        while not at.halted and at.queries_made < at.max_queries:
            answers.append(at.test(-1.0))
        return answers

    assert run(5) == run(5)


def test_a_bad_query_is_refused_and_not_counted():
    at = _noiseless(threshold=1.0)
    for bad in (math.nan, math.inf, -math.inf, "1", None, True):
        with pytest.raises(InvalidParameter):
            at.test(bad)
    assert at.queries_made == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": math.nan},
        {"threshold": math.inf},
        {"threshold": "0"},
        {"threshold_scale": 0.0},
        {"threshold_scale": -1.0},
        {"threshold_scale": math.inf},
        {"query_scale": 0.0},
        {"query_scale": math.nan},
        {"grid": 0.0},
        {"grid": -0.1},
        {"max_queries": 0},
        {"max_queries": 2.0},
        {"max_queries": True},
        {"rng": np.random.default_rng(0)},
    ],
)
def test_bad_parameters_are_refused(kwargs):
    args = {"threshold": 0.0, "threshold_scale": 1.0, "query_scale": 2.0, "grid": 0.01, "max_queries": 5,
            "rng": SeededRandom(0)}
    args.update(kwargs)
    with pytest.raises(InvalidParameter):
        AboveThreshold(**args)
