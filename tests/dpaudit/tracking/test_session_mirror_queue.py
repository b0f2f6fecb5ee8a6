"""The session's side of the mirror: one worker sends records in ledger order, none is left queued, MLflow only
through the worker."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time

from dpaudit.ledger import GENESIS_PREV, Record
from dpaudit.tracking.session_mirror import MirrorBacklog, SessionMirror


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

    def failure(self):
        return None

    def flush(self):
        pass

    def unwritten(self):
        return set()


def _record(seq: int, rtype: str = "info") -> Record:
    body = {"name": "s", "budget": {"epsilon": 1.0, "delta": 1e-6}} if rtype == "open" else {"plugin": "t", "info": {}}
    return Record(seq=seq, type=rtype, time=0.0, prev=GENESIS_PREV, body=body, hash="0" * 64)


def _opened(fake: _SlowMirror, **options) -> SessionMirror:
    mirror = SessionMirror(lambda: fake, "run", **options)
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
    mirror = _opened(fake, retry_delays=())
    for seq in range(1, 3):
        mirror.enqueue(_record(seq), 0.0)
    assert mirror.wait(timeout=60)
    assert fake.sent == [("mlflow-session", 0, False)]
    assert isinstance(mirror.error, RuntimeError)
    assert set(mirror.mirrored_to) == {0, 1, 2}  # the resync on close knows which run each record belongs to
    assert mirror.unsent == {1, 2}  # the failed record and the one skipped after it: the gap close reports


def test_a_failed_connection_is_kept_and_nothing_else_is_tried():
    calls = []

    def connect():
        calls.append(1)
        raise ConnectionError("no store")

    mirror = SessionMirror(connect, "run", retry_delays=())
    for seq in range(3):
        mirror.enqueue(_record(seq, "open" if seq == 0 else "info"), 0.0)
    assert mirror.wait(timeout=60)
    assert isinstance(mirror.error, ConnectionError) and calls == [1]
    assert mirror.unsent == {0, 1, 2}


def test_the_worker_retries_a_failed_action_with_back_off_and_goes_on():
    """MLflow fails twice, then answers: the worker retries the same record (no failure is kept) and every record
    arrives once, in order. Without the retries (the code before this change) the first failure stops the mirror."""
    class Flaky(_SlowMirror):
        failures = 2

        def record(self, run_id, record, spent_epsilon, **kwargs):
            if record["seq"] == 1 and self.failures:
                self.failures -= 1
                raise ConnectionError("MLflow restarting")
            super().record(run_id, record, spent_epsilon, **kwargs)

    fake = Flaky()
    mirror = _opened(fake, retry_delays=(0.01, 0.01, 0.01))
    for seq in range(1, 4):
        mirror.enqueue(_record(seq), 0.0)
    assert mirror.wait(timeout=60)
    assert mirror.error is None and not mirror.unsent
    assert fake.sent == [("mlflow-session", seq, False) for seq in range(4)]


def test_a_write_the_mirror_kept_buffered_is_flushed_by_the_worker_or_counted():
    """MlflowMirror.record swallows a failed automatic write (it keeps the records buffered): the worker sees it
    through failure(), retries with flush(), and when the retries are spent counts the buffered records as unsent."""
    class Buffering(_SlowMirror):
        def __init__(self, flush_ok):
            super().__init__()
            self.flush_ok, self.flushes = flush_ok, 0

        def failure(self):
            return None if self.flushes and self.flush_ok else RuntimeError("log_batch failed")

        def flush(self):
            self.flushes += 1
            if not self.flush_ok:
                raise RuntimeError("still down")

        def unwritten(self):
            return {seq for _, seq, _ in self.sent}

    recovers = Buffering(flush_ok=True)
    mirror = _opened(recovers, retry_delays=(0.01,))
    assert mirror.wait(timeout=60) and mirror.error is None and recovers.flushes == 1
    stays_down = Buffering(flush_ok=False)
    mirror = _opened(stays_down, retry_delays=(0.01, 0.01))
    mirror.enqueue(_record(1), 0.0)
    assert mirror.wait(timeout=60)
    assert isinstance(mirror.error, RuntimeError) and stays_down.flushes == 3
    assert mirror.unsent == {0, 1}  # record 0 buffered (never written), record 1 skipped after the failure


def test_a_full_queue_drops_from_the_mirror_never_blocks_and_counts_the_gap():
    """The worker is stuck in MLflow: enqueue returns at once for every record (counts, not clocks); items beyond the
    limit are dropped and counted, the failure stops the live mirror (no record is mirrored above the gap), and the
    catch-up at close is left to do the rest. A variant with an unbounded queue (limit 10**9) drops nothing."""
    gate, entered = threading.Event(), threading.Event()

    class Stuck(_SlowMirror):
        def record(self, run_id, record, spent_epsilon, **kwargs):
            entered.set()
            gate.wait(timeout=60)
            super().record(run_id, record, spent_epsilon, **kwargs)

    fake = Stuck()
    mirror = _opened(fake, queue_limit=10, retry_delays=())
    assert entered.wait(timeout=60)  # the worker holds record 0 and waits
    for seq in range(1, 101):
        mirror.enqueue(_record(seq), 0.0)  # returns although the worker is stuck
    assert mirror.dropped == 100 - 10  # the limit queued, the rest dropped
    assert isinstance(mirror.error, MirrorBacklog)
    gate.set()
    assert mirror.wait(timeout=60)
    assert fake.sent == [("mlflow-session", 0, False)]  # nothing above the gap
    assert mirror.unsent == set(range(1, 101))
    unbounded = _opened(Stuck(), queue_limit=10**9, retry_delays=())  # the gate is open: the worker keeps up
    for seq in range(1, 101):
        unbounded.enqueue(_record(seq), 0.0)
    assert unbounded.wait(timeout=60) and unbounded.dropped == 0 and unbounded.error is None


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


def test_the_worker_freezes_the_objects_alive_once_connected(monkeypatch):
    """MLflow's long-lived objects go to the GC's permanent generation once the first worker of the process has
    connected, so no full collection walks them while the session releases (a 1.37 s pause before,
    benchmarks/bench_team_server.py); a second session freezes nothing more."""
    from dpaudit.tracking import session_mirror

    monkeypatch.setattr(session_mirror, "_GC_FROZEN", threading.Event())
    gc.unfreeze()
    mirror = _opened(_SlowMirror())
    assert mirror.wait(timeout=60) and mirror.error is None
    frozen = gc.get_freeze_count()
    assert frozen > 0
    gc.unfreeze()
    second = _opened(_SlowMirror())
    assert second.wait(timeout=60) and gc.get_freeze_count() == 0
    gc.freeze()


def test_a_public_metric_whose_write_is_retried_is_stored_once(tracking_uri, monkeypatch):
    """A real MlflowMirror (batch size 1) whose first two ``log_batch`` calls fail: the public metric stays buffered
    and the worker retries the write. Running the action again (the code before this change) buffered the metric a
    second time, with its own ordinal and timestamp, and MLflow stored two points."""
    from dpaudit.tracking import MlflowMirror

    real = MlflowMirror(tracking_uri, experiment="public-retry", batch_size=1)
    run = real.start_run("public-retry", {}, {})
    failures = [ConnectionError("MLflow restarting")] * 2
    send = real.client.log_batch

    def flaky_log_batch(*args, **kwargs):
        if failures:
            raise failures.pop()
        return send(*args, **kwargs)

    monkeypatch.setattr(real.client, "log_batch", flaky_log_batch)
    mirror = SessionMirror(lambda: real, "run", retry_delays=(0.01, 0.01, 0.01))
    mirror._mlflow_ids["run"] = run  # the session run exists already: only the public metric goes through the worker
    mirror.log_public_metrics({"test_accuracy": 0.75}, step=3)
    assert mirror.wait(timeout=60)
    assert not failures and mirror.error is None
    history = real.client.get_metric_history(run, "test_accuracy")
    assert [(m.step, m.value) for m in history] == [(3, 0.75)]
