"""Tests of dpaudit.mechanisms.repeat_and_select: the event (refused before charging when K has no exact sampler),
coverage, and exact-distribution checks of the repetition-count samplers (geometric, truncated negative binomial,
Poisson).

Each check draws from a fixed seed and runs a chi-square goodness-of-fit test against the exact pmf, over cells of
about equal expected mass (consecutive values pooled until a cell holds ≥ 1/BINS of the mass; the right tail,
computed as 1 − the pooled mass, is the last cell), rejecting at P_VALUE = 10⁻³. False-alarm rate of each check
for a correct sampler: ≤ 10⁻³ (asymptotic; every expected count ≥ 100). Each law is paired with a deliberately
broken sampler (its parameter off by 10 %) that the same check must reject; false-alarm and miss rates measured
over seeds 0..19 during development are stated per test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chisquare

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.outputs import Coverage, SelectedOutput
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.mechanisms.repeat_and_select import (
    coverage,
    repeat_and_select_event,
    sample_geometric,
    sample_poisson,
    sample_repetitions,
    sample_truncated_negative_binomial,
)

P_VALUE = 1e-3
BINS = 20
SEED = 11


def chi_square_p(samples: list[int], pmf) -> float:
    """Chi-square p-value of ``samples`` against ``pmf(k)`` on k = 0, 1, ... (cells as in the module docstring)."""
    edges, masses, acc, k = [], [], 0.0, 0
    while sum(masses) + acc < 1.0 - 1.0 / BINS:
        acc += pmf(k)
        if acc >= 1.0 / BINS:
            edges.append(k)
            masses.append(acc)
            acc = 0.0
        k += 1
    masses.append(1.0 - sum(masses))  # the tail k > edges[-1]
    cells = np.searchsorted(np.asarray(edges), np.asarray(samples), side="left")
    observed = np.bincount(cells, minlength=len(masses))
    expected = np.asarray(masses) * len(samples)
    assert expected.min() >= 100
    return float(chisquare(observed, expected).pvalue)


def geometric_pmf(gamma: float):
    return lambda k: 0.0 if k < 1 else gamma * (1 - gamma) ** (k - 1)


def tnb_pmf(eta: int, gamma: float):
    """P(K = k) = (1 − γ)^k / (γ^{−η} − 1) · C(k + η − 1, k), k ≥ 1 (Papernot & Steinke 2022, Def. 1)."""
    norm = gamma ** (-eta) - 1.0
    return lambda k: 0.0 if k < 1 else (1 - gamma) ** k * math.comb(k + eta - 1, k) / norm


def poisson_pmf(mu: float):
    return lambda k: math.exp(-mu + k * math.log(mu) - math.lgamma(k + 1))


def draw(sampler, n: int) -> list[int]:
    rng = SeededRandom(SEED)
    return [sampler(rng) for _ in range(n)]


@pytest.mark.statistical
@pytest.mark.parametrize("gamma", [0.1, 0.5])
def test_geometric_law(gamma: float) -> None:
    """20 000 draws. False alarms measured 0/20 seeds; broken sampler (γ·1.1) missed 0/20 seeds."""
    samples = draw(lambda r: sample_geometric(gamma, r), 20_000)
    assert chi_square_p(samples, geometric_pmf(gamma)) > P_VALUE
    broken = draw(lambda r: sample_geometric(gamma * 1.1, r), 20_000)
    assert chi_square_p(broken, geometric_pmf(gamma)) < P_VALUE


@pytest.mark.statistical
@pytest.mark.parametrize(("eta", "gamma"), [(1, 0.3), (2, 0.2), (3, 0.5)])
def test_truncated_negative_binomial_law(eta: int, gamma: float) -> None:
    """20 000 draws (η = 1 is the geometric law by another route). False alarms measured 0/20 seeds; broken
    sampler (γ·1.1) missed 0/20 seeds."""
    samples = draw(lambda r: sample_truncated_negative_binomial(eta, gamma, r), 20_000)
    assert chi_square_p(samples, tnb_pmf(eta, gamma)) > P_VALUE
    broken = draw(lambda r: sample_truncated_negative_binomial(eta, gamma * 1.1, r), 20_000)
    assert chi_square_p(broken, tnb_pmf(eta, gamma)) < P_VALUE


@pytest.mark.statistical
@pytest.mark.parametrize("mu", [1.0, 2.5])
def test_poisson_law(mu: float) -> None:
    """8 000 draws. False alarms measured 0/20 seeds; broken sampler (μ·0.9) missed 0/20 seeds."""
    samples = draw(lambda r: sample_poisson(mu, r), 8_000)
    assert chi_square_p(samples, poisson_pmf(mu)) > P_VALUE
    broken = draw(lambda r: sample_poisson(mu * 0.9, r), 8_000)
    assert chi_square_p(broken, poisson_pmf(mu)) < P_VALUE


def test_dispatch_and_exact_parameters() -> None:
    assert draw(lambda r: sample_repetitions("poisson", {"mu": 2.0}, r), 50) == draw(
        lambda r: sample_poisson(Fraction(2), r), 50)
    assert draw(lambda r: sample_repetitions("geometric", {"gamma": 0.25}, r), 50) == draw(
        lambda r: sample_geometric(Fraction(1, 4), r), 50)


@pytest.mark.parametrize("call", [
    lambda r: sample_geometric(0.0, r), lambda r: sample_geometric(1.0, r), lambda r: sample_geometric(float("nan"), r),
    lambda r: sample_truncated_negative_binomial(0.5, 0.3, r), lambda r: sample_truncated_negative_binomial(0, 0.3, r),
    lambda r: sample_truncated_negative_binomial(True, 0.3, r), lambda r: sample_poisson(0.0, r),
    lambda r: sample_poisson(float("inf"), r), lambda r: sample_poisson("3", r),
    lambda r: sample_repetitions("binomial", {"n": 3}, r),
])
def test_bad_parameters_are_refused(call) -> None:
    with pytest.raises(InvalidParameter):
        call(SeededRandom(0))


def _base():
    from dpaudit.testing.events import dpsgd_event

    return dpsgd_event(steps=10)


def test_the_event_holds_the_law_and_covers_one_selected_output() -> None:
    event = repeat_and_select_event(_base(), "truncated_negative_binomial", {"eta": 2, "gamma": 0.1}, "tuning")
    assert event.parameters() == {"eta": 2.0, "gamma": 0.1} and event.label == "tuning"
    assert coverage(event) == Coverage(SelectedOutput(), 1)


@pytest.mark.parametrize(("law", "params", "message"), [
    ("geometric", {"gamma": 0.1, "mu": 2.0}, "takes no parameter mu"),
    ("geometric", {"gama": 0.1}, "unknown repetition parameters"),
    ("truncated_negative_binomial", {"eta": 0.5, "gamma": 0.1}, "no exact sampler"),
    ("truncated_negative_binomial", {"eta": 0.0, "gamma": 0.1}, "no exact sampler"),
])
def test_a_law_without_an_exact_sampler_or_with_bad_parameters_is_refused(law: str, params: dict,
                                                                          message: str) -> None:
    with pytest.raises(InvalidParameter, match=message):
        repeat_and_select_event(_base(), law, params)
