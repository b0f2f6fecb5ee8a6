"""Releases whose sensitivity bound holds only with probability 1 − δ_s (Kusner et al. 2015, Theorems 1, 3, 5).

Such a release is charged as an (ε, δ_s)-DP unit: basic, advanced and PLD compose it, RDP refuses it, the
tightest accountant never takes RDP's (invalid) pure-ε bound for it, and verify refuses a recorded failure
probability below the one its formula gives.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.accounting.charges import ApproximateSpec, PureSpec, tally
from dpaudit.accounting.recheck import recheck
from dpaudit.errors import InvalidParameter, UnsupportedEvent
from dpaudit.events import ComposedEvent, ExponentialEvent, LaplaceEvent, PrivacyEvent
from dpaudit.sensitivity import Formula, Neighbouring, Norm, Sensitivity, from_formula, register_formula

from ._events import exponential, laplace

FAILURE = 1e-6


def _probable(event: ExponentialEvent | LaplaceEvent, failure: float = FAILURE):
    sens = dataclasses.replace(event.sensitivity, failure_probability=failure)
    return dataclasses.replace(event, sensitivity=sens)


def test_a_failing_bound_becomes_an_approximate_spec():
    _, counts = tally(ComposedEvent(events=(_probable(exponential(1.0)), _probable(laplace(0.5)), laplace(0.5))))
    specs = list(counts)
    assert specs[0] == ApproximateSpec(1.0, FAILURE)
    assert isinstance(specs[1], ApproximateSpec) and specs[1].epsilon == pytest.approx(0.5)
    assert specs[1].delta == FAILURE
    assert isinstance(specs[2], PureSpec)  # an always-holding bound is unchanged


def test_accountants_charge_epsilon_and_the_failure_probability():
    event = ComposedEvent(events=(_probable(exponential(1.0)), _probable(exponential(1.0))))
    assert get_accountant("basic").epsilon(event, 1e-5) == 2.0
    with pytest.raises(Exception, match="spends delta"):
        get_accountant("basic").epsilon(event, 1.5e-6)  # Σ δ_s = 2e-6 does not fit
    pld = get_accountant("pld").epsilon(event, 1e-5)
    # two (1, 1e-6) randomized-response pairs compose to exactly (2, 1 − (1 − 1e-6)²) (KOV 2015, Thm. 3.3)
    assert 1.99 < pld <= 2.0 + 1e-9
    with pytest.raises(UnsupportedEvent, match="Renyi"):
        get_accountant("rdp").epsilon(event, 1e-5)
    eps, source = get_accountant("tightest").epsilon_with_source(event, 1e-5)
    assert source != "rdp" and eps == pytest.approx(pld)


def test_tightest_would_be_wrong_to_use_the_pure_bound():
    """Broken variant: drop δ_s and the unit is pure 2-DP at δ = 0; with it, δ = 0 is unreachable."""
    event = ComposedEvent(events=(_probable(exponential(1.0)), _probable(exponential(1.0))))
    assert get_accountant("tightest").epsilon(ComposedEvent(events=(exponential(1.0), exponential(1.0))), 0.0) == 2.0
    with pytest.raises(Exception, match="no accountant can bound|spends delta|delta"):
        get_accountant("tightest").epsilon(event, 0.0)


def test_recheck_of_a_pld_claim():
    event = ComposedEvent(events=(_probable(exponential(1.0)), _probable(laplace(1.0))))
    eps, source = get_accountant("tightest").epsilon_with_source(event, 1e-5)
    assert recheck("tightest", event, 1e-5, eps).ok
    assert not recheck("tightest", event, 1e-5, eps * 0.99).ok


def test_round_trip_and_bad_probabilities():
    event = _probable(exponential(1.0))
    assert PrivacyEvent.from_dict(event.to_dict()) == event
    assert "failure_probability" not in exponential(1.0).sensitivity.to_dict()  # earlier ledgers keep their form
    for bad in (-1e-3, 1.0, math.nan):
        with pytest.raises(InvalidParameter):
            Sensitivity(value=1.0, norm=Norm.ABS, formula="declared", failure_probability=bad)


def test_formula_failure_probability_is_recomputed():
    formula = register_formula(Formula("test_high_probability_bound", "test bound", "test", Norm.ABS,
                                       lambda inputs, nb: 2.0 * inputs["scale"],
                                       failure_probability=lambda inputs: inputs["delta"]))
    sens = from_formula(formula.id, Neighbouring.ADD_REMOVE, scale=1.5, delta=1e-4)
    assert sens.value == 3.0 and sens.failure_probability == 1e-4
    assert sens.recompute_failure_probability() == 1e-4
    assert from_formula("count", "add_remove").recompute_failure_probability() == 0.0
