"""The Rényi filter (dpaudit/accounting/filters.py): its budgets, exact admission boundaries, and an adaptive
adversary whose exact privacy profile must stay within what the filter certifies."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import dpaudit.accounting.filters as filters
from dpaudit.accounting.filters import (
    DEFAULT_FILTER_ORDERS,
    RenyiFilter,
    charge_rdp,
    conversion_term,
    filter_epsilon,
    first_refused,
)
from dpaudit.accounting.rdp import randomized_response_rdp
from dpaudit.errors import InvalidParameter, UnsupportedEvent

from ._events import dpsgd, exponential, laplace


def test_order_budget_is_balle_et_al_conversion_at_the_split_delta():
    """B_α = ε_B − ln((α − 1)/α) + (ln(δ_B/|A|) + ln α)/(α − 1), hand-computed for α = 8, |A| = 1 and 14."""
    single = RenyiFilter(2.0, 1e-5, (8.0,))
    assert single.delta_per_order == 1e-5
    assert single.budgets()[0] == pytest.approx(2.0 - math.log(7 / 8) + (math.log(1e-5) + math.log(8)) / 7,
                                                rel=1e-12)
    assert single.budgets()[0] == pytest.approx(0.785891, abs=1e-6)  # 2 + 0.133531 − 1.347641
    split = RenyiFilter(2.0, 1e-5)
    assert len(split.orders) == 14 and split.delta_per_order == pytest.approx(1e-5 / 14)
    i = split.orders.index(8.0)
    # the union bound costs exactly ln|A|/(α − 1) of budget at each order
    assert single.budgets()[0] - split.budgets()[i] == pytest.approx(math.log(14) / 7, rel=1e-12)


def test_gaussian_steps_admitted_exactly_up_to_the_order_budget():
    """q = 1 DP-SGD steps are Gaussian: ρ(α) = α/(2σ²) per step. σ puts 3 steps on B_8 (±10⁻⁹ relative)."""
    flt = RenyiFilter(2.0, 1e-5, (8.0,))
    budget = flt.budgets()[0]
    sigma_at_boundary = math.sqrt(3 * 8 / (2 * budget))
    for factor, admitted in ((1 + 1e-9, True), (1 - 1e-9, False)):
        step = charge_rdp(dpsgd(1.0, sigma_at_boundary * factor, 1), flt.orders)
        assert step[0][0] == pytest.approx(8 / (2 * (sigma_at_boundary * factor) ** 2), rel=1e-12)
        assert math.isinf(step[1])  # no pure-DP bound for a Gaussian
        assert (first_refused(flt, [step] * 3) is None) is admitted
        assert first_refused(flt, [step] * 4) == (3 if admitted else 2)  # a fourth step never fits


def test_pure_charges_use_the_pure_order_without_delta():
    """Four exponential-mechanism charges of ε = 1/4 fill ε_B = 1 exactly (α = ∞); a fifth is refused, and so is a
    fourth a hair larger: with δ_B = 10⁻⁶ no finite order can hold them."""
    flt = RenyiFilter(1.0, 1e-6)
    quarter = charge_rdp(exponential(0.25), flt.orders)
    assert quarter[1] == 0.25
    assert first_refused(flt, [quarter] * 4) is None
    assert first_refused(flt, [quarter] * 5) == 4
    assert first_refused(flt, [quarter] * 3 + [charge_rdp(exponential(0.25 + 1e-12), flt.orders)]) == 3


def test_filter_epsilon_is_the_smallest_budget_that_admits():
    events = [laplace(0.1), dpsgd(0.01, 1.0, 500), exponential(0.3)]
    orders = DEFAULT_FILTER_ORDERS
    curves = [charge_rdp(e, orders) for e in events]
    needed = filter_epsilon(RenyiFilter(1.0, 1e-5), sum(c[0] for c in curves), sum(c[1] for c in curves))
    assert first_refused(RenyiFilter(needed * (1 + 1e-9), 1e-5), curves) is None
    assert first_refused(RenyiFilter(needed * (1 - 1e-9), 1e-5), curves) == 2


def test_a_release_without_a_renyi_bound_is_refused():
    """A sensitivity that holds only with probability 1 − δ_s has no RDP bound: the filter cannot admit it."""
    sens = dataclasses.replace(laplace(0.1).sensitivity, failure_probability=1e-7)
    with pytest.raises(UnsupportedEvent, match="Renyi filter.*probability 1 - delta_s"):
        charge_rdp(dataclasses.replace(laplace(0.1), sensitivity=sens), DEFAULT_FILTER_ORDERS)


@pytest.mark.parametrize("orders", [(), (1.5,), (2.5, 3.0), (3.0, 2.0), (2.0, 2.0), (2048.0,), (1.0,)])
def test_bad_orders_are_refused(orders):
    """Only increasing integer orders ≥ 2 of the RDP grid: fractional orders would be rechecked against
    dp_accounting's over-estimating fractional series (docs/accounting.md)."""
    with pytest.raises(InvalidParameter):
        RenyiFilter(1.0, 1e-5, orders)


def test_description_round_trips_and_recomputes_the_split():
    flt = RenyiFilter(3.0, 1e-6, (2.0, 4.0, 16.0))
    described = flt.to_dict()
    assert RenyiFilter.from_dict(described) == flt
    assert RenyiFilter.from_dict({**described, "delta_per_order": 1e-6}).delta_per_order == pytest.approx(1e-6 / 3)
    for bad in ({**described, "version": "renyi-filter/0"}, {**described, "name": "other"},
                {k: v for k, v in described.items() if k != "orders"}):
        with pytest.raises(InvalidParameter):
            RenyiFilter.from_dict(bad)


# --- an adaptive adversary against the filter's guarantee ---------------------------------------------------------


def _largest_admitted(flt: RenyiFilter, rdp: np.ndarray, pure: float) -> float:
    """The largest randomized-response ε the filter admits after (rdp, pure), by bisection to 2⁻⁴⁰ (0 if none)."""
    orders = np.array(flt.orders)
    lo, hi = 0.0, 20.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if flt.admits(rdp + randomized_response_rdp(mid, orders), pure + mid):
            lo = mid
        else:
            hi = mid
    return lo


def _adaptive_profile(flt: RenyiFilter, depth: int) -> tuple[float, float]:
    """An adversary runs ``depth`` binary randomized responses on the protected bit, choosing each ε from the outputs
    so far: 0.25 after a 1 (and first), 0.1 after a 0, capped by what the filter admits, and the largest admitted ε
    last. Randomized response's RDP curve is exactly what the filter charges a pure ε-DP release, so the adversary
    spends the filter's budget to the last bit. Returns the exact hockey-stick divergence at e^{ε_B} of the whole
    transcript between inputs 1 and 0 (RR is symmetric: the other direction is the same) and the largest realised
    Σε of any transcript."""
    orders = np.array(flt.orders)

    def walk(t: int, last: int, rdp: np.ndarray, pure: float, p: float, q: float) -> tuple[float, float]:
        if t == depth:
            return max(p - math.exp(flt.epsilon) * q, 0.0), pure
        most = _largest_admitted(flt, rdp, pure)
        eps = most if t == depth - 1 else min(most, 0.25 if last == 1 else 0.1)
        keep = math.exp(eps) / (1 + math.exp(eps))  # P(output = the protected bit)
        rdp, pure = rdp + randomized_response_rdp(eps, orders), pure + eps
        ones = walk(t + 1, 1, rdp, pure, p * keep, q * (1 - keep))
        zeros = walk(t + 1, 0, rdp, pure, p * (1 - keep), q * keep)
        return ones[0] + zeros[0], max(ones[1], zeros[1])

    return walk(0, 1, np.zeros(len(orders)), 0.0, 1.0, 1.0)


def test_an_adaptive_adversary_stays_within_the_certified_delta():
    """The filter lets the adversary past the pure budget (Σε > ε_B on some transcript: the finite orders are used),
    yet the exact δ of the whole adaptive transcript at ε_B is within δ_B (measured: 5.3e-4 ≤ 1e-2)."""
    flt = RenyiFilter(1.0, 1e-2)
    delta, spent = _adaptive_profile(flt, depth=8)
    assert spent > 1.05 * flt.epsilon
    assert delta <= flt.delta


def test_a_filter_without_the_conversion_term_is_caught(monkeypatch):
    """Broken variant: order budgets B_α = ε_B (no conversion to (ε, δ)). The same adversary reaches an exact δ of
    about 0.14 at ε_B, far above δ_B = 10⁻²."""
    monkeypatch.setattr(filters, "conversion_term", lambda orders, delta: np.zeros(len(orders)))
    delta, _ = _adaptive_profile(RenyiFilter(1.0, 1e-2), depth=8)
    assert delta > 10 * 1e-2


def test_conversion_term_matches_the_rdp_accountant():
    """For fixed parameters the filter with one order and no split is Balle et al.'s conversion at that order."""
    rdp = np.array([0.3])
    assert (rdp + conversion_term(np.array([8.0]), 1e-5))[0] == pytest.approx(
        0.3 + math.log1p(-1 / 8) - (math.log(1e-5) + math.log(8)) / 7, rel=1e-12)
