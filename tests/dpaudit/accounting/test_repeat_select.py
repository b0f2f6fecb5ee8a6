"""Repeat-and-select accounting: Papernot & Steinke 2022 (Thms. 2 and 6) against dp_accounting's
``RepeatAndSelectDpEvent``, Liu & Talwar 2019 (Thm. 3.4) for pure bases, and the refusals of the other accountants."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.dp_event import RepeatAndSelectDpEvent

from dpaudit.accounting import get_accountant, recheck
from dpaudit.accounting import repeat_select as rs
from dpaudit.accounting.charges import RepeatSelectSpec, tally
from dpaudit.accounting.rdp import ORDERS, rdp_dominated
from dpaudit.errors import UnsupportedEvent
from dpaudit.events import ComposedEvent, RepeatAndSelectEvent, SelfComposedEvent
from tests.dpaudit.accounting._events import MNIST_Q, MNIST_SIGMA, dpsgd, laplace

DELTA = 1e-5
BASE = dpsgd(MNIST_Q, MNIST_SIGMA, 2340)  # 10 epochs of the MNIST setting
INTEGER_ORDERS = [a for a in ORDERS if a.is_integer()]

#: (our event's law, dp_accounting's (mean, shape), our ε at δ = 1e-5 on the full grid, measured once).
LAWS = [
    ({"distribution": "geometric", "gamma": 0.1}, (10.0, 1.0), 2.2825660571744),
    ({"distribution": "truncated_negative_binomial", "eta": 0.5, "gamma": 0.05}, None, 2.1704109509818),
    ({"distribution": "truncated_negative_binomial", "eta": 0.0, "gamma": 0.05}, None, 1.8291412495439),
    ({"distribution": "truncated_negative_binomial", "eta": 2.0, "gamma": 0.2}, None, 2.4926062193763),
    ({"distribution": "poisson", "mu": 10.0}, (10.0, math.inf), 2.3074705900293),
]


def _dp_accounting_epsilon(law: dict, mean_shape: tuple[float, float] | None, orders: list[float]) -> float:
    if mean_shape is None:
        mean_shape = (rs.truncated_negative_binomial_mean(law["eta"], law["gamma"]), law["eta"])
    base = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(MNIST_Q, dp_accounting.GaussianDpEvent(MNIST_SIGMA)), 2340)
    acc = dp_accounting.rdp.RdpAccountant(orders)
    acc.compose(RepeatAndSelectDpEvent(base, *mean_shape))
    return acc.get_epsilon(DELTA)


@pytest.mark.parametrize(("law", "mean_shape", "golden"), LAWS, ids=lambda x: str(x))
def test_matches_dp_accounting_repeat_and_select(law, mean_shape, golden):
    """On the full order grid we are at most dp_accounting (whose fractional-order subsampled-Gaussian series
    over-estimates) and within 0.1 % of it; on the integer orders both compute the same theorem to 1e-9."""
    event = RepeatAndSelectEvent(event=BASE, **law)
    ours = get_accountant("rdp").epsilon(event, DELTA)
    assert ours == pytest.approx(golden, rel=1e-9)
    full = _dp_accounting_epsilon(law, mean_shape, list(ORDERS))
    assert full * (1 - 1e-3) <= ours <= full * (1 + 1e-9)
    result = recheck("rdp", event, DELTA, ours)
    assert result.ok and result.independent == "dp_accounting RDP, integer orders"
    assert result.independent_value == pytest.approx(_dp_accounting_epsilon(law, mean_shape, INTEGER_ORDERS),
                                                     rel=1e-9)


def test_tuning_costs_more_than_one_run_and_less_than_composition():
    one = get_accountant("rdp").epsilon(BASE, DELTA)
    tuned = get_accountant("rdp").epsilon(RepeatAndSelectEvent(event=BASE, distribution="geometric", gamma=0.1),
                                          DELTA)
    ten_runs = get_accountant("rdp").epsilon(SelfComposedEvent(event=BASE, count=10), DELTA)
    assert one < tuned < ten_runs


def test_theorem_2_by_hand_at_one_order():
    """ε′(λ) = ε(λ) + (1 + η)·min_λ̂[(1 − 1/λ̂)ε(λ̂) + ln(1/γ)/λ̂] + ln E[K]/(λ − 1), before the monotone envelope."""
    orders = np.array([2.0, 4.0, 8.0, 16.0])
    base = np.array([0.1, 0.3, 0.8, 2.0])
    eta, gamma = 2.0, 0.2
    hat = min((1 - 1 / lh) * e + math.log(1 / gamma) / lh for lh, e in zip(orders, base, strict=True))
    mean = eta * (1 - gamma) / (gamma * (1 - gamma**eta))
    expected = base + (1 + eta) * hat + math.log(mean) / (orders - 1)
    got = rs.truncated_negative_binomial_rdp(orders, base, eta, gamma)
    assert got == pytest.approx(np.minimum.accumulate(expected[::-1])[::-1], rel=1e-12)


def test_theorem_6_by_hand():
    """ε′(λ) = ε(λ) + μ·δ̂ + ln μ/(λ − 1), δ̂ the base's δ at ε̂ = ln(1 + 1/(λ − 1)), before the monotone envelope."""
    orders = np.array([2.0, 4.0, 8.0])
    base = np.array([0.05, 0.2, 0.6])
    mu = 3.0
    expected = []
    for lam, eps in zip(orders, base, strict=True):
        eps_hat = math.log1p(1 / (lam - 1))
        delta_hat = min(min(math.exp((a - 1) * (r - eps_hat + math.log1p(-1 / a)) - math.log(a)),
                            math.sqrt(-math.expm1(-r))) for a, r in zip(orders, base, strict=True))
        expected.append(eps + mu * delta_hat + math.log(mu) / (lam - 1))
    got = rs.poisson_rdp(orders, base, math.inf, mu)
    assert got == pytest.approx(np.minimum.accumulate(np.array(expected)[::-1])[::-1], rel=1e-9)
    assert rs.poisson_rdp(orders, base, 0.01, mu) == pytest.approx(
        np.minimum.accumulate((base + math.log(mu) / (orders - 1))[::-1])[::-1], rel=1e-12)  # pure base: δ̂ = 0


def test_mean_of_the_truncated_negative_binomial():
    """E[K] against the pmf summed directly."""
    for eta, gamma in ((1.0, 0.3), (2.0, 0.2), (0.5, 0.1), (0.0, 0.05)):
        ks = np.arange(1, 20000)
        if eta == 0.0:
            pmf = (1 - gamma) ** ks / (ks * math.log(1 / gamma))
        else:
            log_coef = np.array([math.lgamma(k + eta) - math.lgamma(eta) - math.lgamma(k + 1) for k in ks])
            pmf = np.exp(ks * math.log(1 - gamma) + log_coef) / (gamma ** (-eta) - 1)
        assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
        assert rs.truncated_negative_binomial_mean(eta, gamma) == pytest.approx(float((ks * pmf).sum()), rel=1e-9)


@pytest.mark.parametrize("gamma", [0.01, 0.2, 0.9])
def test_liu_talwar_three_epsilon_for_a_pure_base(gamma):
    """A geometric number of runs of an ε-DP base is 3ε-DP (Liu & Talwar 2019, Thm. 3.4) through basic composition,
    at δ = 0 too; the tightest accountant never reports more."""
    base = ComposedEvent(events=(laplace(0.2), laplace(0.3)))
    event = RepeatAndSelectEvent(event=base, distribution="geometric", gamma=gamma)
    assert get_accountant("basic").epsilon(event, 0.0) == pytest.approx(1.5, rel=1e-9)
    assert get_accountant("tightest").epsilon(event, DELTA) <= 1.5 * (1 + 1e-9)
    same_law = RepeatAndSelectEvent(event=base, distribution="truncated_negative_binomial", eta=1.0, gamma=gamma)
    assert get_accountant("basic").epsilon(same_law, 0.0) == pytest.approx(1.5, rel=1e-9)
    result = recheck("basic", event, DELTA, get_accountant("basic").epsilon(event, DELTA))
    assert result.ok


def test_basic_refuses_what_liu_talwar_does_not_cover():
    pure = laplace(0.5)
    for event in (RepeatAndSelectEvent(event=pure, distribution="poisson", mu=3.0),
                  RepeatAndSelectEvent(event=pure, distribution="truncated_negative_binomial", eta=2.0, gamma=0.5),
                  RepeatAndSelectEvent(event=BASE, distribution="geometric", gamma=0.5)):
        with pytest.raises(UnsupportedEvent, match="Liu & Talwar"):
            get_accountant("basic").epsilon(event, DELTA)


@pytest.mark.parametrize("name", ["pld", "prv", "advanced"])
def test_other_accountants_refuse(name):
    for base in (BASE, laplace(0.5)):
        event = RepeatAndSelectEvent(event=base, distribution="geometric", gamma=0.5)
        with pytest.raises(UnsupportedEvent):
            get_accountant(name).epsilon(event, DELTA)
        assert not get_accountant(name).supports(event)


def test_tightest_picks_rdp_for_dp_sgd_and_composes_with_other_charges():
    event = RepeatAndSelectEvent(event=BASE, distribution="poisson", mu=5.0)
    eps, source = get_accountant("tightest").epsilon_with_source(event, DELTA)
    assert source == "rdp"
    both, _ = get_accountant("tightest").epsilon_with_source(ComposedEvent(events=(event, BASE)), DELTA)
    assert eps < both


def test_a_repeat_and_select_is_one_accounting_unit():
    event = RepeatAndSelectEvent(event=SelfComposedEvent(event=BASE, count=2), distribution="geometric", gamma=0.5)
    _, counts = tally(SelfComposedEvent(event=event, count=3))
    (spec, count), = counts.items()
    assert isinstance(spec, RepeatSelectSpec) and count == 3
    (base_spec, base_count), = spec.base
    assert base_count == 2 * BASE.steps


def test_broken_implementation_is_caught_by_recheck(monkeypatch):
    """Dropping the ln E[K]/(λ − 1) term (a too-small bound) recomputes itself but disagrees with dp_accounting."""
    event = RepeatAndSelectEvent(event=BASE, distribution="geometric", gamma=0.1)
    import dpaudit.accounting.rdp as rdp_module

    def broken(orders, base, base_inf, distribution, parameters):
        return rs.truncated_negative_binomial_rdp(orders, base, 1.0, parameters["gamma"]) - math.log(
            1 / parameters["gamma"]) / (orders - 1)

    monkeypatch.setattr(rdp_module, "repeat_and_select_rdp", broken)
    rdp_module.rdp_curve.cache_clear()
    try:
        claimed = get_accountant("rdp").epsilon(event, DELTA)
        result = recheck("rdp", event, DELTA, claimed)
    finally:
        rdp_module.rdp_curve.cache_clear()
    assert result.recomputed == claimed and not result.ok and "DISAGREES" in result.reason


def test_rdp_dominance():
    assert rdp_dominated(dpsgd(0.01, 1.2, 100), dpsgd(0.01, 1.0, 100))
    assert rdp_dominated(dpsgd(0.01, 1.0, 50), dpsgd(0.02, 1.0, 100))
    assert not rdp_dominated(dpsgd(0.01, 1.0, 100), dpsgd(0.01, 1.2, 100))
    assert not rdp_dominated(dpsgd(0.01, 1.0, 101), dpsgd(0.01, 1.0, 100))
    assert rdp_dominated(laplace(0.1), laplace(0.2)) and not rdp_dominated(laplace(0.2), laplace(0.1))
    with pytest.raises(UnsupportedEvent):
        rdp_dominated(laplace(0.1, neighbouring="replace_one"), laplace(0.2))
