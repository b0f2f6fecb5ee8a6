"""The certificate's assumption list (:func:`dpaudit.certificate.collect_assumptions`)."""

from __future__ import annotations

from dpaudit.certificate import FIXED_PARAMETERS, collect_assumptions
from dpaudit.events import Neighbouring, compose
from dpaudit.mechanisms.laplace import laplace_event
from dpaudit.sensitivity import Norm, declared, from_formula


def test_each_assumption_lists_each_charge_relying_on_it_once_in_ledger_order():
    """A charge whose two leaves rest on one assumption is listed once for it; charges are listed in order; an
    assumption of another statement is its own entry. (The list is built by appending a charge's seq unless it is
    the last one listed: each charge is met once, so a repeat can only come from the same charge's leaves.)"""
    bounded, other = declared(1.0, Norm.L1, "bounded counts"), declared(2.0, Norm.L1, "clipped sums")
    one = laplace_event(Neighbouring.ADD_REMOVE, bounded, 1.0)
    charges = [(1, compose([one, one])), (3, one),
               (5, laplace_event(Neighbouring.ADD_REMOVE, other, 1.0)), (7, compose([one, one, one]))]
    listed = {entry["statement"]: entry["charges"] for entry in collect_assumptions(charges)}
    assert listed[FIXED_PARAMETERS.statement] == [1, 3, 5, 7]
    assert listed[bounded.assumptions[0].statement] == [1, 3, 7]
    assert listed[other.assumptions[0].statement] == [5]
    assert len(listed) == 3


def test_a_leaf_carrying_the_base_assumption_does_not_list_its_charge_twice():
    """The base assumption (parameters fixed in advance) already lists every charge; a charge whose sensitivity also
    carries it (a user's ``from_formula(..., assumptions=(FIXED_PARAMETERS,))``) is not listed again, and charges
    given out of ledger order are each listed once (review of d5ef697: 3 charges were certified as 6)."""
    carried = from_formula("count", "add_remove", assumptions=(FIXED_PARAMETERS,))
    one = laplace_event(Neighbouring.ADD_REMOVE, carried, 1.0)
    listed = {entry["id"]: entry["charges"] for entry in collect_assumptions([(5, one), (1, one), (3, one)])}
    assert listed == {FIXED_PARAMETERS.id: [5, 1, 3]}
