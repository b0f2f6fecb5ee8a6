"""The mechanism table (dpaudit.mechanisms.registry): what each module registers, and that one type is claimed once."""

from __future__ import annotations

import pytest

from dpaudit.events import LaplaceEvent
from dpaudit.mechanisms import laplace
from dpaudit.mechanisms.registry import entry_for, register_mechanism, registered_types


def test_every_pure_dp_module_registers_its_privacy_map():
    pure = {t.__name__ for t in registered_types() if entry_for_type(t).pure_epsilon is not None}
    assert pure == {"LaplaceEvent", "AboveThresholdEvent", "ExponentialEvent", "RandomizedResponseEvent"}


def entry_for_type(event_type: type):
    return entry_for(event_type.__new__(event_type))


def test_registering_the_same_functions_again_is_harmless_but_another_rule_is_refused():
    register_mechanism(LaplaceEvent, coverage=laplace.coverage, pure_epsilon=laplace.laplace_epsilon)
    with pytest.raises(ValueError, match="already registered"):
        register_mechanism(LaplaceEvent, coverage=laplace.coverage, pure_epsilon=lambda event: 0.0)
    assert entry_for_type(LaplaceEvent).pure_epsilon is laplace.laplace_epsilon
