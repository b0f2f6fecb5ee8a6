"""RepeatAndSelectEvent: JSON round trip, validation, leaves (for inspection) versus accounting units."""

from __future__ import annotations

import json

import pytest

from dpaudit.errors import InvalidParameter, UnsupportedEvent
from dpaudit.events import ComposedEvent, PrivacyEvent, RepeatAndSelectEvent, SelfComposedEvent, neighbouring_of
from dpaudit.sensitivity import Neighbouring
from tests.dpaudit.accounting._events import dpsgd, laplace

BASE = dpsgd(0.01, 1.0, 100)


@pytest.mark.parametrize("law", [
    {"distribution": "geometric", "gamma": 0.1},
    {"distribution": "truncated_negative_binomial", "eta": 0.5, "gamma": 0.05},
    {"distribution": "poisson", "mu": 4.0},
])
def test_round_trip(law):
    event = RepeatAndSelectEvent(event=ComposedEvent(events=(BASE, BASE)), label="best of K", **law)
    decoded = PrivacyEvent.from_dict(json.loads(json.dumps(event.to_dict())))
    assert decoded == event and isinstance(decoded, RepeatAndSelectEvent)
    assert decoded.parameters() == {k: v for k, v in law.items() if k != "distribution"}
    nested = SelfComposedEvent(event=event, count=2)
    assert PrivacyEvent.from_dict(json.loads(json.dumps(nested.to_dict()))) == nested


def test_leaves_are_the_base_leaves_but_the_event_is_one_accounting_unit():
    event = RepeatAndSelectEvent(event=SelfComposedEvent(event=BASE, count=3), distribution="geometric", gamma=0.5)
    assert list(event.leaves()) == [(BASE, 3)]
    assert list(ComposedEvent(events=(event, BASE)).accounting_units()) == [(event, 1), (BASE, 1)]
    assert list(SelfComposedEvent(event=event, count=2).accounting_units()) == [(event, 2)]
    assert event.neighbouring is Neighbouring.ADD_REMOVE and neighbouring_of(event) is Neighbouring.ADD_REMOVE


@pytest.mark.parametrize("kwargs", [
    {"distribution": "binomial", "gamma": 0.5},
    {"distribution": "geometric"},
    {"distribution": "geometric", "gamma": 0.5, "mu": 2.0},
    {"distribution": "geometric", "gamma": 1.0},
    {"distribution": "geometric", "gamma": 0.0},
    {"distribution": "truncated_negative_binomial", "gamma": 0.5},
    {"distribution": "truncated_negative_binomial", "eta": -0.5, "gamma": 0.5},
    {"distribution": "truncated_negative_binomial", "eta": float("inf"), "gamma": 0.5},
    {"distribution": "poisson", "mu": 0.5},
    {"distribution": "poisson", "mu": float("nan")},
    {"distribution": "poisson", "mu": True},
])
def test_bad_laws_are_refused(kwargs):
    with pytest.raises(InvalidParameter):
        RepeatAndSelectEvent(event=BASE, **kwargs)


def test_bad_bases_are_refused():
    with pytest.raises(InvalidParameter):
        RepeatAndSelectEvent(event="dp-sgd", distribution="geometric", gamma=0.5)
    with pytest.raises(UnsupportedEvent):
        RepeatAndSelectEvent(event=ComposedEvent(events=()), distribution="geometric", gamma=0.5)
    with pytest.raises(UnsupportedEvent):
        RepeatAndSelectEvent(event=ComposedEvent(events=(laplace(0.1), laplace(0.1, neighbouring="replace_one"))),
                             distribution="geometric", gamma=0.5)
