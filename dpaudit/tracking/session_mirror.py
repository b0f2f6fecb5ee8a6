"""The session's side of the MLflow mirror: a lazy connection and one worker thread that sends records in order.

Opening a session must not wait for MLflow: importing it takes seconds, and so does creating the embedded store
the first time. So the session makes its own run id (32 lowercase hex, uuid4) before its ledger exists, and its
mirror connects lazily: the first queued record starts one worker thread (a daemon) that imports MLflow, makes the
store ready (:func:`~dpaudit.tracking.store.prepare_store`), creates the session's MLflow run from the ``open``
record, tagged ``dpaudit.run_id`` (:func:`ensure_session_run`), and then sends every queued item.

Order: the session queues a record while it holds its budget lock, in the same step as the ledger append
(:meth:`SessionMirror.enqueue`, a few list operations), and the single worker sends queued items first in, first
out. Every MLflow run (session or trial) so receives its records in ledger order, and a trial's nested run is
created and ended at its place in the queue. No thread that charges ever calls MLflow: a slow server never holds
the budget lock, and a session that is never mirrored never imports MLflow.

A charge made inside a trial goes to the trial's nested run whole and to the session run as a burn-down point only,
so the session's burn-down has a step at every charge.

No release waits on the mirror. The queue is bounded (:data:`QUEUE_LIMIT` items): an item that finds it full is
dropped from the mirror, never from the ledger, and counted. A failed action (or a write that
:class:`~dpaudit.tracking.mirror.MlflowMirror` kept buffered after a failure) is retried by the worker alone, with
back-off (:data:`RETRY_DELAYS_S`); a mirroring session makes MLflow's own HTTP client try each request once
(:data:`~dpaudit.tracking.store.SERVER_CLIENT_DEFAULTS`), so no MLflow call sleeps through minutes of retries. When
the retries are spent, or an item was dropped, the failure is remembered and later items are skipped (which run
each record belongs to is still noted): mirroring a record above a gap would raise the run's high-water mark over
it. Every ledger record not known to be in MLflow is counted (:attr:`SessionMirror.unsent`).

At close (:meth:`SessionMirror.finish`) the worker catches every run up from the ledger after a failure, attaches
the run folder's files, states the certified claim on the run page (:mod:`dpaudit.tracking.run_page`) and ends the
run. Close waits for it at most :data:`FINISH_TIMEOUT_S`; if MLflow is still out of reach it reports the gap (how
many ledger records are not in MLflow) and the command that fills it (``dpaudit mirror sync RUN``,
:func:`sync_mirror`).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import sys
import tempfile
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpaudit.errors import DPAuditError, InvalidParameter, VerificationError
from dpaudit.ledger import Ledger, Record
from dpaudit.records import CHARGE, CLOSE, OPEN
from dpaudit.sidecar import OUTPUTS_DIR, sidecar_files
from dpaudit.store import read_certificate
from dpaudit.tracking.run_page import (
    RUN_ID_TAG,
    certificate_tags,
    checked_verdict,
    close_verdict,
    hyperparameters,
    session_run,
)
from dpaudit.tracking.store import redact_credentials

if TYPE_CHECKING:  # mlflow is imported only by the worker of a session that mirrors
    from dpaudit.tracking.mirror import MlflowMirror

FINISH_TIMEOUT_S = 300.0
"""How long close waits for the mirror to catch up before it warns and returns (the ledger is complete anyway)."""
QUEUE_LIMIT = 10_000
"""Most items the mirror's queue holds; an item that finds it full is dropped from the mirror (never the ledger)."""
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)
"""The worker's back-off between attempts of a failed action (about 15 s in all); close cuts it short."""
EXPERIMENT = "dpaudit"
_GC_FROZEN = threading.Event()  # set once the first mirror of the process has frozen the objects alive (_connected)


class MirrorBacklog(DPAuditError):
    """The mirror's queue was full: MLflow was slower than the session, and records were left to the catch-up."""


@dataclass(frozen=True)
class _Item:
    """One queued action: ``always`` (the finishing item) runs even after a failure; ``seqs`` are the ledger records
    it sends (none for others); ``public`` marks a public metric or artifact, which is not in the ledger."""

    action: Callable[[], None]
    always: bool = False
    seqs: tuple[int, ...] = ()
    public: bool = False


def new_run_id() -> str:
    """A fresh run id: 32 lowercase hex digits (uuid4), the same form as MLflow's own run ids."""
    return uuid.uuid4().hex


class SessionMirror:
    """One session's mirror: the queue of unsent items, the worker that sends them, the runs they go to.

    Build it with :func:`open_session_mirror`. Without a connection (``connect`` None) every method is a no-op,
    apart from checking a trial's name and params. Confidential values never pass through here: they have their own
    file (:mod:`dpaudit.tracking.confidential`).

    Args:
        connect: makes the MLflow mirror (called in the worker, again after a failure until it succeeds), or None
            when the session does not mirror.
        run_id: the session's run id (the MLflow run's tag ``dpaudit.run_id``).
        queue_limit: most queued items (:data:`QUEUE_LIMIT`).
        retry_delays: the worker's back-off in seconds between attempts of a failed action (:data:`RETRY_DELAYS_S`).

    Attributes:
        error: the first failure (or :class:`MirrorBacklog`), None while every item was sent.
        unsent: ``seq`` of the ledger records not known to be in MLflow: dropped at a full queue, skipped after the
            failure, or buffered when it became final (a close that catches up does not clear it).
        dropped: how many items found the queue full.
        lost_public: public metrics and artifacts not sent (not in the ledger, so no catch-up brings them back).
    """

    def __init__(self, connect: Callable[[], MlflowMirror] | None, run_id: str, *, queue_limit: int = QUEUE_LIMIT,
                 retry_delays: Sequence[float] = RETRY_DELAYS_S) -> None:
        self._connect = connect
        self.run_id = run_id
        self.queue_limit = queue_limit
        self.retry_delays = tuple(retry_delays)
        self.mirror: MlflowMirror | None = None
        self.error: Exception | None = None
        self.unsent: set[int] = set()
        self.dropped = 0
        self.lost_public = 0
        self._closing = False
        self.mirrored_to: dict[int, str] = {}  # ledger seq -> the run (session or trial target) it belongs to
        self._mlflow_ids: dict[str, str] = {}  # run target -> its MLflow run id, once created
        self._opened: Mapping[str, Any] | None = None  # the open record's body: the session run's params and tags
        self._trial: str | None = None
        self._trial_numbers = itertools.count()
        self._pending: deque[_Item] = deque()
        self._busy = False
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None

    # --- queueing (the session's threads) ---------------------------------------------------------------------

    def _put(self, item: _Item) -> None:
        """Queue ``item`` (a few list operations under the lock; never waits for the worker). A full queue drops
        it, counts it, and stops the live mirror: the records above the gap are left to the catch-up."""
        with self._cond:
            if not item.always and len(self._pending) >= self.queue_limit:
                self.dropped += 1
                self._note_unsent(item)
                if self.error is None:
                    self.error = MirrorBacklog(f"the mirror's queue was full ({self.queue_limit} items): MLflow "
                                               "was slower than the session")
                self._cond.notify_all()
                return
            self._pending.append(item)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name=f"dpaudit-mirror-{self.run_id[:8]}",
                                                daemon=True)
                self._worker.start()
            self._cond.notify_all()

    def _current(self) -> str:
        return self._trial or self.run_id

    def enqueue(self, record: Record, spent_epsilon: float) -> None:
        """Queue ``record`` for the current run (the caller holds the session lock, so queue order is ledger order).

        Args:
            record: the record just appended.
            spent_epsilon: ε spent after it (plotted as the burn-down metric).
        """
        if self._connect is None:
            return
        target = self._current()
        self.mirrored_to[record.seq] = target
        if record.type == OPEN:
            self._opened = record.body
        self._put(_Item(partial(self._send, target, record, spent_epsilon, False), seqs=(record.seq,)))
        if target != self.run_id and record.type == CHARGE:
            self._put(_Item(partial(self._send, self.run_id, record, spent_epsilon, True), seqs=(record.seq,)))

    def catch_up(self, records: Sequence[Record]) -> None:
        """Queue the catch-up of a resumed run: the session run (found by its tag, or created from the ``open``
        record) receives every record of ``records`` above its high-water mark
        (:meth:`~dpaudit.tracking.mirror.MlflowMirror.resync`), before anything the resumed session appends
        (called before the resumed session's first record, so every later record queues behind it).

        Args:
            records: the resumed ledger's records, from its ``open`` record on.
        """
        if self._connect is None:
            return
        self._opened = records[0].body
        for record in records:
            self.mirrored_to[record.seq] = self.run_id
        self._put(_Item(partial(self._resync_session, list(records)), seqs=tuple(r.seq for r in records)))

    def _resync_session(self, records: Sequence[Record]) -> None:
        self._connected().resync(self._mlflow_id(self.run_id), [asdict(r) for r in records], spent_after(records),
                                 key=self._spent_key())

    def log_public_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Queue metrics computed on public data for the current run."""
        if self._connect is None:
            return
        target, values = self._current(), dict(metrics)
        self._put(_Item(partial(self._send_public, target, values, step), public=True))

    def log_public_artifact(self, name: str, data: bytes, artifact_path: str) -> None:
        """Queue a file of public content (``name``, ``data``) for the session run's artifacts under
        ``artifact_path``; the bytes are copied now, written to a temporary file when sent."""
        if self._connect is None:
            return
        self._put(_Item(partial(self._send_artifact, self.run_id, name, bytes(data), artifact_path), public=True))

    @contextlib.contextmanager
    def trial(self, name: str, params: Mapping[str, Any] | None = None) -> Iterator[None]:
        """Mirror the records made inside the block to a nested MLflow run (one tuning trial) with ``params``.

        Raises:
            InvalidParameter: an empty name, or params :func:`~dpaudit.tracking.run_page.hyperparameters` refuses
                (checked before anything is queued, with or without a mirror).
        """
        if not isinstance(name, str) or not name.strip():
            raise InvalidParameter(f"trial name must be a non-empty string, got {name!r}")
        values = hyperparameters(params)
        if self._connect is None:
            yield
            return
        target = f"{self.run_id}/trial-{next(self._trial_numbers)}"
        self._put(_Item(partial(self._start_trial, target, name, values)))
        previous, self._trial = self._trial, target
        try:
            yield
        finally:
            self._trial = previous
            self._put(_Item(partial(self._end_trial, target)))

    def wait(self, timeout: float = FINISH_TIMEOUT_S) -> bool:
        """Wait until everything queued so far has been sent (or skipped after a failure); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def mlflow_run_id(self, target: str | None = None) -> str | None:
        """The MLflow run id of the session run (or of a trial target), None until the worker has created it."""
        return self._mlflow_ids.get(target or self.run_id)

    def finish(self, ledger: Ledger, run_dir: Path, status: str) -> None:
        """At close: let the worker send what is queued, catch every run up after a failure, attach the run folder's
        files, state the certified claim on the run page and end the run; wait for it at most
        :data:`FINISH_TIMEOUT_S`.

        A failure here is reported on stderr, not raised: the ledger and the certificate are already complete. The
        report gives the gap (ledger records not known to be in MLflow) and the command that fills it.
        """
        if self._connect is None:
            return
        done, failures = threading.Event(), []
        with self._cond:
            self._closing = True  # cuts a back-off short: close catches up from the ledger instead
        self._put(_Item(partial(self._finish, ledger, Path(run_dir), status, failures, done), always=True))
        if not done.wait(FINISH_TIMEOUT_S):
            failures.append(TimeoutError(f"MLflow did not catch up within {FINISH_TIMEOUT_S:.0f} s"))
        lost = (f"; {self.lost_public} public metric / artifact item(s) were not mirrored and are not in the ledger"
                if self.lost_public else "")
        if failures:
            total = len(ledger.records())
            reason = redact_credentials(str(failures[0]))
            print(f"dpaudit: warning: MLflow mirror incomplete ({reason}): {len(self.unsent)} of the ledger's "
                  f"{total} records "
                  f"may be missing from MLflow ({self.dropped} dropped at a full queue){lost}; the ledger and "
                  f"certificate in {run_dir} are complete; once MLflow is back run "
                  f"`dpaudit mirror sync {self.run_id}`", file=sys.stderr)
        elif lost:
            print(f"dpaudit: warning: MLflow mirror caught up from the ledger{lost}", file=sys.stderr)

    # --- the worker -------------------------------------------------------------------------------------------

    def _work(self) -> None:
        """Send queued items in order; leave after the finishing item, or when idle for :data:`FINISH_TIMEOUT_S`
        (a later item starts a new worker: :meth:`_put` starts one whenever ``_worker`` is None)."""
        while True:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
                if not self._cond.wait_for(lambda: self._pending, timeout=FINISH_TIMEOUT_S):
                    self._worker = None
                    return
                item = self._pending.popleft()
                self._busy = True
            if item.always:  # the finishing item: the session is closed
                item.action()  # it catches and reports its own failures
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                    if not self._pending:
                        self._worker = None
                        return
            elif self.error is None:
                self._attempt(item)
            else:
                with self._cond:  # _put notes items under the lock too: the counts are shared with its threads
                    self._note_unsent(item)

    def _attempt(self, item: _Item) -> None:
        """Run ``item``, retrying with back-off (:attr:`retry_delays`) while it fails, or while the mirror holds a
        write it could not make; stop early when the session closes or the queue overflows. A failure that outlives
        the retries becomes :attr:`error` (the ledger is the source of truth; close catches up from it).

        An action that returned is never run again: only the mirror's buffered write is retried. A public metric is
        buffered with a fresh ordinal and timestamp each time it is logged, so running its action again after the
        write failed would store it twice."""
        failure: Exception | None = None
        done = False
        for delay in (0.0, *self.retry_delays):
            if delay:
                with self._cond:
                    if self._cond.wait_for(lambda: self._closing or self.error is not None, timeout=delay):
                        break
            try:
                if not done:
                    item.action()
                    done = True
                if self.mirror is not None and self.mirror.failure() is not None:
                    self.mirror.flush()  # what an automatic write left buffered
                return
            except Exception as exc:
                failure = exc
        with self._cond:
            self.error = self.error or failure
            self._note_unsent(item)
            if self.mirror is not None:
                self.unsent.update(self.mirror.unwritten())

    def _note_unsent(self, item: _Item) -> None:
        """Count ``item`` as not sent (the caller holds ``_cond``)."""
        if item.seqs:
            self.unsent.update(item.seqs)
        elif item.public:
            self.lost_public += 1

    def _connected(self) -> MlflowMirror:
        if self.mirror is None:
            assert self._connect is not None
            self.mirror = self._connect()
            # MLflow and SQLAlchemy leave a few hundred thousand long-lived objects; the next full collection of the
            # cyclic GC would walk them all and stop every thread meanwhile, the releasing one included (1.1-1.4 s
            # under load, benchmarks/bench_team_server.py). Moved to the permanent generation, no collection walks
            # them. Once per process: frozen objects are never collected, so later sessions add nothing to them.
            if not _GC_FROZEN.is_set():
                _GC_FROZEN.set()
                gc.freeze()
        return self.mirror

    def _mlflow_id(self, target: str) -> str:
        """The MLflow run of ``target``: the session run is created on first use; a trial that has no run (its
        creation failed) falls back to the session run."""
        mirror = self._connected()
        if self.run_id not in self._mlflow_ids:
            if self._opened is None:
                raise DPAuditError("the session run cannot be created before the open record is queued")
            self._mlflow_ids[self.run_id] = ensure_session_run(mirror, self.run_id, self._opened)
        return self._mlflow_ids.get(target, self._mlflow_ids[self.run_id])

    def _spent_key(self) -> str:
        from dpaudit.tracking.entities import spent_key

        return spent_key(self._opened or {})

    def _send(self, target: str, record: Record, spent: float, burn_down_only: bool) -> None:
        run = self._mlflow_id(target)
        self._connected().record(run, asdict(record), spent, key=self._spent_key(), burn_down_only=burn_down_only)

    def _send_public(self, target: str, metrics: dict[str, float], step: int) -> None:
        self._connected().log_public_metrics(self._mlflow_id(target), metrics, step)

    def _send_artifact(self, target: str, name: str, data: bytes, artifact_path: str) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / name
            path.write_bytes(data)
            self._connected().log_artifacts(self._mlflow_id(target), [path], artifact_path)

    def _start_trial(self, target: str, name: str, params: dict[str, str]) -> None:
        parent = self._mlflow_id(self.run_id)
        self._mlflow_ids[target] = self._connected().start_run(name, params=params, tags={}, parent_run_id=parent)

    def _end_trial(self, target: str) -> None:
        if target in self._mlflow_ids:
            self._connected().end_run(self._mlflow_ids[target])

    def _finish(self, ledger: Ledger, run_dir: Path, status: str, failures: list[Exception],
                done: threading.Event) -> None:
        try:
            mirror = self._connected()
            if self.error is not None:
                self._resync(ledger.records())
            session = self._mlflow_id(self.run_id)
            mirror.flush()
            attach_run_files(mirror, session, run_dir)
            certificate = read_certificate(run_dir)
            if certificate is not None:
                mirror.set_tags(session, certificate_tags(certificate, close_verdict(certificate), self._spent_key()))
            mirror.end_run(session, mlflow_status(status))
        except Exception as exc:
            failures.append(exc)
            self.error = self.error or exc
            if self.mirror is not None:
                self.unsent.update(self.mirror.unwritten())
        finally:
            done.set()

    def _resync(self, records: Sequence[Record]) -> None:
        """After a failure: catch every run (session and trials) up with its own ledger records, and the session run
        with the burn-down points of the trials' charges."""
        mirror = self._connected()
        by_run: dict[str, list[Record]] = {}
        only: set[int] = set()
        for record in records:
            run = self._mlflow_id(self.mirrored_to.get(record.seq, self.run_id))
            by_run.setdefault(run, []).append(record)
            session = self._mlflow_id(self.run_id)
            if run != session and record.type == CHARGE:
                by_run.setdefault(session, []).append(record)
                only.add(record.seq)
        spent = dict(zip((r.seq for r in records), spent_after(records), strict=True))
        for run, run_records in by_run.items():
            run_records.sort(key=lambda r: r.seq)
            mirror.resync(run, [asdict(r) for r in run_records], [spent[r.seq] for r in run_records],
                          key=self._spent_key(),
                          burn_down_only=frozenset(only) if run == self._mlflow_ids[self.run_id] else frozenset())


def ensure_session_run(mirror: MlflowMirror, run_id: str, opened: Mapping[str, Any]) -> str:
    """The MLflow run id of dpaudit run ``run_id``: the run tagged ``dpaudit.run_id = run_id`` (or, for a run mirrored
    before the session made its own ids, the MLflow run of that id, then tagged), created from the ``open`` record
    body ``opened`` if there is none (:func:`~dpaudit.tracking.run_page.session_run`).

    Raises:
        MirrorError: MLflow cannot be read or written.
    """
    found = mirror.find_session_run(run_id)
    if found is not None:
        if found.data.tags.get(RUN_ID_TAG) != run_id:
            mirror.set_tags(found.info.run_id, {RUN_ID_TAG: run_id})
        return found.info.run_id
    name, params, tags = session_run(run_id, opened)
    return mirror.start_run(name, params=params, tags=tags)


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


def verdict_of(run_dir: Path) -> str:
    """``dpaudit verify``'s verdict on the run folder (default trust), as the run tag states it."""
    from dpaudit.verify import verify_bundle

    try:
        report = verify_bundle(run_dir)
    except DPAuditError as exc:
        return f"not verified: {exc}"
    return checked_verdict(report.valid, report.reasons)


def sync_mirror(run_dir: Path, records: Sequence[Record], tracking_uri: str | None) -> int:
    """Bring a run's MLflow mirror up to date with its ledger: after an outage, or into an empty or rebuilt store
    (``dpaudit mirror sync RUN``).

    The session run is found by its tag ``dpaudit.run_id`` and created from the ``open`` record if absent
    (:func:`ensure_session_run`); every ledger record above its high-water mark is sent
    (:meth:`~dpaudit.tracking.mirror.MlflowMirror.resync`), the run folder's files are attached, a closed run's page
    states its certified claim with ``dpaudit verify``'s verdict, and it is ended with its close status. Idempotent:
    a second sync sends no record and creates no run. Which records a dead process sent to nested trial runs is not
    in the ledger, so records missing from MLflow are caught up in the session run itself (the ledger artifact holds
    all).

    Args:
        run_dir: the run folder.
        records: its ledger's records (the ``open`` record names the run id).
        tracking_uri: the MLflow store (default as for a session).

    Returns:
        How many records were newly mirrored.

    Raises:
        VerificationError: the ledger does not start with an ``open`` record, or the certificate is unreadable.
        MirrorError: MLflow could not be read or written.
    """
    from dpaudit.tracking.entities import spent_key
    from dpaudit.tracking.mirror import MlflowMirror
    from dpaudit.tracking.store import resolve_tracking_uri

    if not records or records[0].type != OPEN:
        raise VerificationError(f"the ledger of {run_dir} does not start with an open record")
    opened = records[0].body
    run_id = opened.get("run_id") or Path(run_dir).name
    mirror = MlflowMirror(resolve_tracking_uri(tracking_uri), experiment=EXPERIMENT)
    session = ensure_session_run(mirror, run_id, opened)
    key = spent_key(opened)
    sent = mirror.resync(session, [asdict(r) for r in records], spent_after(records), key=key)
    attach_run_files(mirror, session, run_dir)
    certificate = read_certificate(run_dir)
    if certificate is not None:
        mirror.set_tags(session, certificate_tags(certificate, verdict_of(run_dir), key))
    if records[-1].type == CLOSE:
        mirror.end_run(session, mlflow_status(str(records[-1].body.get("status"))))
    return sent


def open_session_mirror(enabled: bool, tracking_uri: str | None, run_id: str) -> SessionMirror:
    """The session's mirror of run ``run_id``: when ``enabled``, one that connects to MLflow lazily, in its worker
    thread; otherwise none. Opening imports no MLflow and touches no store.

    Raises:
        InvalidParameter: an empty tracking URI, or a tracking server without credentials
            (:func:`~dpaudit.tracking.store.check_credentials`); only when ``enabled``.
    """
    if not enabled:
        return SessionMirror(None, run_id)
    from dpaudit.tracking.store import check_credentials, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    check_credentials(uri)  # before the session's ledger exists, and before anything is sent

    def connect() -> MlflowMirror:
        from dpaudit.tracking.mirror import MlflowMirror

        return MlflowMirror(uri, experiment=EXPERIMENT)

    return SessionMirror(connect, run_id)
