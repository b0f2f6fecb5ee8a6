"""The vectorised exact samplers: exact laws (chi-square, fixed seeds), their integer ranges, and exact grid rounding.

Statistical tests: each draws from a SeededRandom with a fixed seed and compares with the exact law by a chi-square
test at significance 1e-4 (false-alarm rate 1e-4 per test for an arbitrary seed; with the fixed seed the outcome is
deterministic). The broken variant (Bernoulli(1 − γ) in place of Bernoulli(exp(−γ))) must be rejected at the same
level (miss rate: the test's power against it at 2·10⁵ draws, p-value far below 1e-4 here).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms import discrete_bulk
from dpaudit.mechanisms.discrete_bulk import (
    MAX_SCALE_NUMERATOR,
    bernoulli_exp,
    bulk_scale,
    sample_discrete_laplace_array,
    uniform_below,
    uniform_bits,
)
from dpaudit.mechanisms.grid import add_grid_noise, round_to_grid, round_to_grid_array
from dpaudit.mechanisms.randomness import SecureRandom, SeededRandom

ALPHA = 1e-4


def _chi_square_p(samples: np.ndarray, pmf: dict[int, float]) -> float:
    """p-value of a chi-square test of ``samples`` against ``pmf``, with the tail beyond the support pooled."""
    support = sorted(pmf)
    counts = np.array([np.count_nonzero(samples == k) for k in support] + [0], dtype=float)
    counts[-1] = samples.size - counts[:-1].sum()
    probs = np.array([pmf[k] for k in support] + [max(0.0, 1.0 - sum(pmf.values()))])
    expected = probs * samples.size
    keep = expected > 5
    stat = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
    return float(chi2.sf(stat, int(keep.sum()) - 1))


def _discrete_laplace_pmf(scale: Fraction, radius: int) -> dict[int, float]:
    q = math.exp(-1 / float(scale))
    norm = (1 - q) / (1 + q)
    return {k: norm * q ** abs(k) for k in range(-radius, radius + 1)}


@pytest.mark.statistical
@pytest.mark.parametrize("scale", [Fraction(1), Fraction(5, 2), Fraction(7, 3)])
def test_discrete_laplace_array_follows_the_exact_law(scale: Fraction) -> None:
    samples = sample_discrete_laplace_array(scale, 200_000, SeededRandom(11))
    assert samples.dtype == np.int64
    assert _chi_square_p(samples, _discrete_laplace_pmf(scale, 40)) > ALPHA


@pytest.mark.statistical
def test_the_law_test_catches_a_sampler_with_a_first_order_bernoulli(monkeypatch: pytest.MonkeyPatch) -> None:
    def first_order(numerators: np.ndarray, denominator: int, rng) -> np.ndarray:  # Bernoulli(1 − γ) ≠ exp(−γ)
        return uniform_below(denominator, numerators.size, rng) >= numerators

    monkeypatch.setattr(discrete_bulk, "bernoulli_exp", first_order)
    samples = sample_discrete_laplace_array(Fraction(5, 2), 200_000, SeededRandom(11))
    assert _chi_square_p(samples, _discrete_laplace_pmf(Fraction(5, 2), 40)) < ALPHA


@pytest.mark.statistical
def test_uniform_below_is_uniform_and_in_range() -> None:
    draws = uniform_below(7, 70_000, SeededRandom(3))
    assert draws.min() >= 0 and draws.max() < 7
    assert _chi_square_p(draws, {k: 1 / 7 for k in range(7)}) > ALPHA
    big = uniform_below(2**62, 1000, SecureRandom())
    assert big.min() >= 0 and big.max() < 2**62


@pytest.mark.statistical
def test_uniform_bits_are_uniform_in_pairs() -> None:
    bits = uniform_bits(2 * 63 * 1000 + 7, SeededRandom(4)).astype(np.int64)
    assert bits.size == 2 * 63 * 1000 + 7
    pairs = 2 * bits[0:-1:2] + bits[1::2]  # neighbouring bits, also across word boundaries
    assert _chi_square_p(pairs, {k: 0.25 for k in range(4)}) > ALPHA


@pytest.mark.statistical
def test_bernoulli_exp_beyond_the_int64_range_continues_exactly() -> None:
    # t = 2**61 + 1: K = 2 already needs bounds above 2**62, so every K ≥ 2 runs on Python integers.
    t = 2**61 + 1
    n = 20_000
    hits = bernoulli_exp(np.full(n, t, dtype=np.int64), t, SeededRandom(8))
    p = math.exp(-1)
    assert abs(hits.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)  # 5 sigma: false alarm < 1e-6


def test_uniform_below_refuses_bounds_outside_its_range() -> None:
    with pytest.raises(InvalidParameter):
        uniform_below(0, 1, SeededRandom(1))
    with pytest.raises(InvalidParameter):
        uniform_below(2**62 + 1, 1, SeededRandom(1))


def test_bulk_scale_never_lowers_the_noise_and_keeps_the_numerator_small() -> None:
    for scale in (Fraction(1.1) / Fraction(0.3), Fraction(1e10) / Fraction(1e-3), Fraction(3, 2)):
        rounded = bulk_scale(scale)
        assert rounded >= scale and rounded.numerator < MAX_SCALE_NUMERATOR
        assert rounded - scale <= scale * Fraction(1, 2**50)
    with pytest.raises(InvalidParameter):
        bulk_scale(Fraction(2**51))
    with pytest.raises(InvalidParameter):
        bulk_scale(Fraction(0))


def test_array_rounding_is_the_exact_nearest_grid_point() -> None:
    rng = np.random.default_rng(0)
    grid = 0.1
    ties = (np.arange(-50, 50) + 0.5) * grid  # near-ties in float: the exact path decides
    values = np.concatenate([rng.normal(scale=1e3, size=5000), ties, [2.0**45, -(2.0**60), 0.0, -0.0]])
    assert round_to_grid_array(values, grid).tolist() == [round_to_grid(float(v), grid) for v in values]
    ints = np.array([2**53 + 1, -(2**62), 3, 0], dtype=np.int64)
    assert round_to_grid_array(ints, 1.0).tolist() == [int(v) for v in ints]


def test_array_release_adds_each_draw_to_its_rounded_coordinate() -> None:
    values = np.array([[0.26, -1.0], [7.74, 1e30]])
    out = add_grid_noise(values, 0.5, lambda n: np.arange(n, dtype=np.int64))
    expected = [float((round_to_grid(float(v), 0.5) + i) * Fraction(0.5)) for i, v in enumerate(values.ravel())]
    assert out.shape == (2, 2) and out.ravel().tolist() == expected
