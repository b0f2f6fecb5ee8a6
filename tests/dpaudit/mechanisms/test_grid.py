"""Tests of dpaudit.mechanisms.grid: exact rounding, the rounded sensitivity, the default grid, and adding grid noise
(through both additive releases: shapes, ties, refusals)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.gaussian import release_gaussian
from dpaudit.mechanisms.grid import default_grid, grid_sensitivity, round_to_grid, scale_in_grid_units
from dpaudit.mechanisms.laplace import release_laplace
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.sensitivity import Norm


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


def test_default_grid_inflates_a_scalar_sensitivity_by_under_a_tenth_of_a_percent() -> None:
    for sensitivity in (1.0, 0.37, 1e-6, 1234.5):
        grid = default_grid(sensitivity)
        assert grid == sensitivity / 1024
        assert grid_sensitivity(sensitivity, grid, 1, Norm.L1) / (sensitivity / grid) < 1.001



RELEASES = [release_laplace, release_gaussian]


@pytest.mark.parametrize("release", RELEASES)
def test_ties_round_to_the_even_grid_point(release) -> None:
    for tie, even in ((0.5, 0.0), (1.5, 2.0), (-2.5, -2.0)):
        assert release(tie, 1.0, 1.0, SeededRandom(11)) == release(even, 1.0, 1.0, SeededRandom(11))


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("value", [np.arange(6.0).reshape(2, 3), np.arange(5), np.zeros(0), np.array(2.5)])
def test_arrays_keep_their_shape_and_land_on_the_grid(release, value) -> None:
    grid = 0.1
    out = release(value, 1.0, grid, SeededRandom(1))
    assert isinstance(out, np.ndarray) and out.shape == value.shape and out.dtype == np.float64
    units = out / grid
    assert np.allclose(units, np.round(units), rtol=0, atol=1e-9)


@pytest.mark.parametrize("release", RELEASES)
def test_coordinates_get_independent_noise(release) -> None:
    out = release(np.zeros(200), 5.0, 1.0, SeededRandom(2))
    assert len(set(out.tolist())) > 10


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("value", [3, 2.0, np.float32(1.5), np.int64(4)])
def test_scalars_give_floats(release, value) -> None:
    assert type(release(value, 1.0, 1.0, SeededRandom(3))) is float


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), np.array([1.0, np.nan]),
                                   np.array([[0.0], [np.inf]]), np.array(["a"]), True, "1.0", None])
def test_non_finite_or_non_numeric_values_are_refused(release, value) -> None:
    with pytest.raises(InvalidParameter):
        release(value, 1.0, 1.0, SeededRandom(0))


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("noise", "grid"), [(0.0, 1.0), (-1.0, 1.0), (float("nan"), 1.0), (1.0, 0.0),
                                             (1.0, float("inf"))])
def test_bad_noise_or_grid_is_refused(release, noise: float, grid: float) -> None:
    with pytest.raises(InvalidParameter):
        release(1.0, noise, grid, SeededRandom(0))
