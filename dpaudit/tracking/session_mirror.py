"""The session's side of the MLflow mirror: which run each record goes to, and sending records outside the lock.

A :class:`~dpaudit.session.Session` appends ledger records under its budget lock. Sending a record to MLflow can
be slow (a full buffer triggers a ``log_batch`` call over the network), so the session only *enqueues* a record
while it holds that lock (:meth:`SessionMirror.enqueue`, a few dictionary operations) and *drains* the queue after
releasing it (:meth:`SessionMirror.drain`): a slow MLflow server slows the thread that drains, never another
thread waiting to charge.

Order: records are enqueued in ledger order (the enqueue happens in the same locked step as the append), and one
drainer at a time (the mirror's order lock) sends them first in, first out, so every MLflow run receives its
records in ledger order. A thread that finds another one draining leaves its records to it: the drainer re-checks
the queue after releasing the order lock, so no record is left behind (:meth:`SessionMirror.drain`).

Failures never reach the audited path: the first failed send is remembered, later records are only noted (which
run they belong to), and on close every run is caught up from the ledger (:meth:`SessionMirror.finish`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from dpaudit.errors import DPAuditError
from dpaudit.ledger import Ledger, Record

if TYPE_CHECKING:  # mlflow is imported only when a session mirrors
    from dpaudit.tracking.confidential import ConfidentialLog
    from dpaudit.tracking.mirror import MlflowMirror


class SessionMirror:
    """One session's mirror: its MLflow run, the trial run records currently go to, and the queue of unsent records.

    Build it with :func:`open_session_mirror`. With no MLflow mirror (``mirror`` None) every method is a no-op
    except :meth:`log_confidential`, which refuses.

    Args:
        mirror: the MLflow mirror, or None when the session does not mirror.
        run_id: the session's run id (its MLflow run when mirrored).
        confidential: the confidential log, when the session enabled it.
    """

    def __init__(self, mirror: MlflowMirror | None, run_id: str, confidential: ConfidentialLog | None = None) -> None:
        self.mirror = mirror
        self.run_id = run_id
        self.confidential = confidential
        self.error: Exception | None = None
        self.mirrored_to: dict[int, str] = {}  # ledger seq -> the MLflow run (session or trial) it belongs to
        self._trial_run: str | None = None
        self._pending: deque[Callable[[], None]] = deque()
        self._order = threading.Lock()  # one drainer at a time: sends leave in queue order

    @property
    def confidential_experiment(self) -> str | None:
        """The confidential experiment's name, when the session logs confidential values."""
        return self.confidential.experiment_name if self.confidential is not None else None

    def _current_run(self) -> str:
        return self._trial_run or self.run_id

    def enqueue(self, record: Record, spent_epsilon: float) -> None:
        """Queue ``record`` for the current run (the caller holds the session lock, so queue order is ledger order).

        Args:
            record: the record just appended.
            spent_epsilon: ε spent after it (plotted as the burn-down metric).
        """
        if self.mirror is None:
            return
        run = self._current_run()
        self.mirrored_to[record.seq] = run
        mirror = self.mirror
        self._pending.append(lambda: mirror.record(run, asdict(record), spent_epsilon))

    def log_public_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Queue metrics computed on public data for the current run, and drain."""
        if self.mirror is None:
            return
        run, mirror, values = self._current_run(), self.mirror, dict(metrics)
        self._pending.append(lambda: mirror.log_public_metrics(run, values, step))
        self.drain()

    def drain(self, *, wait: bool = False) -> None:
        """Send the queued records, in order; call it without holding the session lock.

        Args:
            wait: wait for a drain running in another thread (and then drain); otherwise leave the queue to it.
        """
        while self._pending:
            if not self._order.acquire(blocking=wait):
                return  # the holder re-checks the queue after releasing the lock: it sends what we queued
            try:
                while self._pending:
                    send = self._pending.popleft()
                    if self.error is None:
                        try:
                            send()
                        except Exception as exc:  # the ledger is the source of truth; caught up on close
                            self.error = exc
            finally:
                self._order.release()

    def log_confidential(self, run_name: str, values: Mapping[str, float], step: int) -> None:
        """Log raw, NON-private values into the confidential experiment.

        Raises:
            DPAuditError: the session did not enable confidential logging.
        """
        if self.confidential is None:
            raise DPAuditError("confidential logging is off: open the Session with confidential=True (values "
                               "logged there are not differentially private and are outside the release)")
        self.confidential.log(run_name, dict(values), step)

    @contextlib.contextmanager
    def trial(self, name: str) -> Iterator[None]:
        """Mirror the records made inside the block to a nested MLflow run (one tuning trial)."""
        if self.mirror is None:
            yield
            return
        previous = self._trial_run
        self._trial_run = self.mirror.start_run(name, params={}, tags={}, parent_run_id=self.run_id)
        try:
            yield
        finally:
            self.drain(wait=True)  # the trial's records reach its run before the run ends
            self.mirror.end_run(self._trial_run)
            self._trial_run = previous

    def finish(self, ledger: Ledger, run_dir: Path, status: str) -> None:
        """At close: send what is queued, catch every run up after a failure, attach the run folder's files (ledger,
        certificate, report, public key), end the runs.

        A failure here is reported on stderr, not raised: the ledger and the certificate are already complete.
        """
        if self.mirror is None:
            return
        try:
            self.drain(wait=True)
            if self.error is not None:
                self._resync(ledger.records())
            self.mirror.flush()
            self.mirror.log_artifacts(self.run_id, sorted(p for p in run_dir.iterdir() if p.is_file()))
            self.mirror.end_run(self.run_id, status)
            if self.confidential is not None:
                self.confidential.close()
        except Exception as exc:
            print(f"dpaudit: warning: MLflow mirror incomplete ({exc}); the ledger and certificate in {run_dir} are "
                  "complete; re-sync later", file=sys.stderr)

    def _resync(self, records: Sequence[Record]) -> None:
        """After a mirror failure: catch every run (session and trials) up with its own ledger records."""
        assert self.mirror is not None
        by_run: dict[str, list[Record]] = {}
        for record in records:
            by_run.setdefault(self.mirrored_to.get(record.seq, self.run_id), []).append(record)
        for run, run_records in by_run.items():
            self.mirror.resync(run, [asdict(r) for r in run_records],
                               [r.body.get("epsilon_spent") for r in run_records])


def open_session_mirror(enabled: bool, tracking_uri: str | None, name: str, params: dict[str, str],
                        tags: dict[str, str], key_fingerprint: str, confidential: bool) -> SessionMirror:
    """The session's mirror: when ``enabled``, an MLflow run started with ``params`` and ``tags`` (and tagged with the
    fingerprint of the key that will sign its certificate); otherwise no mirror and a random run id.

    Raises:
        MirrorError: MLflow cannot be reached (only when ``enabled``).
    """
    if not enabled:
        return SessionMirror(None, uuid.uuid4().hex)
    from dpaudit.tracking.confidential import ConfidentialLog
    from dpaudit.tracking.entities import KEY_FINGERPRINT_TAG
    from dpaudit.tracking.mirror import MlflowMirror
    from dpaudit.tracking.store import resolve_tracking_uri

    mirror = MlflowMirror(resolve_tracking_uri(tracking_uri), experiment="dpaudit")
    run_id = mirror.start_run(name, params=params, tags={**tags, KEY_FINGERPRINT_TAG: key_fingerprint})
    return SessionMirror(mirror, run_id, ConfidentialLog(mirror, "dpaudit") if confidential else None)
