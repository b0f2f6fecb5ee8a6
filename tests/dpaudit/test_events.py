"""RepeatAndSelectEvent: JSON round trip, validation, leaves (for inspection) versus accounting units; the monotone
exponential mechanism's assumption."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dpaudit.errors import InvalidParameter, UnsupportedEvent
from dpaudit.events import (
    MONOTONE_SCORES,
    ComposedEvent,
    PrivacyEvent,
    RepeatAndSelectEvent,
    SelfComposedEvent,
    neighbouring_of,
)
from dpaudit.sensitivity import Neighbouring
from tests.dpaudit.accounting._events import dpsgd, exponential, laplace

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


def test_a_monotone_exponential_event_rests_on_the_callers_word():
    """``monotone=True`` halves the noise on the caller's assertion: the event lists it as a conditional assumption
    whatever way it was built (attack: the flag set with no assumption, as every event was before the fix)."""
    plain = exponential(1.0)
    assert MONOTONE_SCORES not in plain.all_assumptions()
    monotone = dataclasses.replace(plain, monotone=True)
    assert monotone.all_assumptions()[-1] is MONOTONE_SCORES and MONOTONE_SCORES.conditional
    assert monotone.assumptions == ()  # derived from the flag, not stored: no constructor can drop it
    # an event as an older ledger wrote it (flag, no assumption) decodes with the assumption
    old = {k: v for k, v in monotone.to_dict().items() if k != "assumptions"}
    assert MONOTONE_SCORES in PrivacyEvent.from_dict(old).all_assumptions()
    with pytest.raises(InvalidParameter, match="monotone"):
        dataclasses.replace(plain, monotone="yes")
