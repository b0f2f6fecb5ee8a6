"""The independent lower bound (tilted hockey-stick) and the PLD regime it exposed.

Extreme regime (reproduced by the sweep in docs/accounting.md, "Regime"): Poisson-subsampled Gaussian, q = 0.05,
σ = 0.311, 1000 steps, δ = 2.507e-12. dp_accounting's pessimistic PLD (as the PLD accountant composed it before the
regime check) certifies 332.8848, below the lower bound 332.9449 that this module proves; the PLD accountant now
refuses there and the tightest accountant falls back to RDP and says so.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.accounting import get_accountant, recheck
from dpaudit.accounting.base import OutsideControlledRegime
from dpaudit.accounting.charges import ApproximateSpec, PoissonGaussianSpec, PureSpec
from dpaudit.accounting.hockey_stick import (
    discrete_laplace_pmf,
    epsilon_lower_bound,
    randomized_response_pmf,
    subsampled_gaussian_pmf,
)
from dpaudit.accounting.pld import PldAccountant
from dpaudit.errors import InvalidParameter
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.sensitivity import from_formula

EXTREME = PoissonGaussianSpec(0.05, 0.311)
EXTREME_STEPS = 1000
EXTREME_DELTA = 2.507e-12


def _extreme_event() -> PoissonSubsampledGaussianEvent:
    return PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=EXTREME.sample_rate, noise_multiplier=EXTREME.noise_multiplier, steps=EXTREME_STEPS)


@pytest.fixture(scope="module")
def extreme_lower() -> float:
    return epsilon_lower_bound({EXTREME: EXTREME_STEPS}, EXTREME_DELTA, interval=2e-4, tilt=0.19).epsilon


def test_pld_fft_falls_below_the_lower_bound_in_the_extreme_regime(extreme_lower):
    """The failure itself: dp_accounting's composed PLD read at δ (what the accountant returned) is below the truth."""
    raw = float(PldAccountant().composed({EXTREME: EXTREME_STEPS}).get_epsilon_for_delta(EXTREME_DELTA))
    assert raw < extreme_lower


def test_pld_refuses_outside_its_controlled_regime():
    with pytest.raises(OutsideControlledRegime, match="outside its controlled regime"):
        PldAccountant().epsilon(_extreme_event(), EXTREME_DELTA)


def test_tightest_falls_back_to_rdp_above_the_lower_bound_and_says_so(extreme_lower):
    eps, source = get_accountant("tightest").epsilon_with_source(_extreme_event(), EXTREME_DELTA)
    assert eps >= extreme_lower
    assert source.startswith("rdp (pld outside its controlled regime: FFT rounding error")
    # the verifier recomputes the annotated claim, shows the note, and refuses a PLD claim in this regime
    result = recheck(source, _extreme_event(), EXTREME_DELTA, eps)
    assert result.ok and result.method == "rdp" and "pld outside its controlled regime" in result.reason
    with pytest.raises(OutsideControlledRegime):
        recheck("pld", _extreme_event(), EXTREME_DELTA, extreme_lower)


def test_ordinary_regime_is_unchanged():
    """MNIST tutorial setting at δ = 1e-5: the PLD answers (ε read at δ less 10 x its rounding-error estimate)."""
    eps, source = get_accountant("tightest").epsilon_with_source(
        PoissonSubsampledGaussianEvent(
            neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
            sample_rate=256 / 60000, noise_multiplier=1.1, steps=14040), 1e-5)
    assert source == "pld" and eps == pytest.approx(2.37991, abs=1e-5)


def test_lower_bound_is_below_and_close_to_the_pld_in_the_ordinary_regime():
    counts = {PoissonGaussianSpec(0.02, 1.0): 400}
    lower = epsilon_lower_bound(counts, 1e-5)
    upper = PldAccountant().epsilon_of_tally(counts, 1e-5)
    assert upper - 400 * lower.interval <= lower.epsilon <= upper


def test_randomized_response_composition_matches_the_exact_formula():
    """k-fold (ε, δ₀) randomized response: δ(ε') = 1 − (1 − δ₀)^k + (1 − δ₀)^k Σ_i C(k, i) p^{k−i}(1 − p)^i
    (1 − e^{ε' − (k − 2i)ε})₊ with p = e^ε/(1 + e^ε) (Kairouz, Oh & Viswanath 2015); the lower bound is at most the
    exact ε and within the grid's rounding (k·h) of it."""
    eps0, delta0, k, delta = 0.5, 1e-7, 20, 1e-4
    p = math.exp(eps0) / (1 + math.exp(eps0))
    i = np.arange(k + 1)
    weights = stats.binom.pmf(k - i, k, p)

    def exact_delta(e: float) -> float:
        return 1 - (1 - delta0) ** k + (1 - delta0) ** k * float(
            np.sum(weights * np.maximum(0.0, -np.expm1(e - (k - 2 * i) * eps0))))

    lo, hi = 0.0, k * eps0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if exact_delta(mid) > delta else (lo, mid)
    lower = epsilon_lower_bound({ApproximateSpec(eps0, delta0): k}, delta, interval=1e-4)
    assert hi - k * 1e-4 - 1e-9 <= lower.epsilon <= hi


def test_leaf_laws_are_lower_roundings_of_probability_distributions():
    h = 1e-3
    for pmf, lowest in ((subsampled_gaussian_pmf(0.1, 0.8, h, 1.0, True), math.log(0.9)),
                        (subsampled_gaussian_pmf(0.1, 0.8, h, 1.0, False), -math.inf),
                        (discrete_laplace_pmf(0.01, 100, h), -1.0),
                        (randomized_response_pmf(1.0, 0.01, h), -1.0)):
        total = float(np.sum(np.exp(pmf.log_probs))) + pmf.infinity
        assert total == pytest.approx(1.0, abs=1e-9)
        if math.isfinite(lowest):
            assert pmf.offset * h <= lowest + 1e-12  # the bottom cell rounds the smallest loss down


def test_left_out_leaves_are_counted_and_bad_inputs_refused():
    bounded_range = PureSpec(1.0, bounded_range=True)
    result = epsilon_lower_bound({bounded_range: 3}, 1e-5)
    assert result.epsilon == 0.0 and result.left_out == 3 and result.modelled == 0
    for bad in (0.0, 1.0, -1e-5):
        with pytest.raises(InvalidParameter):
            epsilon_lower_bound({EXTREME: 1}, bad)
    with pytest.raises(InvalidParameter):
        epsilon_lower_bound({EXTREME: 1}, 1e-5, interval=0.0)
    with pytest.raises(InvalidParameter):
        epsilon_lower_bound({EXTREME: 1}, 1e-5, tilt=-1.0)
