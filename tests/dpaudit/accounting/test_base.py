"""Input validation and refusals shared by every accountant."""

from __future__ import annotations

import math

import pytest

from dpaudit.accounting import ACCOUNTANTS, get_accountant
from dpaudit.errors import AccountingError, InvalidParameter, UnsupportedEvent
from dpaudit.events import ComposedEvent, LaplaceEvent

from ._events import GRID, dpsgd, dpsgd_without_replacement, laplace

NAMES = sorted(ACCOUNTANTS)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("delta", [math.nan, -1e-9, 1.0, 1.5, math.inf, "0.1", True])
def test_bad_delta_is_invalid_parameter(name, delta):
    with pytest.raises(InvalidParameter):
        get_accountant(name).epsilon(laplace(0.1), delta)


@pytest.mark.parametrize("name", NAMES)
def test_mixed_neighbouring_relations_are_refused(name):
    mixed = ComposedEvent(events=(laplace(0.1, "replace_one"), laplace(0.1, "add_remove")))
    assert not get_accountant(name).supports(mixed)
    with pytest.raises(UnsupportedEvent, match="different neighbouring relations"):
        get_accountant(name).epsilon(mixed, 1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_empty_composition_is_refused(name):
    with pytest.raises(UnsupportedEvent):
        get_accountant(name).epsilon(ComposedEvent(events=()), 1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_under_charging_event_is_an_accounting_error(name):
    good = laplace(0.5)
    bad = LaplaceEvent(neighbouring="add_remove", sensitivity=good.sensitivity, epsilon=0.4, scale=good.scale,
                       grid=GRID)
    with pytest.raises(AccountingError, match="under-charges"):
        get_accountant(name).epsilon(bad, 1e-6)


def test_without_replacement_mixed_with_poisson_is_refused():
    event = ComposedEvent(events=(dpsgd(0.01, 1.0, 10), dpsgd_without_replacement(10, 1000, 1.0, 10)))
    with pytest.raises(UnsupportedEvent):
        get_accountant("rdp").epsilon(event, 1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_results_are_finite_and_nonnegative(name):
    acc = get_accountant(name)
    for event in (laplace(1e-3), ComposedEvent(events=(laplace(2.0),) * 3)):
        eps = acc.epsilon(event, 1e-5) if acc.supports(event) else 0.0
        assert math.isfinite(eps) and eps >= 0


@pytest.mark.parametrize("name", NAMES)
def test_epsilon_with_source_is_the_bound_and_names_who_attained_it(name):
    """Every accountant answers ``epsilon_with_source`` (the filter, certificate and CLI call it unguarded): the ε is
    the accountant's own bound and the source is the accountant or, for the tightest, one of its members."""
    acc = get_accountant(name)
    event = next(e for e in (ComposedEvent(events=(laplace(0.5),) * 2), dpsgd(0.01, 1.0, 10)) if acc.supports(e))
    eps, source = acc.epsilon_with_source(event, 1e-6)
    assert eps == acc.epsilon(event, 1e-6)
    assert source == name or source.split()[0] in {m.name for m in getattr(acc, "members", ())}
    with pytest.raises(InvalidParameter):
        acc.epsilon_with_source(event, math.nan)
