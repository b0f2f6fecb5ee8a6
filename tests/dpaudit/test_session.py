"""Session: write-ahead order, budget filter, the budget race, bad input, crash safety."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dpaudit import BudgetExceeded, DPAuditError, InvalidParameter, Session, UnsupportedEvent, canonical, from_formula
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.ledger import read_records, verify_chain
from dpaudit.verify import verify_bundle


def _types(session: Session) -> list[str]:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r.type for r in records]


def test_api_example_releases_and_certifies(make_session):
    with make_session(epsilon=1.0, delta=1e-6, name="my-study") as s:
        m = s.laplace(10.0, sensitivity=1.0, epsilon=0.1)
        g = s.gaussian(np.array([1.0, 2.0]), sensitivity=1.0, epsilon=0.3, delta=1e-7)
        i = s.exponential([0.0, 5.0, 1.0], sensitivity=1.0, epsilon=0.2)
    assert isinstance(m, float) and g.shape == (2,) and i in (0, 1, 2)
    assert _types(s) == ["open", "charge", "release", "charge", "release", "charge", "release", "close"]
    cert = json.loads(s.certificate_path.read_text())
    assert 0 < cert["claim"]["epsilon"] <= 1.0
    # pure charges 0.1 + 0.2 plus a Gaussian at (0.3, 1e-7): the composed bound is at most basic composition
    assert cert["claim"]["epsilon"] <= 0.6 + 1e-9
    assert cert["for_release"] is False and "NOT FOR RELEASE" in cert["release_status"]
    assert any(a["id"] == "declared-sensitivity" for a in cert["assumptions"])


def test_charge_record_precedes_noise_and_release(make_session, monkeypatch):
    """The charge record is on disk before the sampler runs; the release record before the value returns."""
    import dpaudit.session as session_module

    s = make_session()
    seen = []
    real = session_module.release_laplace

    def spy(*args, **kwargs):
        seen.append(_types(s)[-1])
        return real(*args, **kwargs)

    monkeypatch.setattr(session_module, "release_laplace", spy)
    s.laplace(3.0, sensitivity=1.0, epsilon=0.1)
    assert seen == ["charge"]
    assert _types(s)[-1] == "release"
    s.close()


def test_budget_exceeded_charges_and_releases_nothing(make_session):
    s = make_session(epsilon=0.5)
    s.laplace(1.0, sensitivity=1.0, epsilon=0.4)
    before = _types(s)
    with pytest.raises(BudgetExceeded, match="nothing was charged"):
        s.laplace(1.0, sensitivity=1.0, epsilon=0.2)
    assert _types(s) == before
    assert s.spent_epsilon() == pytest.approx(0.4)
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)  # what is left can still be spent
    s.close()


@pytest.mark.parametrize("seed", range(5))
def test_budget_race_admits_at_most_one(make_session, seed):
    """Two workers race for the last 0.3 of the budget with a 0.2 charge each: exactly one gets in."""
    s = make_session(epsilon=1.0, seed=seed)
    s.laplace(1.0, sensitivity=1.0, epsilon=0.7)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def worker():
        barrier.wait()
        try:
            s.laplace(1.0, sensitivity=1.0, epsilon=0.2)
            outcomes.append("admitted")
        except BudgetExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["admitted", "refused"]
    assert _types(s).count("charge") == 2
    s.close()


def test_many_threads_never_overspend(make_session):
    s = make_session(epsilon=1.0)
    admitted = []

    def worker():
        try:
            s.laplace(1.0, sensitivity=1.0, epsilon=0.15)
            admitted.append(1)
        except BudgetExceeded:
            pass

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cert = s.close()
    assert len(admitted) == 6  # 6 × 0.15 = 0.9 ≤ 1 < 7 × 0.15
    assert cert["claim"]["epsilon"] <= 1.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": float("nan")}, "NaN"),
    ({"delta": 1.0}, "delta"),
    ({"delta": 0.0}, "delta"),
    ({"neighbouring": "swap"}, "neighbouring"),
])
def test_bad_budget_refused(make_session, kwargs, message):
    with pytest.raises(InvalidParameter, match=message):
        make_session(**kwargs)


def test_bad_release_input_refused_without_charge(make_session):
    s = make_session()
    for call in (
        lambda: s.laplace(1.0, sensitivity=1.0, epsilon=-0.1),
        lambda: s.laplace(1.0, sensitivity=float("nan"), epsilon=0.1),
        lambda: s.gaussian(1.0, sensitivity=1.0, epsilon=0.1, delta=1.5),
        lambda: s.exponential([], sensitivity=1.0, epsilon=0.1),
    ):
        with pytest.raises(InvalidParameter):
            call()
    assert _types(s) == ["open"]
    with pytest.raises(InvalidParameter):  # a NaN true value is charged (the charge precedes the data) but not released
        s.laplace(float("nan"), sensitivity=1.0, epsilon=0.1)
    assert _types(s)[-1] == "charge"
    s.close()


def test_neighbouring_mismatch_refused(make_session):
    s = make_session(neighbouring="replace_one")
    event = PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=0.01, noise_multiplier=1.0, steps=10)
    with pytest.raises(UnsupportedEvent, match="replace_one"):
        s.charge(event, plugin="test", mechanism="dpsgd")
    s.close()


def test_closed_session_refuses_releases(make_session):
    s = make_session()
    first = s.close()
    assert s.close() == first
    with pytest.raises(DPAuditError, match="closed"):
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)


def test_above_threshold_answers_are_ledgered(make_session):
    s = make_session(epsilon=1.0)
    at = s.above_threshold(5.0, sensitivity=1.0, epsilon=0.5, max_queries=10)
    answers = []
    for v in [0.0, 0.0, 100.0]:
        answers.append(at.test(v))
        if at.halted:
            break
    assert answers[-1] is True and at.halted
    records, _ = read_records(s.ledger_path)
    releases = [r for r in records if r.type == "release"]
    assert len(releases) == len(answers)
    assert [r.body["output"]["above"] for r in releases] == answers
    with pytest.raises(DPAuditError):
        at.test(0.0)
    s.close()


def test_exceptions_inside_with_still_certify(make_session):
    with pytest.raises(RuntimeError), make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
        raise RuntimeError("plugin crashed")
    records, _ = read_records(s.ledger_path)
    assert records[-1].type == "close" and records[-1].body["status"] == "FAILED"
    assert json.loads(s.certificate_path.read_text())["claim"]["epsilon"] > 0


CHILD = r"""
import sys
from dpaudit import Session
from dpaudit.mechanisms.randomness import SeededRandom
s = Session(epsilon=1e6, delta=1e-6, rng=SeededRandom(1), mirror=False, store=sys.argv[1])
print(s.ledger_path, flush=True)
i = 0
while True:
    v = s.laplace(float(i), sensitivity=1.0, epsilon=0.5)
    print(repr(v), flush=True)
    i += 1
"""


@pytest.mark.parametrize("delay", [0.4, 0.9, 1.7])
def test_kill_minus_nine_leaves_no_released_value_without_record(tmp_path, delay):
    """SIGKILL a session mid-run: the ledger verifies, and every value the child printed has a release record."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "runs")], stdout=subprocess.PIPE, text=True)
    ledger = Path(proc.stdout.readline().strip())
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    printed = [float(line) for line in proc.stdout.read().splitlines() if line.strip()]
    proc.wait()
    records, problems = read_records(ledger)
    assert all("torn" in p for p in problems), problems
    assert verify_chain(records) == []
    released = [r.body["output"] for r in records if r.type == "release"]
    assert len(printed) >= 1
    assert released[: len(printed)] == printed
    assert all(math.isfinite(v) for v in released)
    checks = {c.name: c for c in verify_bundle(ledger.parent).checks}
    assert checks["ledger-chain"].ok or problems  # only a torn final line (a crash mid-write) may be reported
    assert not checks["certificate-present"].ok


def test_above_threshold_rounds_charge_the_cap_up_front(make_session):
    """A loop capped at T_max rounds is charged T_max·ε before the first round, however early it stops."""
    s = make_session(epsilon=2.0)
    rounds = s.above_threshold_rounds(sensitivity=0.1, epsilon=0.25, max_queries=3, rounds=4, label="loop")
    assert s.spent_epsilon() == pytest.approx(1.0, rel=1e-6)  # 4 × 0.25, pure DP, charged now
    first = rounds.next_round(0.5)
    first.test(0.0)
    cert = s.close()
    assert 0.99 <= cert["claim"]["epsilon"] <= 1.0  # T_max rounds, not the one realised
    records, _ = read_records(s.ledger_path)
    assert [r.type for r in records].count("charge") == 1
    assert [r.body["output"]["round"] for r in records if r.type == "release"] == [0]


def test_above_threshold_rounds_refuse_past_the_cap(make_session):
    s = make_session(epsilon=2.0)
    rounds = s.above_threshold_rounds(sensitivity=1.0, epsilon=0.1, max_queries=1, rounds=2)
    rounds.next_round(0.0)
    rounds.next_round(0.0)
    with pytest.raises(BudgetExceeded, match="rounds"):
        rounds.next_round(0.0)
    s.close()


def _dpsgd(steps: int = 100) -> PoissonSubsampledGaussianEvent:
    return PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=0.01, noise_multiplier=1.0, steps=steps)


def test_repeat_and_select_charges_before_drawing_k_and_commits_to_k(make_session, monkeypatch):
    """The charge record precedes the draw of K; the ledger holds only a hiding commitment to K, which the
    confidential opening (outside the bundle) opens."""
    from dpaudit.events import RepeatAndSelectEvent

    s = make_session(epsilon=10.0, delta=1e-5)
    order = []
    real_charge, real_draw = s.charge, s.rng.randbelow
    monkeypatch.setattr(s, "charge", lambda e, **kw: (order.append("charge"), real_charge(e, **kw))[1])
    monkeypatch.setattr(s.rng, "randbelow", lambda n: (order.append("draw"), real_draw(n))[1])
    charge, k = s.repeat_and_select(_dpsgd(), "poisson", {"mu": 3.0}, plugin="test", label="best of K")
    assert order[0] == "charge" and "draw" in order and isinstance(k, int) and k >= 0
    assert isinstance(charge.event, RepeatAndSelectEvent) and charge.event.mu == 3.0
    assert _types(s) == ["open", "charge", "info"]  # one commitment record, whatever K is
    records, _ = read_records(s.ledger_path)
    commitment = records[-1].body["info"]["repetitions_commitment"]
    opening = json.loads((s.run_dir / "confidential" / f"repetitions-{charge.seq}.json").read_text())
    assert opening["repetitions"] == k
    assert canonical.sha256_hex(canonical.encode(opening)) == commitment
    s.record_release(charge, {"selected": None})
    s.close()
    cert = json.loads(s.certificate_path.read_text())
    assert cert["claim"]["attained_by"] == "rdp"


def test_repeat_and_select_refusals_charge_nothing(make_session):
    s = make_session(epsilon=0.01, delta=1e-5)
    with pytest.raises(BudgetExceeded):
        s.repeat_and_select(_dpsgd(), "geometric", {"gamma": 0.1}, plugin="test")
    with pytest.raises(InvalidParameter, match="exact sampler"):
        s.repeat_and_select(_dpsgd(), "truncated_negative_binomial", {"eta": 0.5, "gamma": 0.1}, plugin="test")
    with pytest.raises(InvalidParameter):
        s.repeat_and_select(_dpsgd(), "geometric", {"gamma": 0.1, "beta": 1.0}, plugin="test")
    assert _types(s) == ["open"]
    s.close()


def test_repeat_and_select_k_follows_its_law(make_session):
    """K from the session is the exact sampler's draw on the session's source (seeded: same K for the same seed)."""
    draws = []
    for _ in range(2):
        s = make_session(epsilon=100.0, delta=1e-5, seed=3)
        draws.append([s.repeat_and_select(_dpsgd(1), "geometric", {"gamma": 0.5}, plugin="t")[1] for _ in range(5)])
        s.close()
    assert draws[0] == draws[1] and all(k >= 1 for k in draws[0])


def test_check_affordable_charges_nothing(make_session):
    s = make_session(epsilon=0.8)
    plan = [s.above_threshold_rounds_event(1.0, 0.3, max_queries=2, rounds=2),
            s.above_threshold_rounds_event(1.0, 0.3, max_queries=2, rounds=1)]
    assert s.check_affordable(plan[:1]) == pytest.approx(0.6, rel=1e-6)
    with pytest.raises(BudgetExceeded):
        s.check_affordable(plan)  # 2 × 0.3 + 0.3 > 0.8
    assert _types(s) == ["open"] and s.spent_epsilon() == 0.0
    s.close()


def test_exponential_scores_are_not_rounded_to_floats(make_session, monkeypatch):
    """Integer scores beyond 2^53 reach the exact sampler unrounded (rounding could double the sensitivity)."""
    import dpaudit.session as session_module

    seen = []
    monkeypatch.setattr(session_module, "sample_exponential", lambda scores, *a: seen.append(scores) or 0)
    s = make_session()
    big = 2**60 + 1
    s.exponential([big, big + 1], sensitivity=1.0, epsilon=0.1)
    assert seen == [[big, big + 1]]
    s.close()
