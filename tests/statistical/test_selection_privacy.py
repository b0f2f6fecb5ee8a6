"""Statistical DP tests of the selection mechanisms on neighbouring inputs, at the claimed ε.

Each test draws independent samples of M(x) and M(x') with fixed seeds and runs :func:`dp_test` (Clopper-Pearson
in both directions, Bonferroni; false alarm ≤ ALPHA for a correct mechanism, whatever the events). Each correct
mechanism is paired with a deliberately broken variant whose privacy loss on the same pair truly exceeds the
claimed ε; the test must catch it. Before sampling, every test recomputes the exact output distributions on both
inputs and asserts its premise (correct: loss ≤ ε; broken: loss > ε). Events are fixed from these exact
distributions, never from the samples.

Outputs: the exponential mechanism returns a candidate index; AboveThreshold returns the index of the first
True answer, or ``len(stream)`` for "none" (every query answered False).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.mechanisms.above_threshold import AboveThreshold, calibrate_above_threshold
from dpaudit.mechanisms.exponential import exponential_probabilities, sample_exponential
from dpaudit.mechanisms.grid import round_to_grid
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.testing.statistical import dp_test

pytestmark = pytest.mark.statistical

ALPHA = 0.01

# --- exponential mechanism ------------------------------------------------------------------------------------

EM_EPSILON = 1.0
EM_SENSITIVITY = 1.0
EM_SCORES = (0.0, 0.0, 0.0, 0.0)
EM_NEIGHBOUR = (-1.0, 1.0, 1.0, 1.0)  # each score moved by exactly Δ; not monotone (they move both ways)
EM_SAMPLES = 3000


def _max_loss(p: np.ndarray, q: np.ndarray) -> float:
    """max over outputs of |log p(o) − log q(o)|, the pure-DP privacy loss of the pair (inf if supports differ)."""
    if np.any((p > 0) != (q > 0)):
        return math.inf
    both = (p > 0) & (q > 0)
    return float(np.max(np.abs(np.log(p[both]) - np.log(q[both]))))


def _em_samples(scores, monotone: bool, seed: int) -> np.ndarray:
    rng = SeededRandom(seed)
    return np.array([sample_exponential(scores, EM_EPSILON, EM_SENSITIVITY, monotone, rng)
                     for _ in range(EM_SAMPLES)])


def _em_verdict(monotone: bool, seed: int):
    events = {f"selects {i}": (lambda out, i=i: out == i) for i in range(len(EM_SCORES))}
    return dp_test(_em_samples(EM_SCORES, monotone, seed), _em_samples(EM_NEIGHBOUR, monotone, seed + 1),
                   EM_EPSILON, 0.0, events, ALPHA)


def test_exponential_mechanism_passes_at_its_epsilon():
    """The exponential mechanism (c = ε/(2Δ)) on u = (0, 0, 0, 0), u' = (−1, 1, 1, 1), ε = 1, 3000 draws each.

    Exact loss of the pair: 0.828 ≤ ε. False alarm ≤ ALPHA = 0.01 (dp_test's guarantee); measured over 20 seed
    pairs in development: 0 false alarms.
    """
    p = exponential_probabilities(EM_SCORES, EM_EPSILON, EM_SENSITIVITY, False)
    q = exponential_probabilities(EM_NEIGHBOUR, EM_EPSILON, EM_SENSITIVITY, False)
    assert _max_loss(p, q) <= EM_EPSILON
    assert not _em_verdict(monotone=False, seed=100).violated


def test_exponential_mechanism_without_the_factor_two_is_caught():
    """Broken variant: c = ε/Δ (``monotone=True``) for these non-monotone scores, i.e. the factor 2 dropped.

    Exact loss: 1.756 > ε = 1, at candidate 0 (P = 0.25 on u, 0.043 on u'; e·0.043 = 0.117). With 3000 draws
    each the miss rate is 2·10⁻⁷ (computed exactly from the binomial laws of the two counts of that event and
    dp_test's Clopper-Pearson bounds; 5·10⁻⁴ at 2000 draws); measured over 20 seed pairs at 2000 draws: 0 misses.
    """
    p = exponential_probabilities(EM_SCORES, EM_EPSILON, EM_SENSITIVITY, True)
    q = exponential_probabilities(EM_NEIGHBOUR, EM_EPSILON, EM_SENSITIVITY, True)
    assert _max_loss(p, q) > EM_EPSILON + 0.5
    assert _em_verdict(monotone=True, seed=100).violated


# --- AboveThreshold -------------------------------------------------------------------------------------------

AT_EPSILON = 2.0
AT_SENSITIVITY = 1.0
AT_GRID = 0.4  # Δ/γ = 2.5, so rounded neighbours differ by up to ⌊2.5⌋ + 1 = 3 grid units
AT_THRESHOLD = 0.8  # 2 grid units
# 0.2 = 0.5 units rounds (to even) to 0 and 1.2 = 3 units to 3: each query moves by Δ = 1 in value, by the full
# Δ_γ = 3 after rounding. Earlier queries rise on x' (x' stops earlier), the last one falls (x' rarely reaches it).
AT_STREAM = (0.2, 0.2, 0.2, 0.2, 0.2, 1.2)
AT_NEIGHBOUR = (1.2, 1.2, 1.2, 1.2, 1.2, 0.2)
LAST = len(AT_STREAM) - 1
NONE = len(AT_STREAM)


def _discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    r = math.exp(-1.0 / scale)
    return (1.0 - r) / (1.0 + r) * np.exp(-np.abs(support) / scale)


def _discrete_laplace_at_least(m: np.ndarray, scale: float) -> np.ndarray:
    """P(ν ≥ m) for ν ~ DLap(scale): e^{−m/t}/(1 + e^{−1/t}) for m ≥ 1, and 1 − P(ν ≥ 1 − m) for m ≤ 0."""
    r = math.exp(-1.0 / scale)
    upper = np.exp(-np.maximum(m, 1) / scale) / (1.0 + r)
    lower = 1.0 - np.exp(-np.maximum(1 - m, 1) / scale) / (1.0 + r)
    return np.where(m >= 1, upper, lower)


def _above_threshold_distribution(stream, threshold_scale: float, query_scale: float) -> np.ndarray:
    """Exact P(output = k), k = 0..len(stream) (the last is "none"), of :class:`AboveThreshold` (Alg. 1).

    Sums over the noisy threshold τ = round(T) + ρ in grid units: P(k) = Σ_τ P(ρ) Π_{i<k} P(a_i + ν_i < τ) ·
    P(a_k + ν_k ≥ τ), a_i = round(q_i). The sum over ρ is cut at 80 threshold scales (tail mass < e⁻⁸⁰).
    """
    units = [round_to_grid(v, AT_GRID) for v in stream]
    t1, t2 = threshold_scale / AT_GRID, query_scale / AT_GRID
    reach = math.ceil(80 * t1) + max(abs(a) for a in units)
    rho = np.arange(-reach, reach + 1)
    tau = round_to_grid(AT_THRESHOLD, AT_GRID) + rho
    alive = _discrete_laplace_pmf(t1, rho)
    out = []
    for a in units:
        stop = _discrete_laplace_at_least(tau - a, t2)
        out.append(float(np.sum(alive * stop)))
        alive = alive * (1.0 - stop)
    out.append(float(np.sum(alive)))
    return np.array(out)


def _at_samples(stream, threshold_scale: float, query_scale: float, n: int, seed: int) -> np.ndarray:
    rng = SeededRandom(seed)
    out = np.empty(n, dtype=np.int64)
    for j in range(n):
        at = AboveThreshold(AT_THRESHOLD, threshold_scale, query_scale, AT_GRID, len(stream), rng)
        out[j] = next((i for i, v in enumerate(stream) if at.test(v)), NONE)
    return out


def _at_verdict(threshold_scale: float, query_scale: float, n: int, seed: int, events):
    return dp_test(_at_samples(AT_STREAM, threshold_scale, query_scale, n, seed),
                   _at_samples(AT_NEIGHBOUR, threshold_scale, query_scale, n, seed + 1),
                   AT_EPSILON, 0.0, events, ALPHA)


def _at_loss(threshold_scale: float, query_scale: float) -> float:
    return _max_loss(_above_threshold_distribution(AT_STREAM, threshold_scale, query_scale),
                     _above_threshold_distribution(AT_NEIGHBOUR, threshold_scale, query_scale))


ALL_OUTCOMES = {f"stops at {k}": (lambda out, k=k: out == k) for k in range(NONE + 1)}
STOPS_LAST = {"stops at the last query": lambda out: out == LAST}


def test_above_threshold_passes_at_its_epsilon():
    """AboveThreshold calibrated by ``calibrate_above_threshold`` (t₁ = 2Δ_γ/ε, t₂ = 4Δ_γ/ε), ε = 2, 8000 runs each.

    Exact loss of the pair: 1.742 ≤ ε. All 7 outcomes are events. False alarm ≤ ALPHA = 0.01 (dp_test's
    guarantee); measured over 20 seed pairs in development: 0 false alarms.
    """
    threshold_scale, query_scale = calibrate_above_threshold(AT_EPSILON, AT_SENSITIVITY, AT_GRID)
    assert _at_loss(threshold_scale, query_scale) <= AT_EPSILON
    assert not _at_verdict(threshold_scale, query_scale, 8000, 200, ALL_OUTCOMES).violated


def test_above_threshold_with_halved_query_noise_is_caught():
    """Broken variant: query noise scale halved (t₂ = 2Δ_γ/ε), still claimed ε = 2; 12 000 runs each.

    Exact loss: 2.77 > ε, at "stops at the last query" (P = 0.0871 on x, 0.0055 on x'; e^ε·0.0055 = 0.041).
    That single event, chosen from the exact distributions, is tested. Miss rate 1.7·10⁻⁴ (computed exactly
    from the binomial laws of the two counts and dp_test's Clopper-Pearson bounds; it is 1.4 % at 8000 runs,
    where the real sampler missed 1 of 20 seed pairs in development); measured with the real sampler at
    12 000 runs: 0 misses over 20 seed pairs.
    """
    threshold_scale, query_scale = calibrate_above_threshold(AT_EPSILON, AT_SENSITIVITY, AT_GRID)
    assert _at_loss(threshold_scale, query_scale / 2) > AT_EPSILON + 0.5
    assert _at_verdict(threshold_scale, query_scale / 2, 12_000, 200, STOPS_LAST).violated


def test_above_threshold_without_query_noise_is_caught():
    """Broken variant: query noise omitted (scale 1/1000 grid unit: non-zero with probability < 10⁻⁴³³); 1000 runs.

    Exact loss: infinite: x stops at the last query when 0 < τ ≤ 3 grid units (P = 0.40), x' never does.
    All 7 outcomes are events. Miss rate below 10⁻¹⁰⁰ (computed exactly as above: the Clopper-Pearson upper
    bound on 0/1000 is 0.008, and e²·0.008 = 0.06 ≪ 0.40); measured over 20 seed pairs: 0 misses.
    """
    threshold_scale, _ = calibrate_above_threshold(AT_EPSILON, AT_SENSITIVITY, AT_GRID)
    noiseless = AT_GRID / 1000
    assert _at_loss(threshold_scale, noiseless) == math.inf
    assert _at_verdict(threshold_scale, noiseless, 1000, 200, ALL_OUTCOMES).violated
