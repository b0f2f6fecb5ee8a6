"""The signed head checkpoint: a ledger cut at a record boundary (a stale replica, an old backup, a truncated file)
is a shorter hash chain that still verifies; resuming it would give spent budget back. Each attack is a ledger
that verifies on its own: cut, rewritten at the head, without a checkpoint, with a checkpoint forged or signed by
another key. A checkpoint behind the ledger (a crash between the ledger's fsync and the rename) is accepted.
"""

from __future__ import annotations

import json
import shutil

import pytest

from dpaudit import Session
from dpaudit.errors import LedgerError
from dpaudit.head import HEAD, SLOT_BYTES, check_head, write_head
from dpaudit.ledger import Ledger, read_records
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.signing import load_or_create_key


def _spent_run(make_session, releases: int = 4) -> Session:
    session = make_session(epsilon=1.0, accountant="basic")
    for i in range(releases):
        session.laplace(float(i), sensitivity=1.0, epsilon=0.2)
    return session


def _cut(session: Session, records: int) -> bytes:
    """Cut the ledger after its first ``records`` whole lines (a record boundary); returns the bytes before."""
    before = session.ledger_path.read_bytes()
    session.ledger_path.write_bytes(b"".join(before.splitlines(keepends=True)[:records]))
    return before


def test_the_checkpoint_follows_every_append(make_session):
    session = _spent_run(make_session, releases=2)
    last = read_records(session.ledger_path)[0][-1]
    slot = (session.run_dir / HEAD).read_bytes()[(last.seq % 2) * SLOT_BYTES:][:SLOT_BYTES]
    head = json.loads(slot)
    assert (head["seq"], head["hash"], head["run_id"]) == (last.seq, last.hash, session.run_id)
    check_head(session.run_dir, read_records(session.ledger_path)[0], session._key)


def test_a_ledger_cut_at_a_record_boundary_is_not_resumed(make_session):
    session = _spent_run(make_session)  # 0.8 of 1.0 spent
    _cut(session, 5)  # open + two charge/release pairs: 0.4 of it would come back
    cut = session.ledger_path.read_bytes()
    with pytest.raises(LedgerError, match="ledger was cut"):
        Session.resume(session.run_id, rng=SeededRandom(1))
    assert session.ledger_path.read_bytes() == cut  # nothing was written


def test_a_checkpoint_behind_the_ledger_is_a_crash_and_is_resumed(make_session):
    """The ledger is fsynced before the checkpoint is renamed: a crash leaves the checkpoint behind, never ahead."""
    session = make_session(epsilon=1.0, accountant="basic")
    session.laplace(1.0, sensitivity=1.0, epsilon=0.2)
    old = (session.run_dir / HEAD).read_bytes()
    session.laplace(1.0, sensitivity=1.0, epsilon=0.2)
    (session.run_dir / HEAD).write_bytes(old)  # the last rename did not reach the disk
    resumed = Session.resume(session.run_id, rng=SeededRandom(1))
    assert resumed.spent_epsilon() == pytest.approx(0.4)


def test_a_torn_checkpoint_write_falls_back_to_the_other_slot(make_session):
    """A write torn by a crash spoils only the slot being written; the other holds the previous checkpoint."""
    session = _spent_run(make_session, releases=2)
    last = read_records(session.ledger_path)[0][-1]
    data = bytearray((session.run_dir / HEAD).read_bytes())
    data[(last.seq % 2) * SLOT_BYTES + 40:(last.seq % 2 + 1) * SLOT_BYTES] = b"\0" * (SLOT_BYTES - 40)
    (session.run_dir / HEAD).write_bytes(bytes(data))
    Session.resume(session.run_id, rng=SeededRandom(1))


def test_a_cut_ledger_continued_past_its_head_is_not_resumed(make_session):
    """A stale copy that another writer continued: the chain verifies and is as long, but its head is another."""
    session = _spent_run(make_session, releases=2)
    _cut(session, 3)
    ledger = Ledger.open(session.ledger_path)
    for _ in range(2):
        ledger.append("info", {"plugin": "session", "info": {"note": "written by a stale replica"}})
    ledger.close()
    with pytest.raises(LedgerError, match="not the one the signed head checkpoint names"):
        Session.resume(session.run_id, rng=SeededRandom(1))


def test_a_checkpoint_of_another_run_is_refused(make_session):
    session, other = _spent_run(make_session, releases=1), _spent_run(make_session, releases=1)
    shutil.copy(session.run_dir / HEAD, other.run_dir / HEAD)  # signed by the same store key
    with pytest.raises(LedgerError, match="no checkpoint of this run"):
        check_head(other.run_dir, read_records(other.ledger_path)[0], other._key)


def test_a_missing_forged_or_foreign_checkpoint_is_not_resumed(make_session, tmp_path):
    session = _spent_run(make_session, releases=1)
    path = session.run_dir / HEAD
    good = path.read_bytes()
    path.unlink()
    with pytest.raises(LedgerError, match="no head checkpoint"):
        Session.resume(session.run_id, rng=SeededRandom(1))
    forged = [json.loads(good[i:i + SLOT_BYTES]) for i in (0, SLOT_BYTES)]
    for head in forged:
        head["seq"] -= 2  # an attacker moving the head back to match a cut ledger
    path.write_bytes(b"".join(json.dumps(head).encode().ljust(SLOT_BYTES) for head in forged))
    with pytest.raises(LedgerError, match="no checkpoint of this run signed by the run's key"):
        Session.resume(session.run_id, rng=SeededRandom(1))
    records = read_records(session.ledger_path)[0]
    write_head(session.run_dir, session.run_id, records[1], load_or_create_key(tmp_path / "other.key"))
    with pytest.raises(LedgerError, match="no checkpoint of this run signed by the run's key"):
        Session.resume(session.run_id, rng=SeededRandom(1))
    path.write_bytes(good)
    Session.resume(session.run_id, rng=SeededRandom(1))  # the whole ledger with its own checkpoint
