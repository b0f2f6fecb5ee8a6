"""Tests of dpaudit.mechanisms.laplace: the privacy map and calibration (ε never under-stated, in exact arithmetic),
the event, coverage and the release.

The privacy of the release is tested statistically in tests/statistical/test_additive_privacy.py.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.events import LaplaceEvent
from dpaudit.mechanisms.discrete_bulk import bulk_scale, sample_discrete_laplace_array
from dpaudit.mechanisms.grid import default_grid, grid_sensitivity, scale_in_grid_units
from dpaudit.mechanisms.laplace import (
    calibrate_laplace_scale,
    coverage,
    laplace_epsilon,
    laplace_event,
    release,
    release_laplace,
)
from dpaudit.mechanisms.outputs import Coverage, VectorOutput
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.sensitivity import Neighbouring, Norm, declared

AWKWARD = [(1.0, 1.0, default_grid(1.0), 1), (0.1, 1 / 3, 0.1, 1), (1 / 3, 0.7, 0.01, 5), (2.2, 1e-3, 1e-7, 2),
           (0.7, 3.0, 1.0, 1), (1e-3, 123.456, 0.3, 7)]


@pytest.mark.parametrize(("epsilon", "sensitivity", "grid", "dimension"), AWKWARD)
def test_laplace_scale_meets_epsilon_when_verified(epsilon: float, sensitivity: float, grid: float,
                                                   dimension: int) -> None:
    scale = calibrate_laplace_scale(epsilon, sensitivity, grid, dimension)
    event = LaplaceEvent(neighbouring=Neighbouring.REPLACE_ONE, sensitivity=declared(sensitivity, Norm.L1, "test"),
                         epsilon=epsilon, scale=scale, grid=grid, dimension=dimension)
    assert laplace_epsilon(event) <= epsilon
    delta_grid = Fraction(grid_sensitivity(sensitivity, grid, dimension, Norm.L1))
    for units in (Fraction(scale / grid), Fraction(scale) / Fraction(grid)):
        assert delta_grid / units <= Fraction(epsilon)
    assert scale <= grid * float(delta_grid) / epsilon * (1 + 1e-14)


def test_the_map_charges_the_grid_rounding_inflation() -> None:
    """Δ = 1.5 on γ = 1 rounds to neighbours up to ⌊1.5⌋ + 1 = 2 grid units apart: the map is 2/t, not 1.5/t."""
    event = LaplaceEvent(neighbouring=Neighbouring.REPLACE_ONE, sensitivity=declared(1.5, Norm.L1, "test"),
                         epsilon=1.0, scale=2.0, grid=1.0)
    assert laplace_epsilon(event) == 1.0


def test_laplace_event_is_calibrated_on_the_default_grid_and_covers_one_vector() -> None:
    event = laplace_event(Neighbouring.ADD_REMOVE, declared(3.0, Norm.L1, "test"), 0.5, dimension=4)
    assert event.grid == default_grid(3.0)
    assert event.scale == calibrate_laplace_scale(0.5, 3.0, event.grid, 4)
    assert laplace_epsilon(event) <= 0.5
    assert coverage(event) == Coverage(VectorOutput(4), 1)
    assert release(event, 1.0, SeededRandom(4)) == release_laplace(1.0, event.scale, event.grid, SeededRandom(4))


def test_laplace_release_is_the_rounded_value_plus_grid_times_the_exact_sample() -> None:
    out = release_laplace(3.3, 2.0, 0.5, SeededRandom(5))
    noise = int(sample_discrete_laplace_array(Fraction(4), 1, SeededRandom(5))[0])  # scale/grid = 4 grid units
    assert out == float((7 + noise) * Fraction(0.5))  # round(3.3 / 0.5) = round(6.6) = 7



@pytest.mark.parametrize("call", [
    lambda: calibrate_laplace_scale(float("inf"), 1.0, 0.1, 1),
    lambda: calibrate_laplace_scale(1.0, 1.0, 0.0, 1),
    lambda: laplace_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "test"), -1.0),
    lambda: laplace_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L2, "test"), 1.0, dimension=2),
    # extreme but valid-typed: each used to end in a ZeroDivisionError or OverflowError, not a clear refusal
    lambda: calibrate_laplace_scale(1e300, 1e-300, 1e-300, 1),  # b/γ underflows to 0
    lambda: calibrate_laplace_scale(5e-324, 1e-310, default_grid(1e-310), 1),  # b/γ overflows
    lambda: calibrate_laplace_scale(1.0, 1e300, 1e-300, 1),  # Δ/γ overflows
    lambda: laplace_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "test"), 1.0, dimension=10**400),
    lambda: laplace_event(Neighbouring.ADD_REMOVE, declared(5e-324, Norm.L1, "test"), 1.0),  # Δ/2¹⁰ underflows
])
def test_bad_parameters_are_refused(call) -> None:
    with pytest.raises(InvalidParameter):
        call()


def test_a_scale_the_sampler_cannot_draw_is_refused_when_the_event_is_built() -> None:
    """Δ = 1 on γ = 1 is Δ_γ = 2 grid units: ε = 2⁻⁴⁹ gives t = 2⁵⁰ (drawn), ε = 2⁻⁵⁰ gives t = 2⁵¹, which the
    release cannot draw: refused by the event, before anything is charged (it used to be charged, then refused)."""
    sensitivity = declared(1.0, Norm.L1, "test")
    event = laplace_event(Neighbouring.ADD_REMOVE, sensitivity, 2.0**-49, grid=1.0)
    assert event.scale == 2.0**50 and laplace_epsilon(event) == 2.0**-49
    assert isinstance(release(event, 0.0, SeededRandom(1)), float)
    with pytest.raises(InvalidParameter, match=r"2\*\*51"):
        laplace_event(Neighbouring.ADD_REMOVE, sensitivity, 2.0**-50, grid=1.0)


@pytest.mark.parametrize("scale", [Fraction(1e-4), Fraction(1, 3 * 2**70), Fraction(5, 7 * 2**20), Fraction(2.0**-80),
                                   Fraction(1e-300), Fraction(1, 3), Fraction(10**16 + 1, 7)])
def test_the_sampler_draws_a_scale_with_an_int64_denominator_never_a_smaller_one(scale: Fraction) -> None:
    drawn = bulk_scale(scale)
    assert drawn >= scale  # never less noise than calibrated
    assert drawn.denominator <= 2**62 and drawn.numerator < 2**52
    assert drawn - scale <= max(scale / 2**50, Fraction(1, 2**62))


def test_a_huge_epsilon_releases_the_rounded_value() -> None:
    """ε = 10⁷ on the default grid: t = 1025/10⁷ grid units, whose exact denominator exceeds int64 (it used to be
    charged, then crash). The noise is non-zero with probability below 2·exp(−10⁴), so the output is the rounded
    value."""
    event = laplace_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "test"), 1e7)
    assert laplace_epsilon(event) <= 1e7
    assert scale_in_grid_units(event.scale, event.grid).denominator > 2**63
    rounded = [float(round(Fraction(v) / Fraction(event.grid)) * Fraction(event.grid)) for v in (3.3, -0.7)]
    assert release(event, 3.3, SeededRandom(1)) == rounded[0]
    assert np.array_equal(release_laplace(np.array([3.3, -0.7]), event.scale, event.grid, SeededRandom(2)), rounded)
