"""Trade-off curves and families: f̄⁻¹ against a direct numerical inversion of f, ε conversions, conservativeness."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, special

from dpaudit.accounting import get_accountant, pld
from dpaudit.accounting.charges import PoissonGaussianSpec
from dpaudit.audit.fdp import fdp_rejects, fdp_theta
from dpaudit.audit.steinke import GuessCounts
from dpaudit.audit.tradeoff import (
    UNREJECTABLE,
    ApproxDpFamily,
    GaussianCurve,
    GaussianFamily,
    ProfileCurve,
    SubsampledGaussianFamily,
    approx_dp_curve,
    gaussian_delta,
)
from dpaudit.errors import AccountingError, InvalidParameter


def direct_inverse(f, y: float) -> float:
    """inf{x : 1 − f(x) ≥ y} by root finding on the curve itself (f is continuous and non-increasing)."""
    if 1 - f(0.0) >= y:
        return 0.0
    return optimize.brentq(lambda x: (1 - f(x)) - y, 0.0, 1.0, xtol=1e-15, rtol=1e-13)


def gdp(mu):
    return lambda x: float(special.ndtr(special.ndtri(1 - x) - mu))


def approx(eps, delta):
    return lambda x: max(0.0, 1 - delta - math.exp(eps) * x, math.exp(-eps) * (1 - delta - x))


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("y", [1e-6, 1e-3, 0.05, 0.4, 0.9, 0.999])
def test_gaussian_inverse_complement_matches_direct_inversion(mu, y):
    assert GaussianCurve(mu).inverse_complement(y) == pytest.approx(direct_inverse(gdp(mu), y), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(("eps", "delta"), [(0.5, 0.0), (1.0, 1e-3), (3.0, 0.05)])
@pytest.mark.parametrize("y", [1e-4, 0.02, 0.3, 0.7, 0.99])
def test_approx_dp_inverse_complement_matches_direct_inversion(eps, delta, y):
    assert approx_dp_curve(eps, delta).inverse_complement(y) == pytest.approx(
        direct_inverse(approx(eps, delta), y), rel=1e-9, abs=1e-13)


def test_profile_curve_is_the_upper_envelope():
    """Two (ε, δ) pairs: the implied curve is the max of the two, so its f̄⁻¹ is the max of theirs."""
    both = ProfileCurve(np.array([0.5, 2.0]), np.array([0.1, 0.001]))
    for y in (0.01, 0.2, 0.6, 0.95):
        f = lambda x: max(approx(0.5, 0.1)(x), approx(2.0, 0.001)(x))  # noqa: E731
        assert both.inverse_complement(y) == pytest.approx(direct_inverse(f, y), rel=1e-9, abs=1e-13)


def test_gaussian_family_epsilon_reproduces_the_theoretical_row_and_rounds_down():
    """Mahloujifar et al. 2025, Table 1, "theoretical" (δ = 1e-5, truncated to two decimals): 9.99/4.37/1.99/0.92."""
    family = GaussianFamily()
    got = [family.epsilon(1 / sigma, 1e-5) for sigma in (0.5, 1, 2, 4)]
    assert [math.floor(100 * e) / 100 for e in got] == [9.99, 4.37, 1.99, 0.92]
    for sigma, eps in zip((0.5, 1, 2, 4), got, strict=True):
        assert gaussian_delta(1 / sigma, eps) > 1e-5      # just below the true ε: rounded down


def test_subsampled_family_at_q1_is_a_slightly_weaker_gaussian():
    """q = 1, one step is the Gaussian mechanism: the tested curve must be weaker (smaller f̄⁻¹) but close, and the
    ε it reports a lower bound on the exact one."""
    family = SubsampledGaussianFamily(1.0, 1)
    for mu in (0.5, 1.0):
        for y in (1e-4, 0.01, 0.3, 0.9):
            exact = GaussianCurve(mu).inverse_complement(y)
            got = family.curve(mu).inverse_complement(y)
            assert got <= exact * (1 + 1e-12)
            assert got == pytest.approx(exact, rel=1e-3, abs=1e-9)
        exact_eps = GaussianFamily().epsilon(mu, 1e-5)
        assert exact_eps - 0.01 < family.epsilon(mu, 1e-5) <= exact_eps


def test_subsampled_family_epsilon_is_below_the_accountants_upper_bound():
    family = SubsampledGaussianFamily(0.01, 100)
    lower = family.epsilon(1.0, 1e-5)
    upper = get_accountant("pld").epsilon_of_tally({PoissonGaussianSpec(0.01, 1.0): 100}, 1e-5)
    assert 0 < lower <= upper < lower * 1.05


def test_families_refuse_bad_parameters():
    with pytest.raises(InvalidParameter):
        SubsampledGaussianFamily(0.0, 10)
    with pytest.raises(InvalidParameter):
        SubsampledGaussianFamily(0.5, 0)
    with pytest.raises(InvalidParameter):
        ApproxDpFamily(1.0)
    with pytest.raises(InvalidParameter, match="delta"):
        ApproxDpFamily(1e-5).epsilon(1.0, 1e-6)
    with pytest.raises(InvalidParameter, match="profile"):
        ProfileCurve(np.array([1.0]), np.array([0.1, 0.2]))


@pytest.mark.parametrize("outcome", [GuessCounts(1, 1, 1), GuessCounts(100, 40, 40), GuessCounts(10_000, 500, 500),
                                     GuessCounts(1000, 1000, 999)])
def test_the_weakest_curve_is_never_rejected(outcome):
    """f = 0 (f̄⁻¹ = 0) is every mechanism's curve, so Algorithm 3 must not reject it even for perfect guessing."""
    assert UNREJECTABLE.inverse_complement(0.3) == 0.0
    assert not fdp_rejects(UNREJECTABLE, outcome, 0.05)


def test_a_member_too_large_to_build_is_not_rejected_so_the_bound_only_drops(monkeypatch):
    """q = 0.5, one step, 40 of 40 guesses right among 100 canaries: θ = 1/σ = 1 is rejected (the old code reported
    θ = 1.53). With the connect-the-dots limit lowered to 35 000 points (θ = 1 needs 51 230) no leaf above the limit
    is built, θ = 1 is tested against the weakest curve and not rejected, the bisection keeps a θ below it whose own
    curve was built and rejected, and its ε is below θ = 1's: a lower bound still. The ε of a member too large to
    build is refused by name."""
    family, outcome = SubsampledGaussianFamily(0.5, 1), GuessCounts(100, 40, 40)
    monkeypatch.setattr(pld, "MAX_CONNECT_DOTS_POINTS", 35_000)
    built, leaf_pld = [], pld.leaf_pld
    monkeypatch.setattr(pld, "leaf_pld", lambda spec, *args: built.append(spec) or leaf_pld(spec, *args))
    theta, index = fdp_theta(family, [outcome], 0.05)
    assert index == 0 and 0.5 < theta < 1.0
    assert built and all(pld.leaf_size_reason(spec, pld.VALUE_DISCRETIZATION_INTERVAL) is None for spec in built)
    assert fdp_rejects(family.curve(theta), outcome, 0.05) and not fdp_rejects(family.curve(1.0), outcome, 0.05)
    with pytest.raises(AccountingError, match="MAX_CONNECT_DOTS_POINTS = 35000"):
        family.epsilon(1.0, 1e-5)
    lower = family.epsilon(theta, 1e-5)
    monkeypatch.undo()
    assert fdp_rejects(family.curve(1.0), outcome, 0.05)
    assert 0 < lower < family.epsilon(1.0, 1e-5)
