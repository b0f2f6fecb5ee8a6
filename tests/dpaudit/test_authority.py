"""The budget authority in one process: idempotent reservations, releases recorded first, no overrun under load, no
float drift at the cap, and a killed authority resumed from its ledger.

Each guarantee is attacked: retries with repeated keys from 8 concurrent workers (no duplicate record), many small
charges against one cap (no overrun, also in exact arithmetic), a reservation never released (still charged), and
an authority process SIGKILLed mid-stream (the resumed run closes with a certificate that verifies and composes
every charge). The review's attacks (issue 15) follow at the end: a closed run with records after its close, another
accountant version, 8 threads racing on each of 30 shared keys (and the broken variant without the session's key
check, which the race catches), one key through two authorities and a direct charge, bad input, a reused seed. The
cut-ledger attacks are in tests/dpaudit/test_head.py.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpaudit import Session
from dpaudit.accounting import basic, get_accountant
from dpaudit.authority import BudgetAuthority, Grant
from dpaudit.budget import Admission, BudgetFilter
from dpaudit.errors import BudgetExceeded, DPAuditError, InvalidParameter, UncoveredRelease
from dpaudit.events import compose
from dpaudit.ledger import read_records
from dpaudit.mechanisms.laplace import laplace_event
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.records import CHARGE, INFO, RELEASE, ChargeBody, InfoBody, ReleaseBody
from dpaudit.resume import RESUME_INFO
from dpaudit.sensitivity import Neighbouring, Norm, declared
from dpaudit.signing import load_or_create_key
from dpaudit.store import LEDGER, REPORT_MD
from dpaudit.verify import verify_bundle
from tests.dpaudit._authority_load import spend_requests

SIZES = (0.001, 0.002, 0.005, 0.01)  # the mixed spend requests of the load tests


def _records(session: Session):
    records, problems = read_records(session.ledger_path)
    assert not problems
    return records


def _charges(session: Session) -> list[tuple[int, ChargeBody]]:
    return [(r.seq, ChargeBody.from_dict(r.body)) for r in _records(session) if r.type == CHARGE]


def _releases(session: Session) -> list[ReleaseBody]:
    return [ReleaseBody.from_dict(r.body) for r in _records(session) if r.type == RELEASE]


def _assert_within_budget(session: Session, certificate) -> None:
    """No overrun: the certificate, every admission and the exact sum of the charged ε are within the budget."""
    budget, _ = session.budget
    charges = _charges(session)
    assert certificate["claim"]["epsilon"] <= budget
    assert all(body.epsilon_spent <= budget for _, body in charges)
    events = [body.privacy_event() for _, body in charges]
    assert sum((Fraction(e.epsilon) for e in events), Fraction(0)) <= budget  # pure-ε charges: exact arithmetic


def _assert_verifies(session: Session) -> None:
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def _laplace(session: Session, epsilon: float):
    return session.laplace_event(1.0, epsilon, label="spend")


# --- the protocol ---------------------------------------------------------------------------------------------------


def test_reserve_is_idempotent_by_key_and_the_key_is_recorded(make_session):
    authority = BudgetAuthority(make_session(epsilon=1.0))
    session = authority.session
    event = _laplace(session, 0.1)
    grant = authority.reserve(event, key="trial-0/step-0", plugin="worker", mechanism="laplace")
    again = authority.reserve(_laplace(session, 0.1), key="trial-0/step-0", plugin="worker", mechanism="laplace")
    assert again == grant == Grant("trial-0/step-0", grant.seq, session.run_id)
    assert [body.key for _, body in _charges(session)] == ["trial-0/step-0"]  # the retry wrote nothing
    with pytest.raises(InvalidParameter, match="another event"):
        authority.reserve(_laplace(session, 0.2), key="trial-0/step-0", plugin="worker", mechanism="laplace")
    with pytest.raises(InvalidParameter, match="another event"):
        authority.reserve(event, key="trial-0/step-0", plugin="other", mechanism="laplace")
    for bad in ("", 7, "k" * 201):
        with pytest.raises(InvalidParameter, match="idempotency key"):
            authority.reserve(event, key=bad, plugin="worker", mechanism="laplace")
    assert len(_charges(session)) == 1


def test_release_is_recorded_before_it_returns_and_a_retry_writes_nothing(make_session):
    authority = BudgetAuthority(make_session(epsilon=1.0))
    session = authority.session
    grant = authority.reserve(_laplace(session, 0.1), key="a", plugin="worker", mechanism="laplace")
    assert authority.release(grant, 2.5) == 2.5
    assert [(r.charge_seq, r.output) for r in _releases(session)] == [(grant.seq, 2.5)]  # on disk when it returned
    assert authority.release(grant, 2.5) == 2.5  # a retried release (its reply was lost): nothing written
    assert authority.release(grant, 3.5) == 2.5  # a re-run's fresh draw: the first output, nothing written
    assert len(_releases(session)) == 1
    with pytest.raises(InvalidParameter, match="not made by this authority"):
        authority.release(Grant("a", grant.seq, "another-run"), 2.5)
    with pytest.raises(InvalidParameter, match="not made by this authority"):
        authority.release(Grant("never-reserved", grant.seq, session.run_id), 2.5)
    other = authority.reserve(_laplace(session, 0.1), key="b", plugin="worker", mechanism="laplace")
    with pytest.raises(UncoveredRelease):  # the charge covers one number, not three
        authority.release(other, [1.0, 2.0, 3.0])
    assert len(_releases(session)) == 1
    assert authority.unreleased() == (other,)


def test_a_grant_never_released_stays_charged_and_listed(make_session):
    authority = BudgetAuthority(make_session(epsilon=1.0, accountant="basic"))
    session = authority.session
    done = authority.reserve(_laplace(session, 0.25), key="done", plugin="worker", mechanism="laplace")
    authority.release(done, 1.0)
    lost = authority.reserve(_laplace(session, 0.5), key="worker-died", plugin="worker", mechanism="laplace")
    assert authority.unreleased() == (lost,)
    certificate = authority.close()
    assert certificate["claim"]["epsilon"] >= 0.75  # the unreleased 0.5 is in the composition, never refunded
    report = (session.run_dir / REPORT_MD).read_text()
    assert f"Reserved, never released: 1 charge (seq {lost.seq}), each counted in the guarantee" in report
    _assert_verifies(session)


def test_a_refused_reservation_writes_nothing_and_a_retry_is_decided_afresh(make_session):
    authority = BudgetAuthority(make_session(epsilon=0.3, accountant="basic"))
    session = authority.session
    authority.reserve(_laplace(session, 0.2), key="first", plugin="worker", mechanism="laplace")
    with pytest.raises(BudgetExceeded):
        authority.reserve(_laplace(session, 0.2), key="second", plugin="worker", mechanism="laplace")
    grant = authority.reserve(_laplace(session, 0.0625), key="second", plugin="worker", mechanism="laplace")
    assert [body.key for _, body in _charges(session)] == ["first", "second"] and grant.seq == 2


# --- exact arithmetic at the cap ------------------------------------------------------------------------------------


def _drift_filter(n: int) -> tuple[BudgetFilter, object]:
    """A basic-composition filter with n − 1 charges of ε = 1e-4 committed against a budget of 1.0."""
    small = laplace_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "test"), 1e-4)
    assert small.epsilon == 1e-4
    budget = BudgetFilter(1.0, 1e-6, get_accountant("basic"))
    for _ in range(n - 1):
        budget.commit(small, Admission(0.0, "basic"))
    return budget, small


def test_ten_thousand_small_charges_cannot_drift_past_the_cap():
    """10⁴ charges of 1e-4 against 1.0: the float sum is exactly 1.0, the true sum 1 + 4.8·10⁻¹⁷, so the last charge
    must be refused; the 9 999th fits (its exact sum is below 1)."""
    budget, small = _drift_filter(10**4)
    assert Fraction(small.epsilon) * 10**4 > 1 and math.fsum([small.epsilon] * 10**4) == 1.0
    with pytest.raises(BudgetExceeded):
        budget.admit(small)
    shorter, _ = _drift_filter(10**4 - 1)
    assert shorter.admit(small).epsilon <= 1.0


def test_the_drift_test_catches_nearest_rounded_sums(monkeypatch):
    """The deliberately broken variant (the float sums the accountant used before) admits the 10⁴th charge."""

    def nearest(counts):
        charges = [(basic.approximate_dp_charge(s), k) for s, k in counts.items()]
        return math.fsum(c[0] * k for c, k in charges), math.fsum(c[1] * k for c, k in charges)

    monkeypatch.setattr(basic, "charge_sums", nearest)
    budget, small = _drift_filter(10**4)
    assert budget.admit(small).epsilon == 1.0  # admitted past the exact cap: what the real test refuses


# --- load: 8 workers × 1,000 random spend requests against one cap --------------------------------------------------


def _spend(authority: BudgetAuthority, worker: int, requests: int, events, stats: Counter, lock) -> None:
    """One worker: random sizes; 30% of requests retry an earlier key (a lost reply) with the same event."""
    rng = random.Random(worker)
    values: dict[str, float] = {}  # a retry releases the value it first released
    for key, event in spend_requests(rng, worker, requests, events):
        try:
            grant = authority.reserve(event, key=key, plugin="worker", mechanism="laplace")
            authority.release(grant, values.setdefault(key, float(rng.randint(0, 9))))
            outcome = "granted"
        except BudgetExceeded:
            outcome = "refused"
        with lock:
            stats[outcome] += 1


def test_eight_threads_a_thousand_requests_each_no_overrun_no_duplicate(make_session):
    authority = BudgetAuthority(make_session(epsilon=0.5, accountant="basic"))
    session = authority.session
    events = [_laplace(session, e) for e in SIZES]
    stats: Counter = Counter()
    lock = threading.Lock()
    workers = [threading.Thread(target=_spend, args=(authority, w, 1000, events, stats, lock)) for w in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sum(stats.values()) == 8000 and stats["granted"] > 100 and stats["refused"] > 1000, stats
    certificate = authority.close()
    _assert_within_budget(session, certificate)
    keys = Counter(body.key for _, body in _charges(session))
    assert keys and max(keys.values()) == 1  # zero duplicate charge records for a key
    released = Counter(r.charge_seq for r in _releases(session))
    assert max(released.values()) == 1 and set(released) == {seq for seq, _ in _charges(session)}
    assert authority.unreleased() == ()
    _assert_verifies(session)


# --- restart ---------------------------------------------------------------------------------------------------------


_AUTHORITY_CHILD = textwrap.dedent("""
    import random, sys, threading
    from dpaudit import Session
    from dpaudit.authority import BudgetAuthority
    from dpaudit.errors import BudgetExceeded
    from dpaudit.mechanisms.randomness import SeededRandom

    authority = BudgetAuthority(Session(epsilon=1.0, delta=1e-6, name="killed", mirror=False, accountant="basic",
                                        rng=SeededRandom(0)))
    print(authority.run_id, flush=True)
    events = [authority.session.laplace_event(1.0, e) for e in (0.001, 0.002, 0.005, 0.01)]
    lock = threading.Lock()

    def spend(worker):
        rng = random.Random(worker)
        for i in range(10**6):
            key = f"w{worker}/r{i}"
            try:
                grant = authority.reserve(rng.choice(events), key=key, plugin="worker", mechanism="laplace")
                if i % 5:  # every fifth grant is never released, as if its worker were still drawing noise
                    authority.release(grant, 1.0)
            except BudgetExceeded:
                return
            with lock:
                print(key, flush=True)

    threads = [threading.Thread(target=spend, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
""")


def test_authority_killed_mid_stream_resumes_from_its_ledger(tmp_path):
    store = Path(os.environ["DPAUDIT_HOME"])
    child = subprocess.Popen([sys.executable, "-c", _AUTHORITY_CHILD], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONHASHSEED": "0"})
    try:
        run_id = child.stdout.readline().strip()
        granted = [child.stdout.readline().strip() for _ in range(40)]
        assert all(granted), "the authority process stopped before it was killed"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    ledger = store / run_id / LEDGER
    before = [r for r in read_records(ledger)[0]]
    assert before[-1].type != "close"

    authority = BudgetAuthority.resume(run_id, rng=SeededRandom(1))
    session = authority.session
    records = _records(session)
    resumed = InfoBody.from_dict(records[-1].body).info[RESUME_INFO]
    assert records[-1].type == INFO and resumed["charges"] == len(_charges(session))
    released = {r.charge_seq for r in _releases(session)}
    assert resumed["unreleased_charges"] == [seq for seq, _ in _charges(session) if seq not in released]
    assert [g.seq for g in authority.unreleased()] == resumed["unreleased_charges"]

    # a worker that retries its reserve after the restart gets its grant back, and nothing is written
    seq, body = _charges(session)[0]
    count = len(records)
    assert authority.reserve(body.privacy_event(), key=body.key, plugin="worker", mechanism="laplace").seq == seq
    assert len(_records(session)) == count
    # a worker still holding an unreleased grant releases it once
    if authority.unreleased():
        waiting = authority.unreleased()[0]
        authority.release(waiting, 4.0)
        assert waiting not in authority.unreleased()

    # the run continues to its cap, then closes with a certificate that verifies
    events = [_laplace(session, e) for e in SIZES]
    for i in range(10**4):
        try:
            grant = authority.reserve(events[i % len(events)], key=f"after/{i}", plugin="worker", mechanism="laplace")
        except BudgetExceeded:
            break
        authority.release(grant, 0.0)
    certificate = authority.close()
    _assert_within_budget(session, certificate)
    _assert_verifies(session)
    # the certificate composes exactly the charges an uninterrupted run would: every charge record, none twice
    charged = [body.privacy_event() for _, body in _charges(session)]
    assert certificate["claim"]["epsilon"] == get_accountant("basic").epsilon(compose(charged), 1e-6)
    assert max(Counter(body.key for _, body in _charges(session)).values()) == 1


def test_resume_refuses_closed_runs_other_keys_and_other_randomness(make_session, tmp_path):
    open_run = make_session(epsilon=1.0)
    open_run.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    other = tmp_path / "other.key"
    load_or_create_key(other)
    with pytest.raises(InvalidParameter, match="same kind of source"):
        Session.resume(open_run.run_id)  # opened seeded, resumed with the secure default
    with pytest.raises(InvalidParameter, match="fingerprint"):
        Session.resume(open_run.run_id, rng=SeededRandom(1), signing_key=other)
    with pytest.raises(InvalidParameter, match="no run"):
        Session.resume("0" * 32, rng=SeededRandom(1))
    open_run.close()
    with pytest.raises(InvalidParameter, match="closed"):
        Session.resume(open_run.run_id, rng=SeededRandom(1))
    assert [r.type for r in _records(open_run)].count(INFO) == 0  # nothing was written by the refusals


def test_a_resumed_session_has_the_state_of_a_fresh_one(make_session):
    fresh = make_session(epsilon=1.0)
    fresh.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    resumed = Session.resume(fresh.run_id, rng=SeededRandom(1))
    assert set(vars(resumed)) == set(vars(fresh))  # a field added to __init__ must be rebuilt by resume too
    assert resumed.budget == fresh.budget and resumed.spent_epsilon() == fresh.spent_epsilon()
    assert resumed.neighbouring is fresh.neighbouring and resumed.protected == fresh.protected


def test_charges_made_before_a_restart_release_only_what_is_left(make_session):
    session = make_session(epsilon=5.0)
    released = session.charge(_laplace(session, 0.1), plugin="w", mechanism="laplace")
    session.record_release(released, 1.0)
    waiting = session.charge(_laplace(session, 0.1), plugin="w", mechanism="laplace")
    rounds = session.above_threshold_rounds(1.0, 0.1, max_queries=3, rounds=2)
    rounds.next_round(0.5)  # a round started: its noisy threshold dies with the process
    resumed = Session.resume(session.run_id, rng=SeededRandom(1))
    with pytest.raises(UncoveredRelease):
        resumed.record_release(resumed.charge_at(released.seq), 1.0)  # released before the restart
    resumed.record_release(resumed.charge_at(waiting.seq), 2.0)  # never released: once
    with pytest.raises(UncoveredRelease):
        resumed.record_release(resumed.charge_at(waiting.seq), 2.0)
    at_charge = resumed.charge_at(rounds.charge.seq)
    with pytest.raises(UncoveredRelease):  # no AboveThreshold round of it runs again, started or not
        resumed._start_round(at_charge, 0.5)
    with pytest.raises(InvalidParameter, match="no charge"):
        resumed.charge_at(999)
    resumed.close()
    _assert_verifies(resumed)


def test_resume_info_record_is_public_and_verify_accepts_it(make_session):
    session = make_session(epsilon=1.0)
    session.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    resumed = Session.resume(session.run_id, rng=SeededRandom(1))
    info = InfoBody.from_dict(_records(resumed)[-1].body).info[RESUME_INFO]
    assert info["after_records"] == 3 and info["charges"] == 1 and info["unreleased_charges"] == []
    json.dumps(info)
    resumed.close()
    _assert_verifies(resumed)


def test_the_session_refuses_work_after_close_through_the_authority(make_session):
    authority = BudgetAuthority(make_session(epsilon=1.0))
    authority.close()
    with pytest.raises(DPAuditError, match="closed"):
        authority.reserve(_laplace(authority.session, 0.1), key="late", plugin="w", mechanism="laplace")


def test_the_adaptive_filter_admits_on_an_upper_bound_of_its_running_sums():
    """The Rényi filter's running sums are float sums of nonnegative terms: 10⁴ additions of 1e-4 give
    0.99999999999990..., below the exact sum of the charged floats (above 1); the filter admits on a bound above it."""
    from dpaudit.budget import AdaptiveBudgetFilter

    running = 0.0
    for _ in range(10**4):
        running += 1e-4
    assert running < 1.0 < Fraction(1e-4) * 10**4
    from dpaudit.mechanisms.exponential import exponential_event

    small = exponential_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "test"), 1e-4, n_candidates=3)
    budget = AdaptiveBudgetFilter(1.0, 1e-6)
    for _ in range(10**4 - 1):
        budget.commit(small, Admission(0.0, "renyi-filter"))
    _, pure = AdaptiveBudgetFilter._upper(*budget._with(small))
    assert Fraction(pure) >= Fraction(1e-4) * 10**4 and pure > 1.0  # the pure order no longer fits


def test_resume_keeps_the_run_binding(make_session):
    """A run's folder copied under another id is not resumed there (the open record names its own run id)."""
    import shutil

    from dpaudit.errors import LedgerError

    session = make_session(epsilon=1.0)
    session.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    copy = session.run_dir.parent / ("f" * 32)
    shutil.copytree(session.run_dir, copy)
    with pytest.raises(LedgerError, match="copied elsewhere"):
        Session.resume(copy.name, rng=SeededRandom(1))


# --- defects found in review (issue 15): each test fails on the code before its fix -----------------------------------


def test_a_run_with_any_close_record_is_not_resumed(make_session):
    """Records appended after a close (a replayed or edited ledger) do not reopen the run."""
    from dpaudit.head import write_head
    from dpaudit.ledger import Ledger

    session = make_session(epsilon=1.0)
    session.laplace(1.0, sensitivity=1.0, epsilon=0.5)
    session.close()
    ledger = Ledger.open(session.ledger_path)
    record = ledger.append(INFO, {"plugin": "session", "info": {"note": "appended after the close"}})
    ledger.close()
    write_head(session.run_dir, session.run_id, record, session._key)
    with pytest.raises(InvalidParameter, match="is closed"):
        BudgetAuthority.resume(session.run_id, rng=SeededRandom(1))


def _rewrite_open(session: Session, change) -> None:
    """Rewrite the run's ledger with its open body changed by ``change`` (and a checkpoint signed with its key), as
    a run written by another dpaudit version would be."""
    from dpaudit.head import write_head
    from dpaudit.ledger import Ledger

    records = _records(session)
    session.ledger_path.unlink()
    ledger = Ledger.create(session.ledger_path)
    for record in records:
        last = ledger.append(record.type, change(dict(record.body)) if record.type == "open" else record.body)
    ledger.close()
    write_head(session.run_dir, session.run_id, last, session._key)


def test_resume_refuses_another_accountant_version(make_session, monkeypatch):
    session = make_session(epsilon=2.0, accountant="pld")
    session.laplace(1.0, sensitivity=1.0, epsilon=0.5)
    _rewrite_open(session, lambda body: {**body, "accountant": {"name": "pld", "version": "pld/3 (older)"}})
    with pytest.raises(InvalidParameter, match=f"dpaudit recover {session.run_id}"):
        Session.resume(session.run_id, rng=SeededRandom(1))
    adaptive = make_session(epsilon=2.0, adaptive=True)
    adaptive.laplace(1.0, sensitivity=1.0, epsilon=0.5)
    Session.resume(adaptive.run_id, rng=SeededRandom(1))  # the same filter: resumed
    monkeypatch.setattr("dpaudit.session.FILTER_VERSION", "renyi-filter/next")  # an upgraded filter
    with pytest.raises(InvalidParameter, match="dpaudit recover"):
        Session.resume(adaptive.run_id, rng=SeededRandom(2))


def _reserve_shared_keys(authority: BudgetAuthority, threads: int = 8, keys: int = 30) -> None:
    """``threads`` workers reserve the same ``keys`` keys, released together by a barrier before each key."""
    event = _laplace(authority.session, 0.01)
    barrier = threading.Barrier(threads)

    def worker():
        for j in range(keys):
            barrier.wait()
            authority.reserve(event, key=f"k{j}", plugin="w", mechanism="laplace")

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def test_concurrent_reserves_of_one_key_write_one_charge(make_session):
    authority = BudgetAuthority(make_session(epsilon=10.0, accountant="basic"))
    _reserve_shared_keys(authority)
    assert len(_charges(authority.session)) == 30


def test_the_barrier_test_catches_a_missing_key_check(make_session, monkeypatch):
    """The deliberately broken variant: without the session's key check every worker charges every key."""
    monkeypatch.setattr(Session, "_keyed", lambda self, key, body: None)
    authority = BudgetAuthority(make_session(epsilon=10.0, accountant="basic"))
    _reserve_shared_keys(authority, threads=4, keys=3)
    assert len(_charges(authority.session)) > 3


def test_a_key_is_charged_once_per_session_through_any_door(make_session):
    session = make_session(epsilon=1.0)
    event = _laplace(session, 0.1)
    first, second = BudgetAuthority(session), BudgetAuthority(session)
    grant = first.reserve(event, key="k", plugin="w", mechanism="laplace")
    assert second.reserve(event, key="k", plugin="w", mechanism="laplace") == grant
    assert session.charge(event, plugin="w", mechanism="laplace", key="k").seq == grant.seq
    with pytest.raises(InvalidParameter, match="another event"):
        session.charge(_laplace(session, 0.2), plugin="w", mechanism="laplace", key="k")
    assert len(_charges(session)) == 1
    second.release(grant, 1.0)  # any authority of the session releases a grant of it
    # after a restart the key map is rebuilt: the retry returns the old charge, an old grant still releases
    waiting = first.reserve(event, key="w", plugin="w", mechanism="laplace")
    resumed = BudgetAuthority.resume(session.run_id, rng=SeededRandom(1))
    assert resumed.session.charge(event, plugin="w", mechanism="laplace", key="k").seq == grant.seq
    assert resumed.unreleased() == (waiting,)
    resumed.release(waiting, 2.0)
    assert len(_charges(resumed.session)) == 2 and resumed.unreleased() == ()


def test_bad_input_is_a_one_line_error_and_writes_nothing(make_session):
    authority = BudgetAuthority(make_session(epsilon=1.0))
    session = authority.session
    event = _laplace(session, 0.1)
    for plugin in (object(), None, ""):
        with pytest.raises(InvalidParameter, match="plugin must be"):
            authority.reserve(event, key="a", plugin=plugin, mechanism="laplace")
    with pytest.raises(InvalidParameter, match="mechanism must be"):
        authority.reserve(event, key="a", plugin="w", mechanism=object())
    grant = authority.reserve(event, key="g", plugin="w", mechanism="laplace")
    count = len(_records(session))
    for output in (float("nan"), {1}, object()):
        with pytest.raises(InvalidParameter, match="JSON data"):
            authority.release(grant, output)
    assert len(_records(session)) == count
    authority.close()
    with pytest.raises(DPAuditError, match="closed"):  # a known key is no way around the close
        authority.reserve(event, key="g", plugin="w", mechanism="laplace")


def test_a_seeded_run_is_resumed_only_with_a_new_seed(make_session):
    session = make_session(epsilon=1.0, seed=5)
    session.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    with pytest.raises(InvalidParameter, match="replay noise"):
        Session.resume(session.run_id, rng=SeededRandom(5))  # would draw the released noise again
    resumed = Session.resume(session.run_id, rng=SeededRandom(6))
    assert InfoBody.from_dict(_records(resumed)[-1].body).info[RESUME_INFO]["randomness"]["seed"] == 6
    for used in (5, 6):  # the seed of the open record and of the earlier resume
        with pytest.raises(InvalidParameter, match="replay noise"):
            Session.resume(session.run_id, rng=SeededRandom(used))
    Session.resume(session.run_id, rng=SeededRandom(7))


def test_a_rerun_task_gets_the_first_output_whatever_it_drew_so_its_success_samples_nothing(make_session):
    """Attack (review, stop 27): a task re-run after its worker died redraws the mechanism. When a second release
    succeeded only if it equalled the first, success was a second, uncharged sample: for the exponential mechanism
    at ε = 1 over two candidates, P(success | first output 0) was 0.62 on D and 0.50 on D', doubling the loss of
    the pair. Now every later release answers the first output, so nothing about the redraw leaves the authority."""
    authority = BudgetAuthority(make_session(epsilon=5.0))
    session = authority.session
    event = session.exponential_event(1.0, 1.0, n_candidates=2)
    grant = authority.reserve(event, key="trial-0", plugin="worker", mechanism="exponential")
    assert authority.release(grant, 0) == 0
    answers = {authority.release(authority.reserve(event, key="trial-0", plugin="worker", mechanism="exponential"),
                                 redraw) for redraw in (0, 1, 1, 0)}
    assert answers == {0} and len(_releases(session)) == 1


def test_after_a_resume_a_release_answers_the_recorded_output_a_sidecar_array_read_back(make_session):
    authority = BudgetAuthority(make_session(epsilon=50.0, seed=3))
    session = authority.session
    small = authority.reserve(session.laplace_event(1.0, 1.0, dimension=3), key="small", plugin="w",
                              mechanism="laplace")
    large = authority.reserve(session.laplace_event(1.0, 1.0, dimension=200_000), key="large", plugin="w",
                              mechanism="laplace")
    values = np.arange(200_000, dtype=float)
    authority.release(small, np.array([1.0, 2.0, 3.0]))
    authority.release(large, values)
    values[0] = -1.0  # the caller's array changes after it was handed on
    again = authority.release(large, np.zeros(200_000))  # read back from its sidecar file, not held in memory
    assert np.array_equal(again, np.arange(200_000, dtype=float))
    retried = authority.release(small, [9.0, 9.0, 9.0])
    retried[0] = 99.0  # a caller changing what a retry handed it changes nothing the next retry gets
    assert authority.release(small, [9.0, 9.0, 9.0]).tolist() == [1.0, 2.0, 3.0]
    resumed = BudgetAuthority.resume(session.run_id, rng=SeededRandom(4))
    assert resumed.release(small, [9.0, 9.0, 9.0]) == [1.0, 2.0, 3.0]
    read_back = resumed.release(large, np.zeros(200_000))
    assert isinstance(read_back, np.ndarray) and np.array_equal(read_back, np.arange(200_000, dtype=float))
    assert len(_releases(resumed.session)) == 2
