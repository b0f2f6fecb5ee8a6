"""``epsilon_claim`` statements are re-derived by ``dpaudit verify`` from the charges they name: an honest claim
passes, a claim below its charges' ε (a forged front point), one naming a sequence number that is not a charge, and a
malformed one fail the ``epsilon-claims`` check; a ledger without claims gets no such check."""

from __future__ import annotations

import pytest

from dpaudit.accounting.registry import get_accountant
from dpaudit.testing.events import laplace_event
from dpaudit.verify import verify_bundle


def _claims_check(make_session, statement):
    """Verify a run whose plugin charged one Laplace count and then stated ``statement(seq, ε)`` about it."""
    with make_session(5.0, 1e-5) as session:
        view = session.for_plugin("claimer", "1")
        event = laplace_event(0.5, neighbouring=view.neighbouring)
        charge = view.charge(event, mechanism="m")
        view.record_release(charge, 1.0)
        epsilon = get_accountant("basic").epsilon(event, 1e-5)
        if statement is not None:
            view.record_info({"point": statement(charge.seq, epsilon)})
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    return [c for c in report.checks if c.name == "epsilon-claims"], report


def _claim(epsilon, models, **overrides):
    return {"epsilon": epsilon, "epsilon_claim": {"models": models, "accountant": "basic",
                                                  "version": get_accountant("basic").version(), "delta": 1e-5,
                                                  **overrides}}


def test_an_honest_claim_passes(make_session):
    (check,), report = _claims_check(make_session, lambda seq, eps: _claim(eps, [[seq]]))
    assert check.ok and report.valid, report.reasons


@pytest.mark.parametrize(("statement", "match"), [
    (lambda seq, eps: _claim(eps / 100, [[seq]]), "recorded epsilon"),  # the forged front point
    (lambda seq, eps: _claim(eps * (1 - 1e-6), [[seq]]), "recorded epsilon"),
    (lambda seq, eps: _claim(eps, [[seq + 100]]), "not charges"),
    (lambda seq, eps: _claim(eps, []), "not charges"),
    (lambda seq, eps: _claim(eps, [[seq]], accountant="nope"), "not recomputable"),
    (lambda seq, eps: {"epsilon": eps, "epsilon_claim": {"models": [[seq]]}}, "malformed"),
])
def test_a_claim_below_its_charges_or_about_no_charge_fails(make_session, statement, match):
    (check,), report = _claims_check(make_session, statement)
    assert not check.ok and match in check.detail and not report.valid


def test_a_ledger_without_claims_has_no_check(make_session):
    checks, report = _claims_check(make_session, None)
    assert checks == [] and report.valid, report.reasons
