"""Tests of the budget filter (dpaudit/budget.py)."""

from __future__ import annotations

import dataclasses

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.accounting.filters import RenyiFilter, charge_rdp, filter_epsilon
from dpaudit.budget import AdaptiveBudgetFilter, BudgetFilter
from dpaudit.errors import BudgetExceeded, InvalidParameter, UnsupportedEvent
from dpaudit.events import compose
from tests.dpaudit.accounting._events import dpsgd, exponential, laplace


@pytest.mark.parametrize("name", ["basic", "advanced", "rdp", "pld", "tightest"])
def test_admitted_events_stay_within_budget_for_the_session_accountant(name: str) -> None:
    """Whatever the session's accountant, the composition it certifies stays within the budget.

    200 Laplace releases at ε = 0.01: RDP bounds the composition by about 0.7 at δ = 1e-5, basic composition by
    2.0. A fast path that admits on RDP alone would let a basic-composition session certify ε = 2 > ε_B = 1.
    """
    accountant = get_accountant(name)
    budget = BudgetFilter(1.0, 1e-5, accountant)
    admitted = []
    for _ in range(200):
        event = laplace(0.01)
        try:
            admission = budget.admit(event)
        except BudgetExceeded:
            break
        budget.commit(event, admission)
        admitted.append(event)
    assert admitted
    assert accountant.epsilon(compose(admitted), 1e-5) <= 1.0


# --- adaptive mode: the Rényi filter ------------------------------------------------------------------------------


def test_adaptive_filter_admits_exactly_up_to_the_budget():
    """Four ε = 1/4 exponential-mechanism charges fill ε_B = 1 on the pure order; the fifth is refused and leaves
    the filter unchanged; admission alone changes nothing."""
    budget = AdaptiveBudgetFilter(1.0, 1e-6)
    quarter = exponential(0.25)
    for _ in range(4):
        admission = budget.admit(quarter)
        assert budget.admit(quarter) == admission  # admit is pure
        budget.commit(quarter, admission)
    assert budget.spent == 1.0 and admission.source == "renyi-filter"
    with pytest.raises(BudgetExceeded, match="Renyi filter .* would need epsilon 1.25 > budget 1; nothing"):
        budget.admit(quarter)
    assert len(budget.events) == 4 and budget.spent == 1.0


def test_adaptive_filter_spent_is_the_smallest_admitting_budget():
    budget = AdaptiveBudgetFilter(3.0, 1e-5)
    events = [dpsgd(0.01, 1.0, 400), laplace(0.2), dpsgd(0.02, 1.5, 100)]
    for event in events:
        budget.commit(event, budget.admit(event))
    flt = RenyiFilter(3.0, 1e-5)
    curves = [charge_rdp(e, flt.orders) for e in events]
    assert budget.spent == pytest.approx(filter_epsilon(flt, sum(c[0] for c in curves), sum(c[1] for c in curves)),
                                         rel=1e-12)
    # the filter is the price of adaptivity: never below the fixed-parameter RDP bound of the same charges
    assert budget.spent >= get_accountant("rdp").epsilon(compose(events), 1e-5)


def test_adaptive_filter_refuses_a_release_without_a_renyi_bound():
    sens = dataclasses.replace(laplace(0.1).sensitivity, failure_probability=1e-7)
    budget = AdaptiveBudgetFilter(1.0, 1e-5)
    with pytest.raises(UnsupportedEvent, match="Renyi filter"):
        budget.admit(dataclasses.replace(laplace(0.1), sensitivity=sens))
    assert budget.events == ()


def test_adaptive_filter_validates_its_orders():
    with pytest.raises(InvalidParameter, match="integer orders"):
        AdaptiveBudgetFilter(1.0, 1e-5, orders=(1.5, 2.0))
