"""Tests of the exact exponential-mechanism sampler and its probabilities."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chisquare

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.exponential import exponential_probabilities, sample_exponential
from dpaudit.mechanisms.randomness import SeededRandom

SCORES = [0.0, 0.5, 1.0, 2.0, -1.0, 3.25]
EPSILON = 1.5
N_SAMPLES = 10_000
ALPHA = 1e-3


def _counts(scores, epsilon, sensitivity, monotone, seed):
    rng = SeededRandom(seed)
    draws = [sample_exponential(scores, epsilon, sensitivity, monotone, rng) for _ in range(N_SAMPLES)]
    return np.bincount(draws, minlength=len(scores))


def _gof_pvalue(counts, probabilities):
    return chisquare(counts, probabilities * counts.sum()).pvalue


def test_probabilities_match_the_formula():
    c = EPSILON / 2
    weights = np.exp(c * np.array(SCORES))
    np.testing.assert_allclose(exponential_probabilities(SCORES, EPSILON, 1.0, False), weights / weights.sum(),
                               rtol=1e-12)
    weights = np.exp(2 * c * np.array(SCORES))
    np.testing.assert_allclose(exponential_probabilities(SCORES, EPSILON, 1.0, True), weights / weights.sum(),
                               rtol=1e-12)


def test_probabilities_do_not_overflow_for_huge_scores():
    p = exponential_probabilities([1e300, -1e300, 1e300], 1e10, 1e-10, False)
    np.testing.assert_allclose(p, [0.5, 0.0, 0.5])


def test_probabilities_accept_ints_fractions_and_numpy_scalars():
    p = exponential_probabilities([np.int64(1), Fraction(1, 3), np.float32(0.25), 2], 1.0, 1.0, False)
    weights = np.exp(0.5 * np.array([1.0, 1 / 3, 0.25, 2.0]))
    np.testing.assert_allclose(p, weights / weights.sum(), rtol=1e-12)


@pytest.mark.statistical
@pytest.mark.parametrize("monotone", [False, True])
def test_selection_frequencies_match_the_exact_distribution(monotone):
    """Chi-square goodness of fit of 10 000 draws (seed 7) against :func:`exponential_probabilities`.

    False alarm: ALPHA = 1e-3 for a correct sampler (the chi-square approximation is adequate: every expected
    count is at least 14); measured in development: 0 false alarms over seeds 0-19 (both variants). Broken
    variant (next test): the factor 2 of c confused (monotone flipped). Its noncentrality is 3.3·10³ or
    1.2·10⁴ (by direction), so the miss rate is below 1e-12; measured: 0 misses over seeds 0-19.
    """
    counts = _counts(SCORES, EPSILON, 1.0, monotone, seed=7)
    assert _gof_pvalue(counts, exponential_probabilities(SCORES, EPSILON, 1.0, monotone)) > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("monotone", [False, True])
def test_goodness_of_fit_catches_the_wrong_rate(monotone):
    """Draws with c = ε/Δ tested against c = ε/(2Δ) and vice versa must be rejected (miss rate < 1e-12, above)."""
    counts = _counts(SCORES, EPSILON, 1.0, not monotone, seed=7)
    assert _gof_pvalue(counts, exponential_probabilities(SCORES, EPSILON, 1.0, monotone)) < ALPHA


def test_a_single_candidate_is_always_selected():
    rng = SeededRandom(0)
    assert all(sample_exponential([-5.0], 0.1, 1.0, False, rng) == 0 for _ in range(20))


def test_a_dominant_candidate_is_selected_despite_large_exponents():
    # γ = 10⁶ for the others: P(other) = 2·exp(−10⁶) / (1 + ...), i.e. never.
    rng = SeededRandom(1)
    scores = np.array([0.0, 2e6, 0.0])
    assert all(sample_exponential(scores, 1.0, 1.0, False, rng) == 1 for _ in range(50))


@pytest.mark.statistical
def test_exact_scores_are_distinguished():
    """1 and 1 + 2⁻⁵² differ by one ulp; with c = 2⁵² (ε = 2⁵³, Δ = 1) the odds are e : 1, not 1 : 1.

    4000 draws (seed 3); the band ±0.05 around e/(1+e) is 7 standard deviations: false alarm < 10⁻¹¹. Broken
    variant: a sampler that loses the last bit (the two scores tie) has mean 0.5, more than 20 standard deviations
    outside the band: miss rate < 10⁻⁸⁰.
    """
    scores = [1.0, 1.0 + 2.0**-52]
    p = exponential_probabilities(scores, 2.0**53, 1.0, False)
    assert p[1] / p[0] == pytest.approx(math.e)
    rng = SeededRandom(3)
    draws = [sample_exponential(scores, 2.0**53, 1.0, False, rng) for _ in range(4000)]
    assert abs(np.mean(draws) - math.e / (1 + math.e)) < 0.05


@pytest.mark.parametrize(
    "scores",
    [[], [1.0, math.nan], [math.inf, 0.0], [0.0, -math.inf], [True, 1.0], ["1"], "12", np.zeros((2, 2)),
     np.array([0.0, np.nan]), [Decimal("0.1")], 5.0],
)
def test_bad_scores_are_refused(scores):
    with pytest.raises(InvalidParameter):
        sample_exponential(scores, 1.0, 1.0, False, SeededRandom(0))
    with pytest.raises(InvalidParameter):
        exponential_probabilities(scores, 1.0, 1.0, False)


def test_a_score_that_is_not_exactly_a_double_is_refused():
    third = np.longdouble(1) / 3
    if float(third) == third:  # platforms where long double is binary64: it is an exact double
        assert exponential_probabilities([third], 1.0, 1.0, False) == pytest.approx([1.0])
    else:
        with pytest.raises(InvalidParameter, match="not exactly representable"):
            sample_exponential([third, 0.0], 1.0, 1.0, False, SeededRandom(0))


@pytest.mark.parametrize(
    "epsilon, sensitivity, monotone",
    [(0.0, 1.0, False), (-1.0, 1.0, False), (math.nan, 1.0, False), (math.inf, 1.0, False),
     (1.0, 0.0, False), (1.0, -2.0, False), (1.0, math.inf, False), (1.0, 1.0, 1), (1.0, 1.0, None)],
)
def test_bad_parameters_are_refused(epsilon, sensitivity, monotone):
    with pytest.raises(InvalidParameter):
        sample_exponential([0.0, 1.0], epsilon, sensitivity, monotone, SeededRandom(0))
    with pytest.raises(InvalidParameter):
        exponential_probabilities([0.0, 1.0], epsilon, sensitivity, monotone)


def test_a_non_random_source_is_refused():
    with pytest.raises(InvalidParameter):
        sample_exponential([0.0, 1.0], 1.0, 1.0, False, np.random.default_rng(0))
