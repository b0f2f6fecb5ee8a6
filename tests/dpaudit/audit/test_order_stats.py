"""The order-statistics test (Xiang et al. 2025) for products of μ-GDP channels: its p-value against an independent
numerical integration (an upper bound, and close), the r = n identity, validity and power on the idealised
Gaussian product, a broken variant that ignores the selection of the r most confident guesses, and the ε it
reports."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

from dpaudit.audit.order_stats import mean_error_above, order_stats_epsilon, order_stats_mu, order_stats_p_value
from dpaudit.audit.steinke import GuessCounts, rejects
from dpaudit.audit.tradeoff import GaussianFamily
from dpaudit.errors import InvalidParameter


def integrated_p_value(mu: float, n: int, r: int, errors: int) -> float:
    """P[T ≤ errors] by adaptive quadrature over V = 1 − W ~ Beta(r + 1, n − r), A(s) = V solved by brentq."""
    a, b = r + 1, n - r

    def integrand(v: float) -> float:
        s = optimize.brentq(lambda s: special.ndtr(mu / 2 - s) + special.ndtr(-mu / 2 - s) - v, 0, mu / 2 + 40,
                            xtol=1e-14)
        return stats.beta.pdf(v, a, b) * stats.binom.cdf(errors, r, special.ndtr(-mu / 2 - s) / v)

    lo, hi = stats.beta.ppf([1e-13, 1 - 1e-13], a, b)
    return integrate.quad(integrand, lo, hi, limit=500, epsabs=1e-12, points=[a / (a + b)])[0]


def simulate_errors(mu: float, n: int, r: int, rng: np.random.Generator) -> int:
    """One run of the product of n μ-GDP channels y_i = μ b_i + N(0, 1); the r most confident MAP guesses."""
    bits = rng.integers(0, 2, n)
    y = mu * bits + rng.normal(size=n)
    top = np.argsort(np.abs(y - mu / 2), kind="stable")[-r:]
    return int(((y[top] > mu / 2) != bits[top]).sum())


@pytest.mark.parametrize(("mu", "n", "r", "errors"), [(1.0, 50, 10, 1), (2.0, 200, 40, 3), (1.0, 1000, 100, 10)])
def test_p_value_bounds_the_integral_from_above_and_closely(mu, n, r, errors):
    exact = integrated_p_value(mu, n, r, errors)
    ours = order_stats_p_value(mu, GuessCounts(n, r, r - errors))
    assert exact - 1e-9 <= ours <= exact + 2e-4


def test_all_guesses_released_is_the_binomial_of_the_bayes_error():
    counts = GuessCounts(1000, 1000, 700)
    assert order_stats_p_value(1.0, counts) == pytest.approx(stats.binom.cdf(300, 1000, special.ndtr(-0.5)), rel=1e-12)


def test_mean_error_above_never_exceeds_the_exact_value():
    mu, fractions = 1.5, np.array([1e-6, 1e-3, 0.1, 0.5, 0.9, 1.0])
    exact = []
    for v in fractions:
        s = optimize.brentq(lambda s, v=v: special.ndtr(mu / 2 - s) + special.ndtr(-mu / 2 - s) - v, 0, 40,
                            xtol=1e-15) if v < 1 else 0.0
        exact.append(special.ndtr(-mu / 2 - s) / v)
    ours = mean_error_above(mu, fractions)
    assert np.all(ours <= np.array(exact) * (1 + 1e-12)) and ours == pytest.approx(exact, rel=1e-9)
    assert mean_error_above(0.0, fractions) == pytest.approx(0.5)


def test_validity_and_power_on_the_gaussian_product():
    """n = 300 channels y_i = b_i + N(0, 1) (exactly 1-GDP each, independent), r = 60 released guesses.

    Stated power: 300 seeded runs. Under the true claim μ = 1 each run rejects with probability ≤ 0.05, so more
    than 28 rejections has probability < 1e-3 (this seed: 15). The broken claim μ = 0.25 (4x the real noise) is
    rejected whenever at most 16 of the 60 guesses are wrong, and about 8 are expected: each run rejects with
    probability > 0.99; we ask for ≥ 95% (this seed: 300). A broken variant that ignores the selection (prices the
    r released guesses at the average Bayes error Φ(−μ/2) instead of the order statistics' γ̄) rejects the true
    claim in most runs (this seed: 286), and the same limit catches it.
    """
    rng = np.random.default_rng(11)
    n, r, runs, level = 300, 60, 300, 0.05
    true, broken_claim, broken_test = 0, 0, 0
    for _ in range(runs):
        errors = simulate_errors(1.0, n, r, rng)
        counts = GuessCounts(n, r, r - errors)
        true += rejects(order_stats_p_value(1.0, counts), level)
        broken_claim += rejects(order_stats_p_value(0.25, counts), level)
        broken_test += rejects(float(stats.binom.cdf(errors, r, special.ndtr(-0.5))), level)
    limit = stats.binom.ppf(1 - 1e-3, runs, level)
    assert true <= limit
    assert broken_claim >= 0.95 * runs
    assert broken_test > limit


def test_epsilon_lb_is_a_rejected_claim_and_below_the_truth_in_expectation():
    counts = GuessCounts(10**5, 10**5, 10**5 - 30854)     # the expected errors of a 1-GDP product, all guessed
    mu = order_stats_mu(counts)
    assert rejects(order_stats_p_value(mu, counts), 0.05)
    assert not rejects(order_stats_p_value(mu * 1.001, counts), 0.05)
    eps = order_stats_epsilon(counts, 1e-5)
    assert eps == GaussianFamily().epsilon(mu, 1e-5)
    assert 4.0 < eps < GaussianFamily().epsilon(1.0, 1e-5)


def test_chance_level_guessing_certifies_nothing():
    assert order_stats_epsilon(GuessCounts(1000, 100, 50), 1e-5) == 0.0


def test_bad_input_is_refused():
    with pytest.raises(InvalidParameter, match="mu"):
        order_stats_p_value(-1.0, GuessCounts(10, 5, 5))
    with pytest.raises(InvalidParameter, match="level"):
        order_stats_mu(GuessCounts(10, 5, 5), 1.5)
