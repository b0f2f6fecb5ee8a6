"""Exact-distribution checks of the CKS 2020 samplers (Bernoulli(exp(−γ)), discrete Laplace, discrete Gaussian).

Each check compares samples from a fixed seed with the exact law: a chi-square goodness-of-fit test against the
exact pmf over about 40 cells of equal expected mass (every expected count ≥ 250), or a two-sided exact binomial
test, rejecting at P_VALUE = 10⁻³. False-alarm rate of each check for a correct sampler: ≤ 10⁻³ (exact for the
binomial test, asymptotic for chi-square). Every check is paired with a deliberately broken sampler (parameter
off by 10-20 %) that it must reject; false-alarm and miss rates measured over seeds 0..19 during development,
with the sample sizes below, are stated per test."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binomtest, chisquare

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.discrete import sample_bernoulli_exp, sample_discrete_gaussian, sample_discrete_laplace
from dpaudit.mechanisms.randomness import SeededRandom

P_VALUE = 1e-3
SEED = 7


def _chi_square_p(samples: list[int], pmf: dict[int, float], bins: int = 40) -> float:
    """Chi-square p-value of ``samples`` against ``pmf`` over about ``bins`` cells of equal expected mass.

    Consecutive support points are pooled until a cell holds ≥ 1/bins of the mass (a point with more mass is a
    cell of its own); the leftover right tail joins the last cell, and anything outside the support joins the end
    cells. Equal-mass cells keep the test powerful against scale errors when σ is large (many tiny point masses).
    """
    support = sorted(pmf)
    upper, mass, acc = [], [], 0.0
    for k in support:
        acc += pmf[k]
        if acc >= 1.0 / bins:
            upper.append(k)
            mass.append(acc)
            acc = 0.0
    upper[-1] = support[-1]
    mass[-1] += acc
    cell = np.minimum(np.searchsorted(np.asarray(upper), np.asarray(samples), side="left"), len(upper) - 1)
    observed = np.bincount(cell, minlength=len(upper))
    expected = np.asarray(mass) / math.fsum(mass) * len(samples)
    return float(chisquare(observed, expected).pvalue)


def _laplace_pmf(t: Fraction) -> dict[int, float]:
    """P(Y = y) = (1 − e^{−1/t}) / (1 + e^{−1/t}) · e^{−|y|/t} (CKS 2020, Def. 28)."""
    q = math.exp(-1.0 / float(t))
    bound = int(60 * float(t)) + 60
    return {y: (1 - q) / (1 + q) * q ** abs(y) for y in range(-bound, bound + 1)}


def _gaussian_pmf(sigma2: Fraction) -> dict[int, float]:
    """P(Y = y) ∝ exp(−y²/(2σ²)), normalised over |y| ≤ 40σ + 40 (the rest is below 1e-300)."""
    bound = int(40 * math.sqrt(float(sigma2))) + 40
    weights = {y: math.exp(-y * y / (2 * float(sigma2))) for y in range(-bound, bound + 1)}
    total = math.fsum(weights.values())
    return {y: w / total for y, w in weights.items()}


@pytest.mark.statistical
@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 3), Fraction(5, 2),
                                   Fraction(4)])
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    """Frequency of Bernoulli(exp(−γ)) over 20 000 draws, γ ≤ 1 and γ > 1 (the loop of CKS Alg. 1).

    False-alarm rate ≤ 10⁻³ (measured 0/20 seeds for each γ > 0). Broken variant (a sampler for exp(−1.2γ)):
    miss rate measured 0/20 seeds for each γ > 0.
    """
    rng = SeededRandom(SEED)
    n = 20_000
    hits = sum(sample_bernoulli_exp(gamma, rng) for _ in range(n))
    if gamma == 0:
        assert hits == n
        return
    assert binomtest(hits, n, math.exp(-float(gamma))).pvalue > P_VALUE
    broken = sum(sample_bernoulli_exp(gamma * Fraction(6, 5), SeededRandom(SEED)) for _ in range(n))
    assert binomtest(broken, n, math.exp(-float(gamma))).pvalue < P_VALUE


@pytest.mark.statistical
@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3, 2), Fraction(7)])
def test_discrete_laplace_matches_pmf(scale: Fraction) -> None:
    """Chi-square of 20 000 draws against the exact discrete Laplace pmf.

    False-alarm rate ≤ 10⁻³ (measured 0/20 seeds). Broken variant (scale × 1.1): miss rate measured 0/20 seeds
    for each scale.
    """
    n = 20_000
    rng = SeededRandom(SEED)
    samples = [sample_discrete_laplace(scale, rng) for _ in range(n)]
    assert _chi_square_p(samples, _laplace_pmf(scale)) > P_VALUE
    broken_rng = SeededRandom(SEED)
    broken = [sample_discrete_laplace(scale * Fraction(11, 10), broken_rng) for _ in range(n)]
    assert _chi_square_p(broken, _laplace_pmf(scale)) < P_VALUE


@pytest.mark.statistical
@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(2), Fraction(30), Fraction(10**6, 7)])
def test_discrete_gaussian_matches_pmf(sigma2: Fraction) -> None:
    """Chi-square of 10 000 draws against the exact discrete Gaussian pmf (σ² < 1, = 2, 30, ≈ 1.4·10⁵).

    False-alarm rate ≤ 10⁻³ (measured 0/20 seeds). Broken variant (σ² × 1.2): miss rate measured 0/20 seeds for
    each σ² (with equal-mass cells; per-point cells missed 17/20 at σ² ≈ 1.4·10⁵).
    """
    n = 10_000
    rng = SeededRandom(SEED)
    samples = [sample_discrete_gaussian(sigma2, rng) for _ in range(n)]
    assert _chi_square_p(samples, _gaussian_pmf(sigma2)) > P_VALUE
    broken_rng = SeededRandom(SEED)
    broken = [sample_discrete_gaussian(sigma2 * Fraction(6, 5), broken_rng) for _ in range(n)]
    assert _chi_square_p(broken, _gaussian_pmf(sigma2)) < P_VALUE


def test_samplers_are_reproducible_with_a_seed() -> None:
    draws = [[sample_discrete_gaussian(Fraction(5), SeededRandom(3)) for _ in range(3)] for _ in range(2)]
    assert draws[0] == draws[1]


@pytest.mark.parametrize(
    ("call", "arg"),
    [(sample_bernoulli_exp, Fraction(-1)), (sample_discrete_laplace, Fraction(0)),
     (sample_discrete_laplace, Fraction(-2)), (sample_discrete_gaussian, Fraction(0))],
)
def test_bad_parameters_are_refused(call, arg) -> None:
    with pytest.raises(InvalidParameter):
        call(arg, SeededRandom(0))
