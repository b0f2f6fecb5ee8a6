"""Tests of the budget filter (dpaudit/budget.py)."""

from __future__ import annotations

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.budget import BudgetFilter
from dpaudit.errors import BudgetExceeded
from dpaudit.events import compose
from tests.dpaudit.accounting._events import laplace


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
