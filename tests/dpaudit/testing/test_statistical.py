"""Tests of the statistical DP tester itself (dpaudit/testing/statistical.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import binomtest

from dpaudit.errors import InvalidParameter
from dpaudit.testing.statistical import clopper_pearson, dp_test


def _above(t: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda out: out > t


EVENTS = {f"> {t}": _above(t) for t in (-1.0, 0.0, 0.5, 1.0, 2.0, 3.0)}


@pytest.mark.parametrize(("successes", "trials"), [(0, 50), (7, 50), (50, 50), (123, 1000)])
def test_clopper_pearson_matches_scipy_exact_interval(successes: int, trials: int) -> None:
    ci = binomtest(successes, trials).proportion_ci(confidence_level=0.99, method="exact")
    assert clopper_pearson(successes, trials, 0.01) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)


@pytest.mark.statistical
def test_flags_an_overclaimed_laplace_and_accepts_the_true_epsilon() -> None:
    """Continuous Laplace(0, 1) vs Laplace(1, 1) is exactly 1-DP; n = 100 000 per input, numpy seed 0.

    Claim ε = 1: false-alarm rate ≤ 0.05 by construction. Claim ε = 0.7 (over-claimed): flagged for seeds 0..19
    during development (miss rate 0/20).
    """
    rng = np.random.default_rng(0)
    outputs_x, outputs_xprime = rng.laplace(0.0, 1.0, 100_000), rng.laplace(1.0, 1.0, 100_000)
    assert not dp_test(outputs_x, outputs_xprime, 1.0, 0.0, EVENTS, 0.05).violated
    result = dp_test(outputs_x, outputs_xprime, 0.7, 0.0, EVENTS, 0.05)
    assert result.violated
    assert result.p_lower > result.bound == pytest.approx(np.exp(0.7) * result.q_upper)


def test_delta_absorbs_a_rare_difference() -> None:
    outputs_x = np.r_[np.zeros(970), np.ones(30)]
    outputs_xprime = np.zeros(1000)
    events = {"one": lambda out: out == 1}
    assert dp_test(outputs_x, outputs_xprime, 0.0, 0.0, events, 0.05).violated
    assert not dp_test(outputs_x, outputs_xprime, 0.0, 0.05, events, 0.05).violated


@pytest.mark.parametrize("kwargs", [
    {"events": {}}, {"epsilon": -1.0}, {"epsilon": float("inf")}, {"delta": 1.0}, {"alpha": 0.0},
    {"events": {"bad": lambda out: out}}, {"outputs_x": np.zeros(0)},
])
def test_bad_arguments_are_refused(kwargs: dict) -> None:
    arguments = {"outputs_x": np.zeros(10), "outputs_xprime": np.zeros(10), "epsilon": 1.0, "delta": 0.0,
                 "events": {"pos": lambda out: out > 0}, "alpha": 0.05, **kwargs}
    with pytest.raises(InvalidParameter):
        dp_test(**arguments)
