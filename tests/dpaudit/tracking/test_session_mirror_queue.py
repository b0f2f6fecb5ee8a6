"""The session's side of the mirror: records leave in ledger order, none is left queued, no MLflow without a mirror."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import deque

from dpaudit.ledger import GENESIS_PREV, Record
from dpaudit.tracking.session_mirror import SessionMirror


class _SlowMirror:
    """Stands in for :class:`~dpaudit.tracking.MlflowMirror`: records what it is sent, slowly."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def record(self, run_id, record, spent_epsilon):
        time.sleep(0.0002)  # widens the window in which another thread finds the order lock taken
        self.sent.append((run_id, record["seq"]))


def _record(seq: int) -> Record:
    return Record(seq=seq, type="info", time=0.0, prev=GENESIS_PREV, body={"plugin": "t", "info": {}}, hash="0" * 64)


def test_concurrent_appenders_send_every_record_once_in_ledger_order():
    """8 threads append (under one lock, as the session does) and drain (outside it) 50 records each.

    A thread that finds another one draining returns at once; the drainer re-checks the queue after releasing the
    order lock. A lost record (queued after the drainer's last check, by a thread that then gave up) or a reordering
    fails the test. Deterministic assertions; the sleep only makes the interleavings that matter likely.
    """
    fake = _SlowMirror()
    mirror = SessionMirror(fake, "run")  # type: ignore[arg-type]
    session_lock = threading.Lock()
    next_seq = iter(range(10**6))

    def appender():
        for _ in range(50):
            with session_lock:
                mirror.enqueue(_record(next(next_seq)), 0.0)
            mirror.drain()

    threads = [threading.Thread(target=appender) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mirror._pending  # no record left behind by a thread that found another one draining
    assert fake.sent == [("run", seq) for seq in range(400)]
    assert mirror.mirrored_to == {seq: "run" for seq in range(400)}


def test_a_record_queued_while_the_drainer_finishes_is_not_left_behind():
    """The exact interleaving that loses a record in a drain without the re-check: the drainer has found the queue
    empty but still holds the order lock when another thread queues a record and, finding the lock taken, leaves.
    The drainer must send that record after releasing the lock (deterministic: the other thread runs inside the
    drainer's emptiness check)."""
    fake = _SlowMirror()
    mirror = SessionMirror(fake, "run")  # type: ignore[arg-type]

    def other_thread_appends():
        mirror.enqueue(_record(1), 0.0)
        mirror.drain()  # finds the order lock taken: returns at once, leaving the record to the drainer

    class Queue(deque):
        hook = other_thread_appends

        def __bool__(self):
            if not len(self) and Queue.hook is not None and mirror._order.locked():
                hook, Queue.hook = Queue.hook, None
                helper = threading.Thread(target=hook)
                helper.start()
                helper.join()
                return False  # what the drainer saw, before the other thread's record arrived
            return bool(len(self))

    mirror._pending = Queue()
    mirror.enqueue(_record(0), 0.0)
    mirror.drain()
    assert Queue.hook is None  # the interleaving happened
    assert fake.sent == [("run", 0), ("run", 1)] and not mirror._pending


def test_a_failed_send_stops_sending_and_is_kept_for_the_resync():
    class Failing(_SlowMirror):
        def record(self, run_id, record, spent_epsilon):
            if record["seq"] == 1:
                raise RuntimeError("MLflow down")
            super().record(run_id, record, spent_epsilon)

    fake = Failing()
    mirror = SessionMirror(fake, "run")  # type: ignore[arg-type]
    for seq in range(3):
        mirror.enqueue(_record(seq), 0.0)
        mirror.drain()
    assert fake.sent == [("run", 0)]
    assert isinstance(mirror.error, RuntimeError)
    assert set(mirror.mirrored_to) == {0, 1, 2}  # the resync on close knows which run each record belongs to


def test_without_a_mirror_nothing_is_queued():
    mirror = SessionMirror(None, "run")
    mirror.enqueue(_record(0), 0.0)
    mirror.log_public_metrics({"accuracy": 0.5}, 0)
    mirror.drain(wait=True)
    assert not mirror.mirrored_to


def test_a_session_without_mirror_does_not_import_mlflow(tmp_path):
    code = ("import sys; from dpaudit import Session; "
            f"s = Session(1.0, 1e-6, mirror=False, store={str(tmp_path)!r}); s.laplace(1.0, 1.0, 0.1); s.close(); "
            "print('mlflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
