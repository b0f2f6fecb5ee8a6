"""Tests of exact grid rounding."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.grid import round_to_grid, scale_in_grid_units


@pytest.mark.parametrize(
    "value, grid, expected",
    [(0.0, 0.5, 0), (0.74, 0.5, 1), (0.75, 0.5, 2), (1.25, 0.5, 2), (-0.75, 0.5, -2), (-0.26, 0.5, -1),
     (3, 1.0, 3), (10**30, 1.0, 10**30), (0.3, 0.1, 3)],
)
def test_rounds_to_the_nearest_grid_point_ties_to_even(value, grid, expected):
    assert round_to_grid(value, grid) == expected


def test_rounding_is_exact_not_floating_point():
    # 2**53 + 1 is not a double; an int is rounded exactly.
    assert round_to_grid(2**53 + 1, 1.0) == 2**53 + 1
    # 0.1 + 0.2 = 0.30000000000000004 is 3.0000000000000002 units of the double 0.1: rounded to 3.
    assert round_to_grid(0.1 + 0.2, 0.1) == 3


def test_neighbours_move_by_at_most_floor_plus_one_grid_units():
    # a = 0.5 units rounds down (tie to even), b = a + 2.5 units = 3 units: |Δ| = 3 = ⌊2.5⌋ + 1.
    assert round_to_grid(1.2, 0.4) - round_to_grid(0.2, 0.4) == 3


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1", None, True])
def test_bad_values_are_refused(value):
    with pytest.raises(InvalidParameter):
        round_to_grid(value, 1.0)


@pytest.mark.parametrize("grid", [0.0, -1.0, math.nan, math.inf])
def test_bad_grids_are_refused(grid):
    with pytest.raises(InvalidParameter):
        round_to_grid(1.0, grid)


def test_scale_in_grid_units_takes_the_larger_reading():
    # The float quotient 0.3 / 0.1 = 2.9999999999999996 is rounded down from the exact quotient of the doubles.
    exact = Fraction(0.3) / Fraction(0.1)
    assert exact > Fraction(0.3 / 0.1)
    assert scale_in_grid_units(0.3, 0.1) == exact
    assert scale_in_grid_units(2.0, 0.5) == 4


@pytest.mark.parametrize("scale, grid", [(0.0, 1.0), (1.0, 0.0), (math.nan, 1.0), (1.0, math.inf), ("1", 1.0)])
def test_scale_in_grid_units_refuses_bad_input(scale, grid):
    with pytest.raises(InvalidParameter):
        scale_in_grid_units(scale, grid)
