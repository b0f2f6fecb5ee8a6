"""The naive budget split: the common noise factor fits the composition into the budget, and barely."""

from __future__ import annotations

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.tuning import Candidate, candidate_event
from dpaudit_plugins.naive.noise_scale import composed_epsilon, noise_factor

N = 10_000
GRID = [Candidate(lr, 1.0, sigma, epochs, 100) for lr in (0.5, 2.0) for sigma in (0.8, 1.5) for epochs in (1, 2)]
EVENTS = [candidate_event(c, N, "c") for c in GRID]
DELTA = 1e-5


def test_factor_fits_and_is_within_the_tolerance_of_the_smallest():
    unscaled = composed_epsilon(EVENTS, 1.0, DELTA)
    budget = unscaled / 3
    factor = noise_factor(EVENTS, budget, DELTA, rel_tol=0.01)
    assert factor > 1.0
    assert composed_epsilon(EVENTS, factor, DELTA) <= budget
    assert composed_epsilon(EVENTS, factor / 1.01, DELTA) > budget


def test_a_grid_that_fits_is_not_scaled_and_bad_input_is_refused(monkeypatch):
    assert noise_factor(EVENTS, composed_epsilon(EVENTS, 1.0, DELTA) * 1.01, DELTA) == 1.0
    monkeypatch.setattr("dpaudit_plugins.naive.noise_scale.MAX_FACTOR", 4.0)
    for args in (([], 1.0, DELTA), (EVENTS, 0.0, DELTA), (EVENTS, 1.0, 0.0), (EVENTS, 0.01, DELTA)):
        with pytest.raises(InvalidParameter):
            noise_factor(*args)
