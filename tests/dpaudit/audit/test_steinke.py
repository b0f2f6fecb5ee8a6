"""The Steinke et al. (ε, δ) test: exact p-values, a sound ε_lb, validity and power on randomized response."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit.steinke import EPSILON_TOLERANCE, GuessCounts, rejects, steinke_epsilon, steinke_p_value
from dpaudit.errors import InvalidParameter


def brute_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> Fraction:
    """β + α·2mδ by exact rational sums of binomial terms (p_ε taken as the float the code uses, exactly)."""
    p = Fraction(1.0 / (1.0 + math.exp(-epsilon)))
    pmf = [math.comb(r, j) * p**j * (1 - p) ** (r - j) for j in range(r + 1)]
    beta = sum(pmf[v:], Fraction(0))
    alpha = max((sum(pmf[v - i:v], Fraction(0)) / i for i in range(1, v + 1)), default=Fraction(0))
    return min(Fraction(1), beta + alpha * 2 * m * Fraction(delta))


@pytest.mark.parametrize(("m", "r", "v", "epsilon", "delta"), [
    (10, 10, 10, 1.0, 0.0), (50, 20, 17, 0.5, 1e-5), (100, 60, 50, 1.2, 1e-4), (1000, 40, 40, 3.0, 1e-6),
    (120, 120, 70, 0.1, 1e-3), (30, 7, 0, 1.0, 1e-5), (500, 90, 88, 2.5, 0.0),
])
def test_p_value_equals_brute_force_binomial_sums(m, r, v, epsilon, delta):
    exact = brute_p_value(m, r, v, epsilon, delta)
    got = steinke_p_value(GuessCounts(m, r, v), epsilon, delta)
    assert got == pytest.approx(float(exact), rel=1e-11, abs=1e-300)


def test_epsilon_lb_is_rejected_and_the_next_step_is_not():
    counts = GuessCounts(1000, 60, 58)
    eps = steinke_epsilon(counts, 1e-5)
    assert eps > 0
    assert rejects(float(brute_p_value(1000, 60, 58, eps, 1e-5)), 0.05)        # verified with exact sums
    assert not rejects(steinke_p_value(counts, eps + 2 * EPSILON_TOLERANCE, 1e-5), 0.05)


def test_chance_level_guesses_give_zero():
    assert steinke_epsilon(GuessCounts(1000, 100, 50), 1e-5) == 0.0
    assert steinke_epsilon(GuessCounts(1000, 0, 0), 1e-5) == 0.0


def test_ceiling_grows_with_guesses_only_until_the_delta_term_bites():
    """All guesses right: with δ = 0 more guesses always help; the 2mδ term caps the bound (Steinke et al., Fig. 1)."""
    pure = [steinke_epsilon(GuessCounts(10**5, r, r), 0.0) for r in (10, 100, 1000)]
    assert pure[0] < pure[1] < pure[2]
    capped = steinke_epsilon(GuessCounts(10**5, 1000, 1000), 1e-5)
    assert capped < pure[2]


def test_validity_and_power_on_randomized_response():
    """Randomized response at ε is exactly ε-DP and makes V ~ Bin(r, p_ε): claims at the true ε are rejected at
    most 5% of the time; the broken variant (ε = 2 claimed as 1) is rejected almost always.

    Stated power: 2000 seeded runs, r = 100. Under a true claim the rejection rate is ≤ 0.05 (the bound is exact
    for δ = 0), so P[more than 130 rejections] < 1e-4 (binomial tail). The broken variant's rejection probability
    is P[Bin(100, p_2) ≥ v*] with v* the level-0.05 critical value at ε = 1, above 0.99; we ask for ≥ 95%.
    """
    rng = np.random.default_rng(20260518)
    r, runs = 100, 2000
    v_true = rng.binomial(r, 1 / (1 + math.exp(-1.0)), size=runs)
    v_broken = rng.binomial(r, 1 / (1 + math.exp(-2.0)), size=runs)
    reject_true = sum(rejects(steinke_p_value(GuessCounts(r, r, int(v)), 1.0, 0.0), 0.05) for v in v_true)
    reject_broken = sum(rejects(steinke_p_value(GuessCounts(r, r, int(v)), 1.0, 0.0), 0.05) for v in v_broken)
    assert reject_true <= stats.binom.ppf(1 - 1e-4, runs, 0.05)
    assert reject_broken >= 0.95 * runs


@pytest.mark.parametrize(("args", "message"), [
    ((10, 11, 3), "guesses <= canaries"), ((10, 5, 6), "correct <= guesses"), ((0, 0, 0), "canaries"),
])
def test_bad_counts_are_refused(args, message):
    with pytest.raises(InvalidParameter, match=message):
        GuessCounts(*args)


def test_bad_parameters_are_refused():
    counts = GuessCounts(10, 5, 5)
    with pytest.raises(InvalidParameter, match="epsilon"):
        steinke_p_value(counts, -1.0, 0.0)
    with pytest.raises(InvalidParameter, match="delta"):
        steinke_p_value(counts, 1.0, 1.5)
    with pytest.raises(InvalidParameter, match="level"):
        steinke_epsilon(counts, 0.0, level=1.0)
