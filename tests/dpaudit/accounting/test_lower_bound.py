"""The budget filter's cheap lower bound never exceeds what a sound accountant reports (so it refuses nothing that
the accountant would admit), and is positive exactly where a Laplace leaf makes it so."""

from __future__ import annotations

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.accounting.lower_bound import epsilon_lower_bound
from dpaudit.events import compose
from tests.dpaudit.accounting._events import exponential, gaussian, laplace


@pytest.mark.parametrize("name", ["basic", "advanced", "rdp", "pld", "tightest"])
@pytest.mark.parametrize("events", [
    [laplace(0.05)], [laplace(1.0)], [laplace(8.0)], [laplace(0.3)] * 20 + [laplace(4.0)],
    [laplace(2.0), exponential(0.5), laplace(0.1, dimension=3)],
])
@pytest.mark.parametrize("delta", [1e-9, 1e-5, 0.1])
def test_the_lower_bound_is_below_every_accountant(name: str, events: list, delta: float) -> None:
    candidate = compose(events)
    bound = epsilon_lower_bound(candidate, delta)
    largest_leaf = max(e.epsilon for e in events if type(e).__name__ == "LaplaceEvent")
    if delta <= 1e-5:
        assert bound > 0.99 * largest_leaf  # a useful bound, not just 0
    assert bound <= get_accountant(name).epsilon(candidate, delta)


def test_events_without_a_laplace_leaf_give_no_bound() -> None:
    assert epsilon_lower_bound(compose([exponential(5.0), gaussian(1.0)]), 1e-5) == 0.0
    assert epsilon_lower_bound(laplace(5.0), 0.5) == 0.0
