"""Tests of dpaudit.mechanisms.numerics: every helper rounds in the direction that keeps a privacy claim a bound."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpaudit.errors import AccountingError
from dpaudit.mechanisms.numerics import exp_up, grid_units_lower, nudged_up, smallest_passing


def test_exp_up_never_rounds_down_and_never_returns_zero() -> None:
    for x in (-1e-3, -1.0, -50.0, -800.0):
        assert exp_up(x) >= math.exp(x) and exp_up(x) > 0.0
    assert exp_up(3.0) == 1.0
    with pytest.raises(AccountingError, match="NaN"):
        exp_up(math.nan)


@pytest.mark.parametrize("threshold", [1e-300, 0.37, 3.0, 1e200])
def test_smallest_passing_returns_a_passing_value_near_the_threshold(threshold: float) -> None:
    got = smallest_passing(lambda x: x >= threshold, 1.0)
    assert got >= threshold and got <= threshold * (1 + 1e-11)


def test_smallest_passing_refuses_a_check_that_never_passes() -> None:
    with pytest.raises(AccountingError, match="no passing point"):
        smallest_passing(lambda x: False, 1.0)


def test_nudged_up_moves_by_ulps_and_gives_up_after_64() -> None:
    start = 1.0
    assert nudged_up(start, lambda b: b > start, "x") == math.nextafter(start, math.inf)
    with pytest.raises(AccountingError, match="could not round x up"):
        nudged_up(start, lambda b: False, "x")


def test_grid_units_lower_is_the_smaller_reading_of_the_quotient() -> None:
    scale, grid = 0.3, 0.1
    got = grid_units_lower(scale, grid)
    assert got == min(Fraction(scale / grid), Fraction(scale) / Fraction(grid))
    assert got <= Fraction(scale / grid) and got <= Fraction(scale) / Fraction(grid)
