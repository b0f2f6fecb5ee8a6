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
    import dpaudit.mechanisms.laplace as laplace_module

    s = make_session()
    seen = []
    real = laplace_module.release_laplace

    def spy(*args, **kwargs):
        seen.append(_types(s)[-1])
        return real(*args, **kwargs)

    monkeypatch.setattr(laplace_module, "release_laplace", spy)
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
    # a NaN true value is private: imputed (NaN -> 0) and released, never refused (tests/dpaudit/test_inputs.py)
    assert math.isfinite(s.laplace(float("nan"), sensitivity=1.0, epsilon=0.1))
    assert _types(s)[-2:] == ["charge", "release"]
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
    import dpaudit.mechanisms.exponential as exponential_module

    seen = []
    monkeypatch.setattr(exponential_module, "sample_exponential", lambda scores, *a: seen.append(scores) or 0)
    s = make_session()
    big = 2**60 + 1
    s.exponential([big, big + 1], sensitivity=1.0, epsilon=0.1)
    assert seen == [[big, big + 1]]
    s.close()


def test_monotone_exponential_lists_its_assumption_and_an_old_certificate_without_it_fails(make_session,
                                                                                        monkeypatch):
    """``monotone=True`` halves the noise on the caller's word: the certificate lists it as a conditional assumption
    and verify checks it is there. Attack (the behaviour before the fix, replayed by removing the derived
    assumption while the session certifies): the certificate omits it, and verify refuses with the id."""
    from dpaudit.events import ExponentialEvent, LeafEvent

    with make_session() as s:
        s.exponential([0.0, 1.0, 2.0], sensitivity=1.0, epsilon=0.2, monotone=True)
    cert = json.loads(s.certificate_path.read_text())
    listed = {a["id"]: a for a in cert["assumptions"]}
    assert listed["exponential-monotone-scores"]["conditional"] is True
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid

    with monkeypatch.context() as m:
        m.setattr(ExponentialEvent, "all_assumptions", LeafEvent.all_assumptions)
        with make_session() as old:
            old.exponential([0.0, 1.0, 2.0], sensitivity=1.0, epsilon=0.2, monotone=True)
    assert "exponential-monotone-scores" not in {a["id"] for a in json.loads(old.certificate_path.read_text())[
        "assumptions"]}
    report = verify_bundle(old.run_dir, allow_not_for_release=True)
    assert not report.valid
    assert any("exponential-monotone-scores" in r for r in report.reasons), report.reasons


class _Clock:
    """The ledger's wall clock, advanced by hand: one second per record, ``work`` seconds per repetition."""

    def __init__(self) -> None:
        self.now = 1.7e9

    def time(self) -> float:
        self.now += 1.0
        return self.now

    def work(self, seconds: float) -> None:
        self.now += seconds


def test_repeat_and_select_record_times_do_not_reveal_k(make_session, monkeypatch):
    """Two runs with K = 1 and K = 9 repetitions of 1000 s each: from the repeat-and-select charge on, every record
    (commitment, release, later charges, close) carries the charge's time, so the ledgers' times and the
    certificate's closed_at are identical. Without the frozen clock the release would come ~1000·K s after the
    charge. Deterministic (hand clock, fixed K), no wall-clock limit."""
    import dpaudit.ledger as ledger_module
    import dpaudit.session as session_module

    times = {}
    for k in (1, 9):
        clock = _Clock()
        monkeypatch.setattr(ledger_module, "time", clock)
        monkeypatch.setattr(session_module, "sample_repetitions", lambda *a, k=k: k)
        s = make_session(epsilon=20.0, delta=1e-5)
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
        charge, drawn = s.repeat_and_select(_dpsgd(), "geometric", {"gamma": 0.5}, plugin="test")
        for _ in range(drawn):
            clock.work(1000.0)
        s.record_release(charge, {"selected": 0})
        s.laplace(2.0, sensitivity=1.0, epsilon=0.1)
        cert = s.close()
        records, _ = read_records(s.ledger_path)
        frozen = records[charge.seq].time
        assert [r.time for r in records[charge.seq:]] == [frozen] * (len(records) - charge.seq)
        assert records[charge.seq - 1].time < frozen  # the clock ran until the charge
        info = records[charge.seq + 1].body["info"]
        assert info["clock_frozen_at"] == frozen and "frozen" in info["clock"]
        assert cert["run"]["closed_at"] == frozen
        assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
        times[k] = [r.time for r in records]
    assert times[1] == times[9]


# --- every release counted against its charge (dpaudit/coverage.py) ------------------------------------------------


def _releases(session: Session) -> list:
    return [r for r in read_records(session.ledger_path)[0] if r.type == "release"]


def test_raising_rounds_buys_no_extra_above_threshold_round(make_session):
    """Attack: one AboveThreshold charge answering 60 rounds by raising the public ``rounds`` counter. The count
    lives in the session, keyed by the charge; the view has no setter."""
    from dpaudit.errors import UncoveredRelease

    s = make_session(epsilon=5.0)
    rounds = s.above_threshold_rounds(sensitivity=1.0, epsilon=0.1, max_queries=1, rounds=1)
    for name in ("rounds", "rounds_started"):
        with pytest.raises(AttributeError):
            setattr(rounds, name, 60 if name == "rounds" else 0)
    answered = []
    for _ in range(60):
        try:
            answered.append(rounds.next_round(0.0).test(100.0))
        except UncoveredRelease:
            break
    assert len(answered) == 1 and rounds.rounds == rounds.rounds_started == 1
    assert len(_releases(s)) == 1
    s.close()
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_no_above_threshold_round_can_be_built_around_a_charge(make_session):
    """Attack: ``AuditedAboveThreshold`` built around the same charge (with a mechanism of the caller's own noise,
    or a round index the session never started), a second view of the rounds, or an answer written by hand: each is
    refused and writes nothing."""
    from dpaudit.errors import UncoveredRelease
    from dpaudit.mechanisms.above_threshold import AboveThreshold
    from dpaudit.mechanisms.randomness import SeededRandom
    from dpaudit.session import AboveThresholdRounds, AuditedAboveThreshold

    s = make_session(epsilon=5.0)
    rounds = s.above_threshold_rounds(sensitivity=1.0, epsilon=0.1, max_queries=3, rounds=1)
    first = rounds.next_round(0.0)
    assert first.test(100.0) is True and first.halted
    before = _types(s)
    own_noise = AboveThreshold(0.0, 1e-9, 1e-9, 0.01, 1000, SeededRandom(1))
    with pytest.raises(InvalidParameter, match="round_index"):
        AuditedAboveThreshold(s, rounds.charge, own_noise)
    with pytest.raises(UncoveredRelease, match="outside the 1 charged"):
        AuditedAboveThreshold(s, rounds.charge, 1).test(100.0)
    with pytest.raises(UncoveredRelease, match="halted"):
        AuditedAboveThreshold(s, rounds.charge, 0).test(100.0)  # a second view of round 0 shares its state
    with pytest.raises(UncoveredRelease, match="rounds are used"):
        AboveThresholdRounds(s, rounds.charge).next_round(0.0)
    with pytest.raises(UncoveredRelease, match="only by the rounds"):
        s.record_release(rounds.charge, {"round": 0, "query": 1, "above": True})
    assert _types(s) == before
    s.close()


def test_an_unstarted_round_answers_nothing(make_session):
    """A round index inside the charged rounds but not started by the session has no noisy threshold: refused."""
    from dpaudit.errors import UncoveredRelease
    from dpaudit.session import AuditedAboveThreshold

    s = make_session(epsilon=5.0)
    rounds = s.above_threshold_rounds(sensitivity=1.0, epsilon=0.1, max_queries=3, rounds=3)
    with pytest.raises(UncoveredRelease, match="not started"):
        AuditedAboveThreshold(s, rounds.charge, 1).test(0.0)
    assert _releases(s) == []
    s.close()


def test_fifty_releases_on_one_laplace_charge_are_refused(make_session):
    """Attack: one Laplace charge carrying 50 ``record_release`` outputs. The first is covered, the other 49 are
    refused before anything is written, and the budget is unchanged."""
    from dpaudit.errors import UncoveredRelease

    s = make_session(epsilon=1.0)
    charge = s.charge(s.laplace_event(1.0, 0.1), plugin="test", mechanism="laplace")
    spent = s.spent_epsilon()
    s.record_release(charge, 3.0)
    for _ in range(49):
        with pytest.raises(UncoveredRelease, match=f"charge {charge.seq} .*one release more"):
            s.record_release(charge, 3.0)
    assert len(_releases(s)) == 1 and s.spent_epsilon() == spent
    assert s.coverage(charge).outputs == 1
    s.close()


@pytest.mark.parametrize("output", [[1.0, 2.0], np.zeros((2, 2)), "4.0", {"count": 4.0}, None, True])
def test_a_release_of_another_shape_than_charged_is_refused(make_session, output):
    """A Laplace charge for one coordinate covers one number: a vector, a string or a mapping is not covered."""
    from dpaudit.errors import UncoveredRelease

    s = make_session(epsilon=1.0)
    charge = s.charge(s.laplace_event(1.0, 0.1, dimension=1), plugin="test", mechanism="laplace")
    before = _types(s)
    with pytest.raises(UncoveredRelease, match="charge covers 1 number"):
        s.record_release(charge, output)
    assert _types(s) == before
    s.record_release(charge, np.float64(2.0))  # the covered release still goes through
    s.close()


def test_an_exponential_charge_covers_one_index_in_range(make_session):
    from dpaudit.errors import UncoveredRelease

    s = make_session(epsilon=1.0)
    charge = s.charge(s.exponential_event(1.0, 0.1, n_candidates=3), plugin="test", mechanism="exponential")
    for wrong in (3, -1, 1.5, True):
        with pytest.raises(UncoveredRelease, match="not an index"):
            s.record_release(charge, wrong)
    s.record_release(charge, np.int64(2))
    with pytest.raises(UncoveredRelease, match="one release more"):
        s.record_release(charge, 0)
    s.close()


def test_releases_against_a_composition_of_different_events_are_refused(make_session):
    """A composed charge has no release rule (which output belongs to which part is not recorded)."""
    from dpaudit.errors import UncoveredRelease
    from dpaudit.events import ComposedEvent

    s = make_session(epsilon=1.0)
    both = ComposedEvent(events=(s.laplace_event(1.0, 0.1), s.laplace_event(1.0, 0.1, dimension=2)))
    charge = s.charge(both, plugin="test", mechanism="two laplace")
    with pytest.raises(UncoveredRelease, match="no release rule"):
        s.record_release(charge, 1.0)
    assert _releases(s) == []
    s.close()


def test_a_charge_of_another_session_or_a_forged_charge_releases_nothing(make_session):
    from dpaudit.session import Charge

    s = make_session(epsilon=1.0)
    charge = s.charge(s.laplace_event(1.0, 0.1), plugin="test", mechanism="laplace")
    forged = Charge(charge.seq, charge.event, charge.plugin, charge.mechanism)  # equal, but not the session's
    for call in (lambda: s.record_release(forged, 1.0), lambda: s.claim(forged), lambda: s.coverage(forged)):
        with pytest.raises(InvalidParameter, match="not made by this session"):
            call()
    assert _releases(s) == []
    s.close()


# --- nothing private in the ledger by mistake (dpaudit/public_values.py) --------------------------------------------


def test_a_confidential_key_in_record_info_is_refused_with_the_mirror_off(make_session):
    """Attack: a raw value under a confidential key in ``record_info`` with ``mirror=False`` (where no MLflow check
    runs). The session refuses it before the ledger append: nothing is written."""
    s = make_session(mirror=False)
    before = _types(s)
    with pytest.raises(InvalidParameter, match="confidential key 'info.scores\\[1\\].true_score'"):
        s.record_info("test", {"scores": [{"candidate": 0}, {"true_score": 0.93}]})
    with pytest.raises(InvalidParameter, match="confidential key"):
        s.log_public_metrics({"Unnoised": 0.5})
    assert _types(s) == before
    s.close()
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_a_confidential_key_in_a_release_is_refused_and_the_charge_stays_unused(make_session):
    s = make_session(epsilon=10.0, delta=1e-5)
    charge = s.charge(_dpsgd(), plugin="test", mechanism="dp-sgd")
    with pytest.raises(InvalidParameter, match="confidential key 'output.metrics.true_utility'"):
        s.record_release(charge, {"model_sha256": "ab" * 32, "metrics": {"true_utility": 0.8}})
    assert _releases(s) == [] and s.coverage(charge).outputs == 0
    s.record_release(charge, {"model_sha256": "ab" * 32})
    s.close()


# --- atomic coverage under concurrency ------------------------------------------------------------------------------


def _race(n: int, action) -> list:
    """Run ``action()`` in ``n`` threads released together by a barrier; the outcomes (value or exception)."""
    barrier = threading.Barrier(n)
    outcomes: list = [None] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = action()
        except DPAuditError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@pytest.fixture
def slow_checks(monkeypatch):
    """Widen every check-then-act window: each coverage check in the session sleeps 2 ms after it decides, so a
    check that is not atomic with its act would let several racing threads pass it (verified by running these tests
    with the session's lock replaced by a no-op: each then fails)."""
    import dpaudit.session as session_module

    for name in ("after_claim", "after_release", "after_round_start"):
        check = getattr(session_module, name)

        def slow(*args, check=check):
            decided = check(*args)
            time.sleep(0.002)
            return decided

        monkeypatch.setattr(session_module, name, slow)


def test_racing_threads_start_the_last_above_threshold_round_exactly_once(make_session, slow_checks):
    """8 threads race for the last charged round, 50 times: exactly one starts it every time (no false alarm is
    possible: the session's lock makes the outcome deterministic)."""
    from dpaudit.errors import UncoveredRelease
    from dpaudit.session import AuditedAboveThreshold

    s = make_session(epsilon=1000.0)
    for _ in range(50):
        rounds = s.above_threshold_rounds(sensitivity=1.0, epsilon=0.1, max_queries=1, rounds=2)
        rounds.next_round(0.0)
        outcomes = _race(8, lambda rounds=rounds: rounds.next_round(0.0))
        assert sum(isinstance(o, AuditedAboveThreshold) for o in outcomes) == 1
        assert sum(isinstance(o, UncoveredRelease) for o in outcomes) == 7
        assert rounds.rounds_started == 2
    s.close()


def test_racing_threads_claim_one_envelope_exactly_once(make_session, slow_checks):
    """8 threads claim one DP-SGD envelope charge, 50 times: exactly one run may start every time."""
    from dpaudit.errors import UncoveredRelease

    s = make_session(epsilon=1000.0, delta=1e-5)
    for _ in range(50):
        envelope = s.charge(_dpsgd(10), plugin="test", mechanism="dp-sgd")
        outcomes = _race(8, lambda envelope=envelope: s.claim(envelope))
        assert outcomes.count(None) == 1
        assert sum(isinstance(o, UncoveredRelease) for o in outcomes) == 7
    s.close()


def test_racing_threads_release_one_laplace_charge_exactly_once(make_session, slow_checks):
    from dpaudit.errors import UncoveredRelease

    s = make_session(epsilon=1000.0)
    for _ in range(50):
        charge = s.charge(s.laplace_event(1.0, 0.1), plugin="test", mechanism="laplace")
        outcomes = _race(8, lambda charge=charge: s.record_release(charge, 1.0))
        assert outcomes.count(None) == 1
        assert sum(isinstance(o, UncoveredRelease) for o in outcomes) == 7
    s.close()
    assert len(_releases(s)) == 50


# --- adaptive sessions: the Rényi filter (docs/accounting.md, "Adaptive parameters: the Rényi filter") -------------


def _resign(session: Session, edit) -> None:
    """Edit a closed session's certificate and sign it again with the store's own key (a forger holding the key)."""
    from dpaudit import store as run_store
    from dpaudit.certificate import unsigned
    from dpaudit.signing import load_or_create_key, sign

    cert = json.loads(session.certificate_path.read_text())
    edit(cert)
    cert["signature"] = {"algorithm": "Ed25519", "value": sign(
        load_or_create_key(run_store.default_key_path(session.run_dir.parent)), unsigned(cert))}
    session.certificate_path.write_text(json.dumps(cert))


def _recompose(report) -> str:
    (check,) = [c for c in report.checks if c.name == "recompose"]
    return ("ok: " if check.ok else "FAIL: ") + check.detail


def _adaptive_run(make_session, seed: int = 0) -> Session:
    """Every release's ε, σ or sampling rate is chosen from the noisy outputs before it."""
    with make_session(epsilon=3.0, delta=1e-6, adaptive=True, seed=seed) as s:
        count = s.laplace(1000.0, sensitivity=from_formula("count", "add_remove"), epsilon=0.2)
        eps = 0.3 if count > 1000 else 0.5
        mean = s.gaussian(np.array([1.0, 2.0]), sensitivity=1.0, epsilon=eps, delta=1e-8)
        s.exponential([0.0, 1.0, float(mean[0])], sensitivity=1.0, epsilon=0.1 if mean[1] > 2 else 0.2)
        s.charge(PoissonSubsampledGaussianEvent(
            neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
            sample_rate=0.01, noise_multiplier=1.5 if count > 1000 else 2.0, steps=200), plugin="test",
            mechanism="dp-sgd")
    return s


def test_adaptive_session_with_output_dependent_parameters_certifies_its_budget(make_session):
    s = _adaptive_run(make_session)
    records, _ = read_records(s.ledger_path)
    assert records[0].body["adaptive"]["name"] == "renyi-filter"
    assert records[0].body["accountant"]["name"] == "renyi-filter"
    assert all(r.body["bound_source"] == "renyi-filter" for r in records if r.type == "charge")
    cert = json.loads(s.certificate_path.read_text())
    claim = cert["claim"]
    assert (claim["epsilon"], claim["delta"]) == (3.0, 1e-6)  # the budget, not the realised composition
    assert claim["attained_by"] == "renyi-filter" and claim["filter"]["orders"][0] == 2.0
    assert claim["filter"]["delta_per_order"] == pytest.approx(1e-6 / len(claim["filter"]["orders"]))
    ids = {a["id"]: a for a in cert["assumptions"]}
    assert "privacy-parameters-fixed-in-advance" not in ids
    assert ids["privacy-parameters-adaptive-renyi-filter"]["conditional"] is False
    assert 0 < s.spent_epsilon() <= 3.0
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    assert "every prefix admitted by our RDP and by dp_accounting's" in _recompose(report)


def test_fixed_sessions_keep_their_accountant_and_the_fixed_in_advance_assumption(make_session):
    with make_session(epsilon=3.0) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.2)
    records, _ = read_records(s.ledger_path)
    assert "adaptive" not in records[0].body and records[0].body["accountant"]["name"] == "tightest"
    cert = json.loads(s.certificate_path.read_text())
    assert 0.19 < cert["claim"]["epsilon"] <= 0.2 + 1e-9 and cert["claim"]["attained_by"] != "renyi-filter"
    assert {a["id"]: a["conditional"] for a in cert["assumptions"]}["privacy-parameters-fixed-in-advance"] is True


def test_adaptive_session_refuses_past_its_filter_and_writes_nothing(make_session):
    s = make_session(epsilon=1.0, delta=1e-6, adaptive=True)
    for _ in range(4):
        s.exponential([0.0, 1.0], sensitivity=1.0, epsilon=0.25)
    before = _types(s)
    with pytest.raises(BudgetExceeded, match="Renyi filter"):
        s.exponential([0.0, 1.0], sensitivity=1.0, epsilon=0.01)
    assert _types(s) == before
    s.close()


def test_adaptive_session_refuses_a_release_without_a_renyi_bound(make_session):
    import dataclasses

    s = make_session(epsilon=5.0, delta=1e-5, adaptive=True)
    event = s.laplace_event(1.0, 0.5)
    probable = dataclasses.replace(event, sensitivity=dataclasses.replace(event.sensitivity,
                                                                          failure_probability=1e-7))
    before = _types(s)
    with pytest.raises(UnsupportedEvent, match="Renyi filter of an adaptive session cannot admit it"):
        s.charge(probable, plugin="test", mechanism="laplace")
    assert _types(s) == before
    s.close()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"adaptive": True, "accountant": "pld"}, "accounted by its Renyi filter"),
    ({"filter_orders": (2.0, 4.0)}, "adaptive session only"),
    ({"adaptive": True, "filter_orders": (1.5,)}, "integer orders"),
])
def test_adaptive_options_are_checked_before_anything_is_written(make_session, kwargs, message):
    with pytest.raises(InvalidParameter, match=message):
        make_session(**kwargs)


def test_a_claim_below_the_filter_budget_fails_verify(make_session):
    """Forgery with the signing key: the adaptive certificate's claim lowered to what the filter needed (an odometer
    reading, which the filter does not certify)."""
    s = _adaptive_run(make_session)
    spent = s.spent_epsilon()
    _resign(s, lambda cert: cert["claim"].update(epsilon=spent))
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert not report.valid
    assert "is not the renyi-filter budget" in _recompose(report)


def test_a_fixed_ledger_certified_as_adaptive_fails_verify(make_session):
    """Forgery with the signing key: a fixed-parameter run's certificate rewritten to the filter's form (dropping
    the conditional fixed-in-advance assumption). The ledger's open record decides: no filter there."""
    with make_session(epsilon=3.0, delta=1e-6) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.2)

    def as_adaptive(cert):
        cert["claim"].update(epsilon=3.0, accountant="renyi-filter", attained_by="renyi-filter")
        cert["assumptions"] = [a for a in cert["assumptions"] if a["id"] != "privacy-parameters-fixed-in-advance"]

    _resign(s, as_adaptive)
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert not report.valid
    assert _recompose(report).startswith("FAIL")
    assert any("assumptions-listed" in r and "privacy-parameters-fixed-in-advance" in r for r in report.reasons)


def test_a_session_whose_filter_skipped_the_delta_split_fails_verify(make_session, monkeypatch):
    """A broken session (δ_B not split over the orders: no union bound) admits charges beyond the filter and signs
    its budget; verify, run with the correct code, refuses the claim in both implementations."""
    import dpaudit.accounting.filters as filters

    events = [PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=0.01, noise_multiplier=1.0, steps=300) for _ in range(3)]
    orders = filters.DEFAULT_FILTER_ORDERS
    curves = [filters.charge_rdp(e, orders) for e in events]
    total, total_inf = sum(c[0] for c in curves), sum(c[1] for c in curves)
    correct = filters.filter_epsilon(filters.RenyiFilter(1.0, 1e-6), total, total_inf)
    with monkeypatch.context() as m:
        m.setattr(filters.RenyiFilter, "delta_per_order", property(lambda self: self.delta))
        broken = filters.filter_epsilon(filters.RenyiFilter(1.0, 1e-6), total, total_inf)
        with make_session(epsilon=(broken + correct) / 2, delta=1e-6, adaptive=True) as s:
            for event in events:
                s.charge(event, plugin="test", mechanism="dp-sgd")
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert not report.valid
    detail = _recompose(report)
    assert "exceed the filter" in detail and "ours refuses" in detail and "dp_accounting refuses" in detail


def test_randomized_response_charges_then_releases_one_bit(make_session):
    """The façade is a thin call into dpaudit/mechanisms/randomized_response.py: charge ε, release 0/1, return a bool;
    anything but a bool is refused before anything is charged."""
    s = make_session(epsilon=1.0)
    for wrong in (1, 0.0, "yes", None):
        with pytest.raises(InvalidParameter, match="needs a bool"):
            s.randomized_response(wrong, 0.5)
    assert _types(s) == ["open"] and s.spent_epsilon() == 0.0
    reported = s.randomized_response(np.bool_(True), 0.5, label="smoker")
    assert isinstance(reported, bool)
    records, _ = read_records(s.ledger_path)
    charge, release = records[-2:]
    assert charge.body["event"]["kind"] == "randomized_response" and release.body["output"] == int(reported)
    assert s.spent_epsilon() == pytest.approx(0.5)
    s.close()


def test_an_info_body_too_deep_for_a_record_is_refused_and_the_run_still_verifies(make_session):
    """A plugin's info nested deeper than a record may be (its reports would recurse past Python's limit at close,
    and readers refuse such a line) is refused with nothing written; one at the limit is recorded, reported and
    verified."""
    from dpaudit.errors import LedgerError
    from dpaudit.ledger import MAX_BODY_DEPTH

    def nested(levels: int) -> dict:
        value: dict = {"x": 1}
        for _ in range(levels - 1):
            value = {"k": value}
        return value

    with make_session() as s:
        s.record_info("plugin", nested(MAX_BODY_DEPTH - 1))  # the body wraps it: {"info": ..., "plugin": ...}
        with pytest.raises(LedgerError, match=f"nested deeper than {MAX_BODY_DEPTH} levels"):
            s.record_info("plugin", nested(MAX_BODY_DEPTH))
        with pytest.raises(InvalidParameter, match="nested thousands of levels deep"):
            s.record_info("plugin", nested(5_000))
    records, problems = read_records(s.ledger_path)
    assert problems == [] and sum(r.type == "info" and '"x": 1' in json.dumps(r.body) for r in records) == 1
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
