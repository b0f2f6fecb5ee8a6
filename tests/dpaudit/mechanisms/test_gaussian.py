"""Tests of dpaudit.mechanisms.gaussian: the privacy map (δ never under-stated, and tight), the calibration, the event,
coverage and the release.

Independent references: mpmath at 50 significant digits (Balle & Wang's δ(ε) formula and brute-force discrete
Gaussian sums), scipy's brentq on the textbook formula, and dp_accounting's RDP → (ε, δ) conversion. The privacy of
the release is tested statistically in tests/statistical/test_additive_privacy.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_delta
from scipy.optimize import brentq
from scipy.stats import norm

from dpaudit.errors import InvalidParameter
from dpaudit.events import GaussianEvent
from dpaudit.mechanisms.discrete_bulk import sample_discrete_gaussian_array
from dpaudit.mechanisms.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    calibrate_discrete_gaussian,
    coverage,
    discrete_gaussian_delta,
    gaussian_event,
    gaussian_event_delta,
    release,
    release_gaussian,
    zcdp_delta,
)
from dpaudit.mechanisms.grid import default_grid, grid_sensitivity
from dpaudit.mechanisms.outputs import Coverage, VectorOutput
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.sensitivity import Neighbouring, Norm, declared

mp.mp.dps = 50


def _exact_analytic_delta(sigma: float, epsilon: float, sensitivity: float) -> mp.mpf:
    """Balle & Wang 2018, Thm. 8, in 50-digit arithmetic."""
    s, e, d = mp.mpf(sigma), mp.mpf(epsilon), mp.mpf(sensitivity)
    return mp.ncdf(d / (2 * s) - e * s / d) - mp.exp(e) * mp.ncdf(-d / (2 * s) - e * s / d)


def _brute_discrete_delta(sigma: float, shift: int, epsilon: float) -> float:
    """Σ_y max(0, P[Y = y] − e^ε P[Y + shift = y]) for Y ~ N_Z(0, σ²), summed with math.fsum over |y| ≤ 60σ + 60."""
    bound = int(60 * sigma) + 60 + shift
    w = {y: math.exp(-y * y / (2 * sigma * sigma)) for y in range(-bound - shift, bound + shift + 1)}
    total = math.fsum(w[y] for y in range(-bound, bound + 1))
    return math.fsum(max(0.0, w[y] - math.exp(epsilon) * w[y - shift]) for y in range(-bound, bound + 1)) / total


# --- analytic Gaussian ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("sigma", "epsilon", "sensitivity"), [
    (1.0, 1.0, 1.0), (3.73, 1.0, 1.0), (0.5, 0.1, 1.0), (10.0, 5.0, 1.0), (2.0, 30.0, 1.0), (0.3, 20.0, 1.0),
    (40.0, 0.01, 3.0), (1.0, 0.0, 1.0), (0.05, 200.0, 1.0), (100.0, 2.0, 1.0),
])
def test_analytic_delta_is_a_tight_upper_bound(sigma: float, epsilon: float, sensitivity: float) -> None:
    exact = _exact_analytic_delta(sigma, epsilon, sensitivity)
    got = analytic_gaussian_delta(sigma, epsilon, sensitivity)
    assert got >= exact
    assert got <= exact * (1 + 1e-9) or got <= 1e-300


def test_analytic_delta_is_stable_for_large_epsilon() -> None:
    # The plain formula gives NaN here (e^ε overflows while Φ(b) underflows); the log-domain one keeps 10 digits.
    sigma, epsilon = 0.01, 6000.0
    with np.errstate(over="ignore", invalid="ignore"):
        naive = norm.cdf(50.0 - 60.0) - np.exp(epsilon) * norm.cdf(-50.0 - 60.0)
    exact = _exact_analytic_delta(sigma, epsilon, 1.0)
    assert not math.isfinite(naive)
    assert analytic_gaussian_delta(sigma, epsilon, 1.0) == pytest.approx(float(exact), rel=1e-9)


def test_analytic_sigma_matches_balle_wang_and_brentq() -> None:
    """ε = 1, δ = 10⁻⁵, Δ = 1: the classical σ = √(2 ln(1.25/δ))/ε ≈ 4.84 is loose; the analytic σ ≈ 3.73."""
    sigma = analytic_gaussian_sigma(1.0, 1e-5, 1.0)
    classical = math.sqrt(2 * math.log(1.25 / 1e-5))
    reference = brentq(lambda s: norm.cdf(0.5 / s - s) - math.e * norm.cdf(-0.5 / s - s) - 1e-5, 1.0, 10.0,
                       xtol=1e-14, rtol=1e-15)
    assert classical == pytest.approx(4.845, abs=1e-3)
    assert sigma == pytest.approx(3.7306, abs=1e-4)
    assert sigma == pytest.approx(reference, rel=1e-9)
    assert sigma < classical


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 4.0, 20.0])
@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-10])
def test_analytic_sigma_meets_delta_and_is_tight(epsilon: float, delta: float) -> None:
    sigma = analytic_gaussian_sigma(epsilon, delta, 2.0)
    assert analytic_gaussian_delta(sigma, epsilon, 2.0) <= delta
    assert _exact_analytic_delta(sigma, epsilon, 2.0) <= delta
    assert analytic_gaussian_delta(sigma * (1 - 1e-8), epsilon, 2.0) > delta


# --- discrete Gaussian ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [0.3, 0.5, 1.0, 2.5, 7.0])
@pytest.mark.parametrize("shift", [1, 2, 5])
@pytest.mark.parametrize("epsilon", [0.0, 0.5, 2.0])
def test_discrete_delta_is_a_tight_upper_bound_on_the_brute_force_sum(sigma: float, shift: int,
                                                                      epsilon: float) -> None:
    exact = _brute_discrete_delta(sigma, shift, epsilon)
    got = discrete_gaussian_delta(sigma, float(shift), epsilon, 1)
    assert got >= exact
    assert got <= exact * (1 + 1e-9)


@pytest.mark.parametrize("sigma", [0.7, 2.0, 6.0])
def test_discrete_delta_worst_shift_is_the_sensitivity(sigma: float) -> None:
    """CKS Thm. 7 is stated for |q(x) − q(x')| ≤ Δ: every smaller integer shift gives a smaller δ."""
    for epsilon in (0.3, 1.0):
        bound = discrete_gaussian_delta(sigma, 4.0, epsilon, 1)
        assert all(_brute_discrete_delta(sigma, k, epsilon) <= bound for k in range(1, 4))


@pytest.mark.parametrize(("sigma", "epsilon"), [(30.0, 0.1), (40.0, 0.5), (200.0, 0.05)])
def test_discrete_delta_is_close_to_the_continuous_one_for_large_sigma(sigma: float, epsilon: float) -> None:
    assert discrete_gaussian_delta(sigma, 1.0, epsilon, 1) == pytest.approx(
        analytic_gaussian_delta(sigma, epsilon, 1.0), rel=2e-2)


@pytest.mark.parametrize(("sigma", "sensitivity", "epsilon", "dimension"), [
    (5.0, 1.0, 1.0, 2), (5.0, 3.7, 1.0, 1), (50.0, 12.3, 0.5, 16), (1e6, 1.0, 1e-6, 1),
])
def test_zcdp_route_is_sound_and_matches_rdp_conversion(sigma: float, sensitivity: float, epsilon: float,
                                                       dimension: int) -> None:
    """d > 1, non-integer Δ, or a sum too long for Thm. 7: the zCDP bound (CKS Thm. 14 + Cor. 13)."""
    got = discrete_gaussian_delta(sigma, sensitivity, epsilon, dimension)
    rho = sensitivity**2 / (2 * sigma**2)
    assert got == pytest.approx(zcdp_delta(rho, epsilon), rel=1e-12)
    # any valid conversion of ρ-zCDP is ≥ the exact δ of the continuous Gaussian with the same ρ
    assert got >= analytic_gaussian_delta(sigma, epsilon, sensitivity) * (1 - 1e-9)


@pytest.mark.parametrize(("rho", "epsilon"), [(0.02, 1.0), (0.5, 3.0), (1e-4, 0.1), (2.0, 10.0)])
def test_zcdp_delta_is_no_worse_than_dp_accounting(rho: float, epsilon: float) -> None:
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128, 256, 512, 1024]
    reference, _ = compute_delta(orders, [a * rho for a in orders], epsilon)
    got = zcdp_delta(rho, epsilon)
    assert got <= reference * (1 + 1e-9)
    assert got >= reference / 1.5


@pytest.mark.parametrize(("epsilon", "delta", "sensitivity", "grid", "dimension"), [
    (1.0, 1e-5, 1.0, default_grid(1.0), 1), (0.3, 1e-6, 2.5, 0.1, 1), (1.0, 1e-3, 1.5, 1.0, 1),
    (2.0, 1e-5, 1.0, default_grid(1.0), 10), (0.5, 1e-8, 0.2, 0.01, 3),
])
def test_discrete_calibration_meets_delta_when_verified(epsilon: float, delta: float, sensitivity: float,
                                                        grid: float, dimension: int) -> None:
    sigma = calibrate_discrete_gaussian(epsilon, delta, sensitivity, grid, dimension)
    event = GaussianEvent(neighbouring=Neighbouring.REPLACE_ONE, sensitivity=declared(sensitivity, Norm.L2, "test"),
                          epsilon=epsilon, delta=delta, sigma=sigma, grid=grid, dimension=dimension)
    assert gaussian_event_delta(event) <= delta
    delta_grid = grid_sensitivity(sensitivity, grid, dimension, Norm.L2)
    assert discrete_gaussian_delta(sigma * (1 - 1e-7) / grid, delta_grid, epsilon, dimension) > delta


def test_gaussian_event_is_calibrated_on_the_default_grid_and_covers_one_vector() -> None:
    event = gaussian_event(Neighbouring.ADD_REMOVE, declared(2.0, Norm.L2, "test"), 1.0, 1e-6, dimension=3)
    assert event.grid == default_grid(2.0)
    assert event.sigma == calibrate_discrete_gaussian(1.0, 1e-6, 2.0, event.grid, 3)
    assert gaussian_event_delta(event) <= 1e-6
    assert coverage(event) == Coverage(VectorOutput(3), 1)
    assert release(event, 0.0, SeededRandom(4)) == release_gaussian(0.0, event.sigma, event.grid, SeededRandom(4))


def test_gaussian_release_is_the_rounded_value_plus_grid_times_the_exact_sample() -> None:
    out = release_gaussian(-1.26, 3.0, 0.25, SeededRandom(9))
    noise = int(sample_discrete_gaussian_array(Fraction(144), 1, SeededRandom(9))[0])  # (σ/γ)² = 12²
    assert out == float((-5 + noise) * Fraction(0.25))  # round(-5.04) = -5



@pytest.mark.parametrize("call", [
    lambda: analytic_gaussian_delta(float("nan"), 1.0, 1.0),
    lambda: analytic_gaussian_delta(1.0, -1.0, 1.0),
    lambda: analytic_gaussian_sigma(1.0, 0.0, 1.0),
    lambda: analytic_gaussian_sigma(0.0, 1e-5, 1.0),
    lambda: discrete_gaussian_delta(1.0, 0.0, 1.0, 1),
    lambda: discrete_gaussian_delta(1.0, 1.0, 1.0, 0),
    lambda: calibrate_discrete_gaussian(1.0, 1.0, 1.0, 0.1, 1),
    lambda: zcdp_delta(-1.0, 1.0),
    lambda: gaussian_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L2, "test"), 1.0, 0.0),
    # extreme but valid-typed: each used to end in an OverflowError or a message about an internal σ
    lambda: analytic_gaussian_sigma(1e-320, 1e-6, 1.0),  # σ overflows
    lambda: analytic_gaussian_sigma(1.0, 5e-324, 1.0),  # 1.25/δ overflows
    lambda: calibrate_discrete_gaussian(1.0, 1e-6, 1e300, 1e-300, 1),  # Δ/γ overflows
    lambda: gaussian_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L2, "test"), 1.0, 1e-6, dimension=10**400),
    lambda: gaussian_event(Neighbouring.ADD_REMOVE, declared(5e-324, Norm.L2, "test"), 1.0, 1e-6),
])
def test_bad_parameters_are_refused(call) -> None:
    with pytest.raises(InvalidParameter):
        call()


@pytest.mark.parametrize(("epsilon", "delta"), [(1e-300, 1e-20), (1e-12, 1e-100), (5e-324, 1e-30)])
def test_a_sigma_beyond_the_sampler_range_is_refused_at_once(epsilon: float, delta: float) -> None:
    """No σ below 2⁵¹ grid units meets these targets: the calibration says so, instead of overflowing or searching to
    the end of the float range."""
    with pytest.raises(InvalidParameter, match=r"2\*\*51 grid units"):
        gaussian_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L2, "test"), epsilon, delta)


@pytest.mark.parametrize(("epsilon", "delta", "sensitivity"), [(1e-9, 1e-30, 1.0), (1e-6, 1e-300, 1.0),
                                                               (1e-300, 1e-6, 1.0), (1e-12, 1e-9, 1.0),
                                                               (1e300, 1e-12, 1.0), (1e300, 0.5, 1e300)])
def test_an_extreme_but_drawable_target_is_calibrated(epsilon: float, delta: float, sensitivity: float) -> None:
    """Targets whose σ is in the sampler's range: they used to overflow (σ² of a huge σ, ε = 10⁻⁹), to be refused
    (the order grid of the zCDP conversion ended at α − 1 = 10⁸, so δ < 3·10⁻⁹ was out of reach at ε = 10⁻⁹;
    at ε = 10³⁰⁰ every order's bound overflowed to −inf and was read as δ = 1) or to end in a NaN (σ² underflowing)."""
    event = gaussian_event(Neighbouring.ADD_REMOVE, declared(sensitivity, Norm.L2, "test"), epsilon, delta)
    assert gaussian_event_delta(event) <= delta
    assert event.sigma / event.grid < 2.0**51
    assert isinstance(release(event, 0.5, SeededRandom(3)), float)


@pytest.mark.parametrize(("rho", "epsilon"), [(1e-22, 4e-11), (1e-22, 2e-11), (1e-18, 3e-9)])
def test_zcdp_delta_reaches_the_large_orders_a_tiny_epsilon_needs(rho: float, epsilon: float) -> None:
    """The best order is about ε/(2ρ) ≥ 10⁹ here: the bound stays above the exact δ of the Gaussian mechanism
    with ρ = Δ²/(2σ²) (which is ρ-zCDP; Balle & Wang's formula in 50 digits) and within a factor 4 of it, where
    orders up to 10⁸ only gave about 3·10⁻⁹."""
    exact = float(_exact_analytic_delta(1.0 / math.sqrt(2.0 * rho), epsilon, 1.0))
    got = zcdp_delta(rho, epsilon)
    assert exact <= got <= 4.0 * exact
