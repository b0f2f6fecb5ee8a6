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

from dpaudit.ledger import Ledger, Record
from dpaudit.records import CHARGE, CLOSE
from dpaudit.sidecar import OUTPUTS_DIR, sidecar_files

if TYPE_CHECKING:  # mlflow is imported only when a session mirrors
    from dpaudit.tracking.mirror import MlflowMirror


class SessionMirror:
    """One session's mirror: its MLflow run, the trial run records currently go to, and the queue of unsent records.

    Build it with :func:`open_session_mirror`. With no MLflow mirror (``mirror`` None) every method is a no-op.
    Confidential values never pass through here: they have their own file (:mod:`dpaudit.tracking.confidential`).

    Args:
        mirror: the MLflow mirror, or None when the session does not mirror.
        run_id: the session's run id (its MLflow run when mirrored).
    """

    def __init__(self, mirror: MlflowMirror | None, run_id: str) -> None:
        self.mirror = mirror
        self.run_id = run_id
        self.error: Exception | None = None
        self.mirrored_to: dict[int, str] = {}  # ledger seq -> the MLflow run (session or trial) it belongs to
        self._trial_run: str | None = None
        self._pending: deque[Callable[[], None]] = deque()
        self._order = threading.Lock()  # one drainer at a time: sends leave in queue order

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
            attach_run_files(self.mirror, self.run_id, run_dir)
            self.mirror.end_run(self.run_id, mlflow_status(status))
        except Exception as exc:
            print(f"dpaudit: warning: MLflow mirror incomplete ({exc}); the ledger and certificate in {run_dir} are "
                  f"complete; once MLflow is back run `dpaudit mirror sync {self.run_id}`", file=sys.stderr)

    def _resync(self, records: Sequence[Record]) -> None:
        """After a mirror failure: catch every run (session and trials) up with its own ledger records."""
        assert self.mirror is not None
        by_run: dict[str, list[Record]] = {}
        for record in records:
            by_run.setdefault(self.mirrored_to.get(record.seq, self.run_id), []).append(record)
        spent = dict(zip((r.seq for r in records), spent_after(records), strict=True))
        for run, run_records in by_run.items():
            self.mirror.resync(run, [asdict(r) for r in run_records], [spent[r.seq] for r in run_records])


def run_files(run_dir: Path) -> list[Path]:
    """The files of a run folder attached to its MLflow run (ledger, certificate, reports, public key)."""
    return sorted(p for p in Path(run_dir).iterdir() if p.is_file())


def attach_run_files(mirror: MlflowMirror, run_id: str, run_dir: Path) -> None:
    """Attach :func:`run_files` and the sidecar arrays (``outputs/<sha256>.npy``, :mod:`dpaudit.sidecar`) to the run.

    Raises:
        MirrorError: the artifact store could not be written.
    """
    mirror.log_artifacts(run_id, run_files(run_dir))
    outputs = sidecar_files(run_dir)
    if outputs:
        mirror.log_artifacts(run_id, [Path(run_dir) / name for name in outputs], OUTPUTS_DIR)


def spent_after(records: Sequence[Record]) -> list[float]:
    """ε spent after each record, as the session plotted it: 0 until the first charge, then the last charge's
    ``epsilon_spent`` (the burn-down metric of open, charge and close records)."""
    spent, out = 0.0, []
    for record in records:
        if record.type == CHARGE:
            spent = float(record.body["epsilon_spent"])
        out.append(spent)
    return out


def mlflow_status(close_status: str) -> str:
    """The MLflow end status of a run closed with ``close_status`` (an aborted run ends KILLED)."""
    from dpaudit.tracking.mirror import END_STATUSES

    if close_status in END_STATUSES:
        return close_status
    return "KILLED" if close_status == "ABORTED" else "FAILED"


def sync_mirror(run_dir: Path, records: Sequence[Record], tracking_uri: str | None) -> int:
    """Bring a run's MLflow mirror up to date with its ledger, after an outage (``dpaudit mirror sync RUN``).

    Idempotent (the run's high-water mark tag, :meth:`~dpaudit.tracking.mirror.MlflowMirror.resync`): every ledger
    record above the session run's mark is sent to the session run, the run folder's files are attached, and a
    closed run is ended with its close status. Which records a dead process sent to nested trial runs is not in the
    ledger, so records missing from MLflow are caught up in the session run itself (the ledger artifact holds all).

    Args:
        run_dir: the run folder.
        records: its ledger's records (the ``open`` record names the run id).
        tracking_uri: the MLflow store (default as for a session).

    Returns:
        How many records were newly mirrored.

    Raises:
        VerificationError: the MLflow store has no such run.
        MirrorError: MLflow could not be read or written.
    """
    from dpaudit.certificate import open_body
    from dpaudit.tracking.mirror import MlflowMirror
    from dpaudit.tracking.store import resolve_tracking_uri

    run_id = open_body(records).run_id or Path(run_dir).name
    mirror = MlflowMirror(resolve_tracking_uri(tracking_uri), experiment="dpaudit")
    mirror.find_run(run_id)
    sent = mirror.resync(run_id, [asdict(r) for r in records], spent_after(records))
    attach_run_files(mirror, run_id, run_dir)
    if records[-1].type == CLOSE:
        mirror.end_run(run_id, mlflow_status(str(records[-1].body.get("status"))))
    return sent


def open_session_mirror(enabled: bool, tracking_uri: str | None, name: str, params: dict[str, str],
                        tags: dict[str, str], key_fingerprint: str) -> SessionMirror:
    """The session's mirror: when ``enabled``, an MLflow run started with ``params`` and ``tags`` (and tagged with the
    fingerprint of the key that will sign its certificate); otherwise no mirror and a random run id.

    Raises:
        MirrorError: MLflow cannot be reached (only when ``enabled``).
    """
    if not enabled:
        return SessionMirror(None, uuid.uuid4().hex)
    from dpaudit.tracking.entities import KEY_FINGERPRINT_TAG
    from dpaudit.tracking.mirror import MlflowMirror
    from dpaudit.tracking.store import resolve_tracking_uri

    mirror = MlflowMirror(resolve_tracking_uri(tracking_uri), experiment="dpaudit")
    run_id = mirror.start_run(name, params=params, tags={**tags, KEY_FINGERPRINT_TAG: key_fingerprint})
    return SessionMirror(mirror, run_id)
