"""Unit tests of the additive-noise releases: grid rounding, shapes, exact composition with the samplers, errors.

The privacy of these releases is tested statistically in tests/statistical/test_additive_privacy.py.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.additive import release_gaussian, release_laplace
from dpaudit.mechanisms.discrete import sample_discrete_gaussian, sample_discrete_laplace
from dpaudit.mechanisms.randomness import SeededRandom

RELEASES = [release_laplace, release_gaussian]


def test_laplace_release_is_the_rounded_value_plus_grid_times_the_exact_sample() -> None:
    out = release_laplace(3.3, 2.0, 0.5, SeededRandom(5))
    noise = sample_discrete_laplace(Fraction(4), SeededRandom(5))  # scale/grid = 4 grid units
    assert out == float((7 + noise) * Fraction(0.5))  # round(3.3 / 0.5) = round(6.6) = 7


def test_gaussian_release_is_the_rounded_value_plus_grid_times_the_exact_sample() -> None:
    out = release_gaussian(-1.26, 3.0, 0.25, SeededRandom(9))
    noise = sample_discrete_gaussian(Fraction(144), SeededRandom(9))  # (σ/γ)² = 12²
    assert out == float((-5 + noise) * Fraction(0.25))  # round(-5.04) = -5


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
