"""Tests of dpaudit.mechanisms.above_threshold: the privacy map and calibration, the event and coverage, and the
AboveThreshold state machine (halting, the query cap, grid rounding and bad input).

Where a test needs a deterministic answer it uses noise scales of 1/1000 grid unit: a discrete Laplace variable
with scale 1/1000 is non-zero with probability 2e^{-1000}/(1 + e^{-1000}) < 10^{-433}, so the comparison is
exactly the rounded one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import BudgetExceeded, InvalidParameter
from dpaudit.events import AboveThresholdEvent, LaplaceEvent, SelfComposedEvent
from dpaudit.mechanisms.above_threshold import (
    AboveThreshold,
    above_threshold_epsilon,
    above_threshold_event,
    calibrate_above_threshold,
    coverage,
    start_round,
)
from dpaudit.mechanisms.grid import default_grid, grid_sensitivity
from dpaudit.mechanisms.outputs import AboveThresholdRound, Coverage
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.sensitivity import Neighbouring, Norm, declared

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


AWKWARD = [(1.0, 1.0, default_grid(1.0), 1), (0.1, 1 / 3, 0.1, 1), (1 / 3, 0.7, 0.01, 5), (2.2, 1e-3, 1e-7, 2),
           (0.7, 3.0, 1.0, 1), (1e-3, 123.456, 0.3, 7)]


@pytest.mark.parametrize(("epsilon", "sensitivity", "grid", "_dimension"), AWKWARD)
def test_above_threshold_scales_meet_epsilon_when_verified(epsilon: float, sensitivity: float, grid: float,
                                                           _dimension: int) -> None:
    threshold_scale, query_scale = calibrate_above_threshold(epsilon, sensitivity, grid)
    event = AboveThresholdEvent(neighbouring=Neighbouring.REPLACE_ONE,
                                sensitivity=declared(sensitivity, Norm.L1, "test"), epsilon=epsilon,
                                threshold_scale=threshold_scale, query_scale=query_scale, grid=grid, max_queries=10)
    assert above_threshold_epsilon(event) <= epsilon
    delta_grid = grid_sensitivity(sensitivity, grid, 1, Norm.L1)
    assert threshold_scale == pytest.approx(2 * delta_grid * grid / epsilon, rel=1e-14)
    assert query_scale == pytest.approx(4 * delta_grid * grid / epsilon, rel=1e-14)




def test_above_threshold_event_charges_every_round_up_front_and_covers_one_round_each() -> None:
    sens = declared(1.0, Norm.L1, "test")
    one = above_threshold_event(Neighbouring.ADD_REMOVE, sens, 0.5, max_queries=7)
    assert isinstance(one, AboveThresholdEvent) and one.grid == default_grid(1.0)
    assert above_threshold_epsilon(one) <= 0.5
    assert coverage(one) == Coverage(AboveThresholdRound(7), 1)
    three = above_threshold_event(Neighbouring.ADD_REMOVE, sens, 0.5, max_queries=7, rounds=3)
    assert three == SelfComposedEvent(event=one, count=3)
    assert start_round(three, 0.0, SeededRandom(1)).max_queries == 7


def test_start_round_refuses_another_mechanism_s_charge() -> None:
    laplace = LaplaceEvent(neighbouring=Neighbouring.ADD_REMOVE, sensitivity=declared(1.0, Norm.L1, "test"),
                           epsilon=1.0, scale=1.0, grid=0.1)
    with pytest.raises(InvalidParameter, match="not an AboveThreshold charge"):
        start_round(laplace, 0.0, SeededRandom(1))


def test_bad_calibration_parameters_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        calibrate_above_threshold(1.0, 1.0, -0.1)
    # extreme but valid-typed: each used to end in a ZeroDivisionError or OverflowError, not a clear refusal
    for epsilon, sensitivity, grid in [(1e300, 1e-300, 1e-300),  # scale/γ underflows to 0
                                       (5e-324, 1e-310, default_grid(1e-310)),  # scale/γ overflows
                                       (1.0, 1e300, 1e-300),  # Δ/γ overflows
                                       (1.0, 1.7e308, 1.0)]:  # 4·Δ_γ overflows
        with pytest.raises(InvalidParameter):
            calibrate_above_threshold(epsilon, sensitivity, grid)
    with pytest.raises(InvalidParameter):
        above_threshold_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "test"), 1.0, max_queries=0)
