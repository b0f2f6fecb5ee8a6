"""RDP accountant: golden DP-SGD values, the pure-DP curve, the conversion, caching."""

from __future__ import annotations

import math

import dp_accounting
import mpmath as mp
import numpy as np
import pytest
from opacus.accountants import RDPAccountant as OpacusRdp
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

from dpaudit.accounting import BasicComposition, RdpAccountant
from dpaudit.accounting.charges import PoissonGaussianSpec, PureSpec, tally
from dpaudit.accounting.rdp import ORDERS, randomized_response_rdp, rdp_curve, rdp_to_epsilon
from dpaudit.events import ComposedEvent

from ._events import (
    MNIST_DELTA,
    MNIST_Q,
    MNIST_SIGMA,
    MNIST_STEPS,
    dpsgd,
    dpsgd_without_replacement,
    exponential,
    gaussian,
    laplace,
)


def test_mnist_golden_value_matches_opacus_and_dp_accounting():
    """Opacus MNIST tutorial setting: RDP ε = 2.59436 (Opacus 1.6 and dp_accounting 0.6 agree)."""
    eps = RdpAccountant().epsilon(dpsgd(MNIST_Q, MNIST_SIGMA, MNIST_STEPS), MNIST_DELTA)
    assert eps == pytest.approx(2.5943633549531, rel=1e-9)
    opacus = OpacusRdp()
    opacus.history = [(MNIST_SIGMA, MNIST_Q, MNIST_STEPS)]
    assert eps <= opacus.get_epsilon(MNIST_DELTA) * (1 + 1e-12)  # our grid contains Opacus's
    dpa = dp_accounting.rdp.RdpAccountant()
    dpa.compose(dp_accounting.PoissonSampledDpEvent(MNIST_Q, dp_accounting.GaussianDpEvent(MNIST_SIGMA)), MNIST_STEPS)
    assert eps == pytest.approx(dpa.get_epsilon(MNIST_DELTA), rel=1e-6)


def test_abadi_setting_golden_value():
    """Abadi et al. 2016 large-noise setting: q = 0.01, σ = 4, 10⁴ steps, δ = 1e-5."""
    assert RdpAccountant().epsilon(dpsgd(0.01, 4.0, 10_000), 1e-5) == pytest.approx(1.0354900660362, rel=1e-9)


def test_classic_conversion_is_looser_than_the_improved_one():
    """Mironov 2017 Prop. 3 (ε(α) − ln δ/(α−1)) gives 3.006 here; Balle et al. 2020 Thm. 21 gives 2.594."""
    curve, _ = rdp_curve(PoissonGaussianSpec(MNIST_Q, MNIST_SIGMA))
    orders = np.array(ORDERS)
    classic = float(np.min(MNIST_STEPS * curve - math.log(MNIST_DELTA) / (orders - 1)))
    assert classic == pytest.approx(3.0058748679, rel=1e-8)
    improved, _ = rdp_to_epsilon(orders, MNIST_STEPS * curve, math.inf, MNIST_DELTA)
    assert improved < classic


def test_conversion_reproduces_opacus_docstring_example():
    """opacus.accountants.analysis.rdp module example: (0.336, order 23)."""
    orders = np.arange(2, 33, dtype=float)
    rdp = compute_rdp(q=1e-5, noise_multiplier=1.0, steps=10, orders=list(orders)) + compute_rdp(
        q=1e-4, noise_multiplier=3.0, steps=4, orders=list(orders))
    eps, order = rdp_to_epsilon(orders, rdp, math.inf, 1e-5)
    ref_eps, ref_order = get_privacy_spent(orders=list(orders), rdp=rdp, delta=1e-5)
    assert (eps, order) == (pytest.approx(float(ref_eps), rel=1e-12), float(ref_order))
    assert eps == pytest.approx(0.336, abs=5e-4) and order == 23


@pytest.mark.parametrize("epsilon", [1e-6, 0.01, 1.0, 5.0, 50.0])
def test_randomized_response_rdp_matches_40_digit_formula(epsilon):
    mp.mp.dps = 40
    orders = np.array([1.1, 2.0, 10.0, 1024.0])
    got = randomized_response_rdp(epsilon, orders)
    for a, g in zip(orders, got, strict=True):
        e, al = mp.mpf(epsilon), mp.mpf(float(a))
        exact = mp.log((mp.exp(al * e) + mp.exp((1 - al) * e)) / (1 + mp.exp(e))) / (al - 1)
        assert g == pytest.approx(float(min(exact, e)), rel=1e-12)


def test_opacus_fractional_orders_are_exact():
    """The fractional-order series we rely on matches a 40-digit quadrature of A_α (Mironov et al. 2019)."""
    mp.mp.dps = 40
    q, s = mp.mpf(MNIST_Q), mp.mpf(MNIST_SIGMA)
    curve, _ = rdp_curve(PoissonGaussianSpec(MNIST_Q, MNIST_SIGMA))
    for alpha in (1.1, 3.5, 7.7):
        a = mp.mpf(alpha)
        integrand = lambda z, a=a: mp.npdf(z, 0, s) * ((1 - q) + q * mp.exp((2 * z - 1) / (2 * s**2))) ** a  # noqa: E731
        exact = mp.log(mp.quad(integrand, [-mp.inf, -10, 0, 1, 10, mp.inf])) / (a - 1)
        assert curve[ORDERS.index(alpha)] == pytest.approx(float(exact), rel=1e-8)


def test_pure_events_compose_like_basic_composition():
    events = ComposedEvent(events=tuple(laplace(e) for e in (0.1, 0.2, 0.3, 0.05)) + (exponential(0.25),))
    basic = BasicComposition().epsilon(events, 0.0)
    assert RdpAccountant().epsilon(events, 0.0) == pytest.approx(basic, rel=1e-12)  # α = ∞: exactly Σε
    assert RdpAccountant().epsilon(events, 1e-6) <= basic * (1 + 1e-12)
    eps, order = RdpAccountant().epsilon_and_order(tally(events)[1], 0.0)
    assert order == math.inf and eps == pytest.approx(0.9 + 0.001 * 0, rel=1e-3)


def test_many_small_pure_events_beat_basic_composition():
    events = ComposedEvent(events=(laplace(0.1),) * 100)
    assert RdpAccountant().epsilon(events, 1e-6) < 0.6 * BasicComposition().epsilon(events, 1e-6)


def test_exponential_uses_bounded_range_zcdp():
    curve, at_inf = rdp_curve(PureSpec(1.0, bounded_range=True))
    rr, _ = rdp_curve(PureSpec(1.0))
    assert at_inf == 1.0
    assert np.all(curve <= rr) and curve[ORDERS.index(2.0)] == pytest.approx(2.0 / 8.0)


def test_discrete_gaussian_curve_is_zcdp_line():
    event = gaussian(sigma=5.0)
    spec = next(iter(tally(event)[1]))
    curve, at_inf = rdp_curve(spec)
    assert at_inf == math.inf
    np.testing.assert_allclose(curve, np.array(ORDERS) * spec.sensitivity**2 / (2 * spec.sigma**2), rtol=1e-15)


def test_without_replacement_uses_wang_balle_kasiviswanathan():
    event = dpsgd_without_replacement(256, 60000, 1.1, 1000)
    dpa = dp_accounting.rdp.RdpAccountant(list(ORDERS), dp_accounting.NeighboringRelation.REPLACE_ONE)
    dpa.compose(dp_accounting.SampledWithoutReplacementDpEvent(60000, 256, dp_accounting.GaussianDpEvent(1.1)), 1000)
    assert RdpAccountant().epsilon(event, 1e-5) == pytest.approx(dpa.get_epsilon(1e-5), rel=1e-9)


def test_delta_zero_without_pure_bound_is_refused():
    from dpaudit.accounting import DeltaUnreachable

    with pytest.raises(DeltaUnreachable):
        RdpAccountant().epsilon(dpsgd(0.01, 1.0, 10), 0.0)


def test_incremental_compositions_reuse_cached_curves():
    """2000 releases through the filter pattern compute each distinct curve once (cache misses, not time)."""
    rdp_curve.cache_clear()
    acc, released = RdpAccountant(), []
    for i in range(2000):
        released.append(laplace(0.01) if i % 2 else laplace(0.02))
        acc.epsilon(ComposedEvent(events=tuple(released)), 1e-6)
    info = rdp_curve.cache_info()
    assert info.misses == 2
    assert info.hits == sum(min(n, 2) for n in range(1, 2001)) - 2
