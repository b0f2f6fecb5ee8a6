"""The f-DP test (Mahloujifar et al. 2025, Algorithm 3): against an exact rational recursion on small m, validity
and power on the Gaussian mechanism, and the ε it reports."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit.fdp import fdp_epsilon, fdp_rejects, fdp_theta
from dpaudit.audit.steinke import GuessCounts
from dpaudit.audit.tradeoff import ApproxDpFamily, GaussianCurve, GaussianFamily, approx_dp_curve
from dpaudit.errors import InvalidParameter


def exact_margin(eps: float, delta: float, m: int, k: int, c: int, level: float) -> Fraction:
    """(r + h) − k/m of Algorithm 3 in exact rational arithmetic, every iteration run (no early stop), with the
    (ε, δ)-DP curve's f̄⁻¹ written out directly: max(0, (y − δ)e^{−ε}, 1 − δ − e^{ε}(1 − y))."""
    e_up, e_down, d, tau = Fraction(math.exp(eps)), Fraction(math.exp(-eps)), Fraction(delta), Fraction(level)

    def inverse(y: Fraction) -> Fraction:
        return max(Fraction(0), (y - d) * e_down, 1 - d - e_up * (1 - y))

    r, h = tau * c / m, tau * (k - c) / m
    for i in range(c - 1, -1, -1):
        grown = max(h, inverse(r))
        r, h = min(Fraction(1), r + Fraction(i, k - i) * (grown - h)), grown
    return r + h - Fraction(k, m)


@pytest.mark.parametrize(("eps", "delta"), [(0.0, 0.0), (0.5, 0.0), (1.0, 1e-3), (0.2, 1e-2)])
def test_algorithm_3_matches_exact_recursion_on_small_m(eps, delta):
    m, level = 12, 0.05
    curve = approx_dp_curve(eps, delta)
    checked = 0
    for k in range(1, m + 1):
        for c in range(0, k + 1):
            exact = exact_margin(eps, delta, m, k, c, level) if c else Fraction(-1)
            if abs(exact) < Fraction(1, 10**6):
                continue          # on the boundary: the slack may legitimately decide either way
            assert fdp_rejects(curve, GuessCounts(m, k, c), level) == (exact > 0), (k, c)
            checked += 1
    assert checked > 60


def test_perfect_privacy_is_never_rejected_at_chance():
    assert not fdp_rejects(GaussianCurve(0.0), GuessCounts(1000, 100, 50), 0.05)
    assert fdp_epsilon(GaussianFamily(), GuessCounts(1000, 100, 50), 1e-5) == 0.0


def test_validity_and_power_on_the_gaussian_mechanism():
    """y_i = b_i + N(0, 1) is exactly 1-GDP. The claim μ = 1 (true) must be rejected at most 5% of the time;
    the broken claim μ = 0.25 (a mechanism with 4x the noise it really has) almost always.

    Stated power: 400 seeded runs, m = 1000, 50 "in" + 50 "out" guesses. Under the true claim P[rejection] ≤ 0.05,
    so P[more than 35 rejections] < 1e-3. Under the broken claim each run rejects with probability > 0.99 (the
    expected 95+ correct of 100 is far above what 0.25-GDP allows); we ask for ≥ 95%.
    """
    rng = np.random.default_rng(7)
    m, runs, true_rejections, broken_rejections = 1000, 400, 0, 0
    for _ in range(runs):
        bits = rng.integers(0, 2, m).astype(bool)
        order = np.argsort(bits + rng.normal(size=m), kind="stable")
        counts = GuessCounts(m, 100, int(bits[order[-50:]].sum() + (~bits[order[:50]]).sum()))
        true_rejections += fdp_rejects(GaussianCurve(1.0), counts, 0.05)
        broken_rejections += fdp_rejects(GaussianCurve(0.25), counts, 0.05)
    assert true_rejections <= stats.binom.ppf(1 - 1e-3, runs, 0.05)
    assert broken_rejections >= 0.95 * runs


def test_epsilon_lb_is_a_rejected_claim():
    counts = GuessCounts(10**5, 1000, 960)
    theta, which = fdp_theta(GaussianFamily(), [counts], 0.05)
    assert which == 0 and fdp_rejects(GaussianCurve(theta), counts, 0.05)
    assert not fdp_rejects(GaussianCurve(theta * 1.001), counts, 0.05)
    assert fdp_epsilon(GaussianFamily(), counts, 1e-5) == GaussianFamily().epsilon(theta, 1e-5)


def test_the_approx_dp_family_needs_no_shape_assumption_and_is_weaker():
    """The (ε, δ) curve is the weakest curve with that ε at δ, so its ε_lb is at most the Gaussian family's."""
    counts = GuessCounts(10**5, 1000, 960)
    assumption_free = fdp_epsilon(ApproxDpFamily(1e-5), counts, 1e-5)
    assert 0 < assumption_free <= fdp_epsilon(GaussianFamily(), counts, 1e-5)


def test_sweep_theta_is_the_best_single_outcome():
    outcomes = [GuessCounts(10**4, 100, 90), GuessCounts(10**4, 1000, 800), GuessCounts(10**4, 10, 10)]
    family = GaussianFamily()
    single = [fdp_theta(family, [o], 0.05 / 3)[0] for o in outcomes]
    theta, which = fdp_theta(family, outcomes, 0.05 / 3)
    assert theta == pytest.approx(max(single), rel=2e-4)
    assert fdp_rejects(GaussianCurve(theta), outcomes[which], 0.05 / 3)


def test_bad_level_is_refused():
    with pytest.raises(InvalidParameter, match="level"):
        fdp_rejects(GaussianCurve(1.0), GuessCounts(10, 5, 5), 0.0)
