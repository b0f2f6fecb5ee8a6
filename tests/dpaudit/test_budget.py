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


# --- refusal by the cheap lower bound ------------------------------------------------------------------------------


class _Forbidden:
    """Wraps an accountant; fails the test if the expensive bound is asked for."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.members = inner.members

    def epsilon_with_source(self, event, delta):
        raise AssertionError("the full accountant was consulted for a request the lower bound refuses")


def test_an_over_budget_laplace_request_is_refused_without_the_full_accountant() -> None:
    """Budget 1000, 30 earlier releases, a request for 5000: refused by the lower bound (was a PLD composition of
    13-56 s under the budget lock)."""
    budget = BudgetFilter(1000.0, 1e-5, _Forbidden(get_accountant("tightest")))
    for _ in range(30):
        event = laplace(10.0)
        budget.commit(event, budget.admit(event))
    with pytest.raises(BudgetExceeded, match="at least 5000"):
        budget.admit(laplace(5000.0))
    assert len(budget.events) == 30


def test_refusal_stays_exact_at_the_boundary() -> None:
    """A request the full accountant admits right at the budget is still admitted; one just above is refused."""
    accountant = get_accountant("tightest")
    first = laplace(3.0)
    exact = accountant.epsilon(compose([first, laplace(3.0)]), 1e-5)
    at_boundary = BudgetFilter(exact, 1e-5, accountant)
    at_boundary.commit(first, at_boundary.admit(first))
    assert at_boundary.admit(laplace(3.0)).epsilon <= exact
    below = BudgetFilter(exact * (1 - 1e-6), 1e-5, accountant)
    below.commit(first, below.admit(first))
    with pytest.raises(BudgetExceeded):
        below.admit(laplace(3.0))
