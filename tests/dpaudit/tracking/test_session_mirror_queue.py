"""The session's side of the mirror: one worker sends records in ledger order, none is left queued, MLflow only
through the worker."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from dpaudit.ledger import GENESIS_PREV, Record
from dpaudit.tracking.session_mirror import SessionMirror


class _SlowMirror:
    """Stands in for :class:`~dpaudit.tracking.MlflowMirror`: records what it is sent, slowly, and by which thread."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bool]] = []
        self.threads: set[str] = set()
        self.ended: list[str] = []

    def find_session_run(self, run_id):
        return None

    def start_run(self, name, params, tags, parent_run_id=None):
        return "mlflow-session" if parent_run_id is None else f"mlflow-{name}"

    def end_run(self, run_id, status="FINISHED"):
        self.ended.append(run_id)

    def record(self, run_id, record, spent_epsilon, *, key, burn_down_only):
        time.sleep(0.0002)  # widens the window in which appenders and the worker interleave
        self.threads.add(threading.current_thread().name)
        self.sent.append((run_id, record["seq"], burn_down_only))


def _record(seq: int, rtype: str = "info") -> Record:
    body = {"name": "s", "budget": {"epsilon": 1.0, "delta": 1e-6}} if rtype == "open" else {"plugin": "t", "info": {}}
    return Record(seq=seq, type=rtype, time=0.0, prev=GENESIS_PREV, body=body, hash="0" * 64)


def _opened(fake: _SlowMirror) -> SessionMirror:
    mirror = SessionMirror(lambda: fake, "run")
    mirror.enqueue(_record(0, "open"), 0.0)
    return mirror


def test_concurrent_appenders_send_every_record_once_in_ledger_order():
    """8 threads append 50 records each under one lock (as the session does); the worker sends them. A lost record
    or a reordering fails the test; so does a send made by an appending thread. Deterministic assertions; the sleep
    only makes the interleavings that matter likely."""
    fake = _SlowMirror()
    mirror = _opened(fake)
    session_lock = threading.Lock()
    next_seq = iter(range(1, 10**6))

    def appender():
        for _ in range(50):
            with session_lock:
                mirror.enqueue(_record(next(next_seq)), 0.0)

    threads = [threading.Thread(target=appender, name=f"appender-{i}") for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mirror.wait(timeout=60)
    assert not mirror._pending
    assert fake.sent == [("mlflow-session", seq, False) for seq in range(401)]
    assert fake.threads == {"dpaudit-mirror-run"}  # only the worker talks to MLflow
    assert mirror.mirrored_to == {seq: "run" for seq in range(401)}


def test_a_trial_gets_its_records_and_the_session_its_charges_burn_down():
    fake = _SlowMirror()
    mirror = _opened(fake)
    with mirror.trial("t", {"lr": 0.1}):
        mirror.enqueue(_record(1, "charge"), 0.1)
        mirror.enqueue(_record(2, "release"), 0.1)
    mirror.enqueue(_record(3), 0.1)
    assert mirror.wait(timeout=60)
    assert fake.sent == [("mlflow-session", 0, False), ("mlflow-t", 1, False), ("mlflow-session", 1, True),
                         ("mlflow-t", 2, False), ("mlflow-session", 3, False)]
    assert fake.ended == ["mlflow-t"]  # the trial's run ended after its records, at its place in the queue


def test_a_failed_send_stops_sending_and_is_kept_for_the_resync():
    class Failing(_SlowMirror):
        def record(self, run_id, record, spent_epsilon, **kwargs):
            if record["seq"] == 1:
                raise RuntimeError("MLflow down")
            super().record(run_id, record, spent_epsilon, **kwargs)

    fake = Failing()
    mirror = _opened(fake)
    for seq in range(1, 3):
        mirror.enqueue(_record(seq), 0.0)
    assert mirror.wait(timeout=60)
    assert fake.sent == [("mlflow-session", 0, False)]
    assert isinstance(mirror.error, RuntimeError)
    assert set(mirror.mirrored_to) == {0, 1, 2}  # the resync on close knows which run each record belongs to


def test_a_failed_connection_is_kept_and_nothing_else_is_tried():
    calls = []

    def connect():
        calls.append(1)
        raise ConnectionError("no store")

    mirror = SessionMirror(connect, "run")
    for seq in range(3):
        mirror.enqueue(_record(seq, "open" if seq == 0 else "info"), 0.0)
    assert mirror.wait(timeout=60)
    assert isinstance(mirror.error, ConnectionError) and calls == [1]


def test_without_a_mirror_nothing_is_queued_and_no_thread_starts():
    mirror = SessionMirror(None, "run")
    mirror.enqueue(_record(0, "open"), 0.0)
    mirror.log_public_metrics({"accuracy": 0.5}, 0)
    with mirror.trial("t", {"lr": 0.1}):
        pass
    assert mirror.wait(timeout=1)
    assert not mirror.mirrored_to and mirror._worker is None


def test_a_session_without_mirror_does_not_import_mlflow(tmp_path):
    code = ("import sys; from dpaudit import Session; "
            f"s = Session(1.0, 1e-6, mirror=False, store={str(tmp_path)!r}); s.laplace(1.0, 1.0, 0.1); s.close(); "
            "print('mlflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_close_waits_for_a_stuck_mirror_only_so_long_and_names_the_command(monkeypatch, capsys, tmp_path):
    """MLflow hangs while connecting: finish returns after FINISH_TIMEOUT_S (shortened here) with the warning that
    names `dpaudit mirror sync`, instead of blocking close for ever."""
    from dpaudit.tracking import session_mirror

    release = threading.Event()

    def hanging_connect():
        release.wait(timeout=60)
        raise ConnectionError("gave up")

    monkeypatch.setattr(session_mirror, "FINISH_TIMEOUT_S", 0.2)
    mirror = SessionMirror(hanging_connect, "run")
    mirror.enqueue(_record(0, "open"), 0.0)

    class Ledger:
        def records(self):
            return [_record(0, "open")]

    mirror.finish(Ledger(), tmp_path, "FINISHED")  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "did not catch up" in err and "dpaudit mirror sync run" in err
    release.set()
