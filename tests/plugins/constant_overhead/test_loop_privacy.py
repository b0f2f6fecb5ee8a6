"""Statistical DP test of the elastic loop with T_max = 2 rounds, at the claimed ε = T_max·ϵ (pure DP, δ = 0).

Set-up: one candidate whose utility is q on x and q + Δ on x' (Δ = 1/k with k = 2), u₀ = 0, g = 0.25, ϵ = 0.5
per round on the coarse grid γ = Δ/8 (so that the exact output law is cheap to compute). The output is the
transcript: 0 = the first round fails (the loop stops, step 0), 1 = pass then fail, 2 = pass then pass (T_max).
The correct loop uses the session's calibration (threshold Lap(2Δ/ϵ), queries Lap(4Δ/ϵ), in grid units); the
deliberately broken variant divides both scales by 16 (noise calibrated for Δ/16). Before sampling, each test
computes the exact transcript law on both inputs and asserts its premise (correct: loss 0.15 ≤ 2ϵ = 1; broken:
loss 2.03 > 1).

False alarm ≤ ALPHA = 0.01 for a correct mechanism (dp_test's Clopper-Pearson/Bonferroni guarantee); measured in
development over 10 seed pairs: 0 false alarms. Miss rate of the broken variant at 10 000 draws per input:
outcome 2 has probability 0.064 on x and 0.486 on x'; with Clopper-Pearson half-widths ≤ 0.025 the test fires
unless the x'-frequency falls below 0.42 or the x-frequency exceeds 0.11, so by Hoeffding's inequality the miss
rate is ≤ exp(−2·10⁴·0.066²) + exp(−2·10⁴·0.046²) < 10⁻¹⁸; measured over 10 seed pairs: 0 misses.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpaudit.mechanisms.above_threshold import AboveThreshold, calibrate_above_threshold
from dpaudit.mechanisms.grid import round_to_grid, scale_in_grid_units
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.testing.statistical import dp_test
from dpaudit_plugins.constant_overhead.loop import run_elastic_loop
from dpaudit_plugins.constant_overhead.proposers import GridProposer

pytestmark = pytest.mark.statistical

ALPHA = 0.01
EPSILON = 0.5
T_MAX = 2
DELTA_U = 0.5
GRID = DELTA_U / 8
U0, G = 0.0, 0.25
Q, Q_PRIME = 0.25, 0.25 + DELTA_U
SAMPLES = 10_000
BROKEN_FACTOR = 16


def _scales(broken: bool) -> tuple[float, float]:
    t1, t2 = calibrate_above_threshold(EPSILON, DELTA_U, GRID)
    return (t1 / BROKEN_FACTOR, t2 / BROKEN_FACTOR) if broken else (t1, t2)


def _pass_probability(threshold: float, value: float, broken: bool) -> float:
    """Exact P[round(value) + ν ≥ round(threshold) + ρ] for the grid-unit discrete Laplace noises."""
    t1, t2 = (float(scale_in_grid_units(s, GRID)) for s in _scales(broken))
    width = int(60 * max(t1, t2))
    z = np.arange(-width, width + 1)
    rho = np.exp(-np.abs(z) / t1)
    nu = np.exp(-np.abs(z) / t2)
    rho, nu = rho / rho.sum(), nu / nu.sum()
    diff = np.convolve(nu, rho[::-1])  # law of ν − ρ on [−2w, 2w]
    need = round_to_grid(threshold, GRID) - round_to_grid(value, GRID)
    return float(diff[np.arange(-2 * width, 2 * width + 1) >= need].sum())


def _law(value: float, broken: bool) -> np.ndarray:
    p1 = _pass_probability(U0 + G, value, broken)
    p2 = _pass_probability(U0 + 3 * G, value, broken)
    return np.array([1 - p1, p1 * (1 - p2), p1 * p2])


def _loss(broken: bool) -> float:
    return float(np.max(np.abs(np.log(_law(Q, broken)) - np.log(_law(Q_PRIME, broken)))))


def _samples(value: float, broken: bool, seed: int) -> np.ndarray:
    rng = SeededRandom(seed)
    t1, t2 = _scales(broken)
    out = np.empty(SAMPLES, dtype=np.int64)
    for i in range(SAMPLES):
        result = run_elastic_loop(GridProposer(["c"]), lambda s: value,
                                  lambda threshold: AboveThreshold(threshold, t1, t2, GRID, 1, rng),
                                  u0=U0, g=G, t_max=T_MAX, max_batch=1)
        out[i] = sum(it.passed is not None for it in result.iterations)
    return out


def _verdict(broken: bool, seed: int):
    events = {f"transcript {o}": (lambda out, o=o: out == o) for o in range(3)}
    return dp_test(_samples(Q, broken, seed), _samples(Q_PRIME, broken, seed + 1), T_MAX * EPSILON, 0.0, events,
                   ALPHA)


def test_scales_are_the_papers():
    """Lap(2Δ/ϵ) and Lap(4Δ/ϵ), Δ inflated by the grid rounding to ⌊Δ/γ⌋ + 1 = 9 grid units."""
    t1, t2 = _scales(False)
    assert Fraction(t2) / Fraction(t1) == 2 and math.isclose(t1, 2 * 9 * GRID / EPSILON, rel_tol=1e-12)


def test_loop_passes_at_t_max_times_epsilon():
    assert _loss(False) <= T_MAX * EPSILON
    assert not _verdict(broken=False, seed=300).violated


def test_loop_with_noise_for_a_smaller_sensitivity_is_caught():
    assert _loss(True) > T_MAX * EPSILON
    assert _verdict(broken=True, seed=400).violated
