"""A signed head that cannot be written after a record is durable (a full disk, no file descriptor left) must leave
the session's state with the ledger: the record counted, never written twice, never followed by a second output
under one charge (reviewer, stop 27: the state was updated after the head, so a failed head write let a retried
release through under one charge and a charge go uncounted, and a failed close record left the session open).

Each test fails the head write of one record type once (``dpaudit.session.write_head`` patched) and attacks the
retry a caller would make."""

from __future__ import annotations

import errno

import pytest

import dpaudit.session as session_module
from dpaudit import Session
from dpaudit.authority import BudgetAuthority
from dpaudit.errors import BudgetExceeded, DPAuditError, UncoveredRelease
from dpaudit.ledger import read_records
from dpaudit.verify import verify_bundle


@pytest.fixture
def failing_head(monkeypatch):
    """``fail(record_type)``: the next head write for a record of that type raises EMFILE, once."""
    written = session_module.write_head
    pending: list[str] = []

    def write_head(run_dir, run_id, record, key):
        if pending and pending[0] == record.type:
            pending.pop()
            raise OSError(errno.EMFILE, "Too many open files (simulated)", "head.json")
        return written(run_dir, run_id, record, key)

    monkeypatch.setattr(session_module, "write_head", write_head)
    return pending.append


def _kinds(session):
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r.type for r in records]


def test_a_release_whose_head_failed_is_counted_so_a_retry_is_refused(failing_head):
    session = Session(epsilon=1.0, delta=1e-6, mirror=False, accountant="basic")
    authority = BudgetAuthority(session)
    grant = authority.reserve(session.laplace_event(1.0, 0.6), key="t0", plugin="w", mechanism="laplace")
    failing_head("release")
    with pytest.raises(OSError):
        authority.release(grant, 10.3)
    with pytest.raises(UncoveredRelease, match="one release more than the charge covers"):
        authority.release(grant, 11.7)  # a retry with a fresh noisy output
    session.close()
    assert _kinds(session).count("release") == 1
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid


def test_a_charge_whose_head_failed_is_spent(failing_head):
    session = Session(epsilon=1.0, delta=1e-6, mirror=False, accountant="basic")
    failing_head("charge")
    with pytest.raises(OSError):
        session.charge(session.laplace_event(1.0, 0.6), plugin="w", mechanism="laplace")
    assert session.spent_epsilon() == pytest.approx(0.6)
    with pytest.raises(BudgetExceeded):
        session.charge(session.laplace_event(1.0, 0.6), plugin="w", mechanism="laplace")  # 1.2 > 1
    certificate = session.close()
    assert _kinds(session).count("charge") == 1
    assert certificate["claim"]["epsilon"] >= 0.6
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid


def test_a_close_whose_head_failed_closes_and_a_second_close_finishes_once(failing_head):
    session = Session(epsilon=1.0, delta=1e-6, mirror=False, accountant="basic")
    failing_head("close")
    with pytest.raises(OSError):
        session.close()
    with pytest.raises(DPAuditError, match="session is closed"):
        session.laplace(3.0, sensitivity=1.0, epsilon=0.5)
    session.close()
    assert _kinds(session).count("close") == 1 and "charge" not in _kinds(session)
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid
