"""The verifier's recheck of an adaptive session's claim (dpaudit/accounting/filter_recheck.py): both
implementations must admit every prefix, the claim must be the budget, and broken filter variants that let a session
admit too much are caught by the independent side."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import dpaudit.accounting.filters as filters
from dpaudit.accounting.filter_recheck import recheck_filter
from dpaudit.accounting.filters import RenyiFilter, charge_rdp, filter_epsilon, first_refused

from ._events import dpsgd, exponential, laplace


def _charges(events):
    return [(2 * i + 1, e) for i, e in enumerate(events)]


def _tight_budget(events, delta, orders=filters.DEFAULT_FILTER_ORDERS) -> float:
    """The smallest ε_B the (correct) filter admits ``events`` under."""
    curves = [charge_rdp(e, orders) for e in events]
    return filter_epsilon(RenyiFilter(1.0, delta, orders), sum(c[0] for c in curves), sum(c[1] for c in curves))


EVENTS = [laplace(0.2), dpsgd(256 / 60000, 1.1, 2000), exponential(0.3), dpsgd(0.01, 2.0, 300)]


def test_admitted_charges_recheck_with_the_budget_as_claim():
    budget = _tight_budget(EVENTS, 1e-5) * (1 + 1e-6)
    flt = RenyiFilter(budget, 1e-5)
    result = recheck_filter(flt, _charges(EVENTS), budget, 1e-5)
    assert result.ok, result.reason
    assert "every prefix admitted" in result.reason


def test_a_claim_below_the_budget_fails():
    """A filter certifies its budget, never the realised (smaller) composition: that would be an odometer."""
    budget = _tight_budget(EVENTS, 1e-5) * 1.5
    result = recheck_filter(RenyiFilter(budget, 1e-5), _charges(EVENTS), budget / 1.5, 1e-5)
    assert not result.ok and "is not the renyi-filter budget" in result.reason


def test_charges_beyond_the_filter_fail_in_both_implementations():
    """A ledger extended past its filter (or a session that did not enforce it) names the first refused charge."""
    budget = _tight_budget(EVENTS[:2], 1e-5) * (1 + 1e-6)
    result = recheck_filter(RenyiFilter(budget, 1e-5), _charges(EVENTS), budget, 1e-5)
    assert not result.ok
    assert "ours refuses the charges up to seq 5" in result.reason
    assert "dp_accounting refuses the charges up to seq 5" in result.reason


def test_a_release_without_a_renyi_bound_fails_the_recheck():
    sens = dataclasses.replace(laplace(0.1).sensitivity, failure_probability=1e-7)
    result = recheck_filter(RenyiFilter(5.0, 1e-5), _charges([dataclasses.replace(laplace(0.1), sensitivity=sens)]),
                            5.0, 1e-5)
    assert not result.ok and "probability 1 - delta_s" in result.reason


def _no_split(monkeypatch):
    monkeypatch.setattr(filters.RenyiFilter, "delta_per_order", property(lambda self: self.delta))


def _conversion_over_alpha(monkeypatch):
    monkeypatch.setattr(filters, "conversion_term",
                        lambda orders, delta: -math.log(delta) / np.asarray(orders, dtype=float))


#: ε ≈ 10 DP-SGD: the best orders are small (α ≈ 2-4), where ln(1/δ)/α is far below the correct conversion
HIGH_EPSILON = [dpsgd(256 / 60000, 0.6, 10000)]


@pytest.mark.parametrize(("broken", "events"), [(_no_split, EVENTS), (_conversion_over_alpha, HIGH_EPSILON)],
                         ids=["no-split", "over-alpha"])
def test_a_broken_filter_is_caught_by_the_independent_recheck(monkeypatch, broken, events):
    """Broken variants admit more than the filter may: δ_B not split over the orders (no union bound), or the
    conversion ln(1/δ)/α instead of ln((α − 1)/α) − (ln δ + ln α)/(α − 1). Charges fitted to the broken filter's
    budget pass the (equally broken) own recomputation but fail dp_accounting's, whose budgets are written
    independently."""
    correct = _tight_budget(events, 1e-5)
    broken(monkeypatch)
    budget = _tight_budget(events, 1e-5) * (1 + 1e-7)
    assert budget < correct  # the broken variant would certify less than the filter can prove
    flt = RenyiFilter(budget, 1e-5)
    assert first_refused(flt, [charge_rdp(e, flt.orders) for e in events]) is None  # the broken session admits
    result = recheck_filter(flt, _charges(events), budget, 1e-5)
    assert not result.ok
    assert "ours admits all" in result.reason and "dp_accounting refuses" in result.reason
