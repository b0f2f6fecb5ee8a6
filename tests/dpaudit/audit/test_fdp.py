"""The f-DP test (Mahloujifar et al. 2025, Algorithm 3): against an exact rational recursion on small m, validity
and power on the Gaussian mechanism, and the ε it reports."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from scipy import stats

from dpaudit.audit.fdp import THETA_TOLERANCE, fdp_epsilon, fdp_rejects, fdp_theta
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


def exact_gaussian_rejects(mu: float, counts: GuessCounts, level: float) -> bool:
    """Algorithm 3 against μ-GDP at 40 significant digits (mpmath), no slack: f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ) with
    Φ⁻¹(y) = √2·erfinv(2y − 1). The early stop is exact: once h does not grow, nothing changes again."""
    with mp.workdps(40):
        m, k, c = counts.canaries, counts.guesses, counts.correct
        mu, tau = mp.mpf(mu), mp.mpf(level)
        r, h = tau * c / m, tau * (k - c) / m
        for i in range(c - 1, -1, -1):
            grown = max(h, mp.ncdf(mp.sqrt(2) * mp.erfinv(2 * r - 1) - mu))
            if grown == h:
                break
            r, h = min(mp.mpf(1), r + mp.mpf(i) / (k - i) * (grown - h)), grown
        return r + h > mp.mpf(k) / m


@pytest.mark.parametrize("counts", [GuessCounts(10**5, 3298, 3291), GuessCounts(10**5, 544, 521)])
def test_theta_is_algorithm_3_to_the_bisection_width_at_the_idealised_scale(counts):
    """Issue 18 (a): our ε_lb sits below Mahloujifar et al.'s Table 1 at σ = 0.5 and 1; is our Algorithm 3 looser
    than theirs? These are outcomes of the idealised reproduction at its pre-registered k (σ = 0.5 and σ = 1,
    m = 10⁵). The μ we report is rejected by a 40-digit evaluation (sound) and μ·(1 + 2·tolerance) is not (tight):
    any looser rounding, discretisation or extra union step would fail the second assertion. The ε it leaves on
    the table is below 0.002."""
    family = GaussianFamily()
    theta, _ = fdp_theta(family, [counts], 0.05)
    assert exact_gaussian_rejects(theta, counts, 0.05)
    above = theta * (1 + 2 * THETA_TOLERANCE)
    assert not exact_gaussian_rejects(above, counts, 0.05)
    assert family.epsilon(above, 1e-5) - family.epsilon(theta, 1e-5) < 2e-3


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
