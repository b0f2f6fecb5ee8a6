"""The MLflow mirror: copies ledger records into MLflow runs, in batches, idempotently.

The ledger is the source of truth; this is a view of it for the MLflow UI. Design (docs/mlflow.md):

* A session is an MLflow run, found by its tag ``dpaudit.run_id`` (MLflow makes its own run ids); a trial is a
  nested run (tag ``mlflow.parentRunId``). The experiment is tagged for MLflow's classic runs view. Only
  ``MlflowClient`` is used, never MLflow's fluent (global, per-thread) run state, so sessions may run in threads.
* Records are buffered per run and written with ``MlflowClient.log_batch`` when a run's buffer holds
  ``batch_size`` items, and on :meth:`MlflowMirror.flush` / :meth:`MlflowMirror.end_run`. Calls are split to
  respect MLflow's per-call limits (:mod:`dpaudit.tracking.batching`).
* Idempotency: a record's metrics are deterministic (:mod:`dpaudit.tracking.entities`), and every call also sets
  the run's high-water mark tag ``dpaudit.mirrored_seq`` (highest record ``seq`` in the call) in the same
  transaction as the call's summary tags, after its metrics (:mod:`dpaudit.tracking.batching`). Records at or
  below the stored mark are never sent again. After a failed call the mark is re-read from the server before the
  next write, so a call that failed *after* being applied is not repeated; one applied only in part (metrics
  stored, tags not) re-sends identical metrics, which MLflow's SQL store recognises as rows it already holds (its
  metric primary key is run, key, timestamp, step, value) and does not duplicate.
* Failures never lose ledger work: a failed automatic flush inside :meth:`MlflowMirror.record` keeps the records
  buffered and stops further automatic attempts for that run (an unreachable server must not slow the session);
  :meth:`MlflowMirror.flush` and :meth:`MlflowMirror.end_run` retry and raise :class:`MirrorError`;
  :meth:`MlflowMirror.resync` catches a run up from the ledger later.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Param, Run, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from mlflow.utils.validation import MAX_PARAMS_TAGS_PER_BATCH

from dpaudit.errors import DPAuditError, InvalidParameter, VerificationError
from dpaudit.public_values import check_public, confidential_key_set
from dpaudit.store import is_run_id
from dpaudit.tracking.batching import plan_batches
from dpaudit.tracking.entities import (
    SPENT_KEY,
    RecordEntities,
    burn_down_entities,
    public_metric_entities,
    record_entities,
)
from dpaudit.tracking.run_page import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, RUN_ID_TAG
from dpaudit.tracking.store import (
    check_credentials,
    is_server,
    prepare_store,
    redact_credentials,
    use_server_defaults,
)
from dpaudit.validation import check_count

RECORDS = "records"
PUBLIC = "public"
MARK_TAGS = {RECORDS: "dpaudit.mirrored_seq", PUBLIC: "dpaudit.mirrored_public"}
"""Stream → run tag holding its high-water mark (highest ``seq`` / public-metrics ordinal stored)."""

END_STATUSES = frozenset({"FINISHED", "FAILED", "KILLED"})
_ALREADY_EXISTS = ErrorCode.Name(RESOURCE_ALREADY_EXISTS)


class MirrorError(DPAuditError):
    """MLflow could not be written; the ledger is complete and :meth:`MlflowMirror.resync` can catch up.

    Its message never shows a URI's ``user:password@`` (:func:`~dpaudit.tracking.store.redact_credentials`).
    """

    def __init__(self, message: str) -> None:
        super().__init__(redact_credentials(message))


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None,
                      tags: Mapping[str, str]) -> str:
    """The id of the active experiment ``name``, created (with ``tags``) if missing.

    Raises:
        MirrorError: the experiment is deleted, or MLflow cannot be reached.
    """
    try:
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return client.create_experiment(name, artifact_location=artifact_location, tags=dict(tags))
            except MlflowException as exc:  # created meanwhile by another thread or process
                if exc.error_code != _ALREADY_EXISTS:
                    raise
                experiment = client.get_experiment_by_name(name)
        if experiment is None or experiment.lifecycle_stage != "active":
            raise MirrorError(f"MLflow experiment {name!r} is deleted; restore it or choose another name")
        for key, value in tags.items():
            if experiment.tags.get(key) != value:
                client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id
    except MirrorError:
        raise
    except Exception as exc:
        raise MirrorError(f"cannot open MLflow experiment {name!r}: {exc}") from exc


def runs_view_url(tracking_uri: str, base_url: str, experiment: str = "dpaudit") -> str:
    """The UI link that opens ``experiment``'s runs list in MLflow's classic view: ``workflowType=machine_learning``
    (the MLflow 3.17 UI follows that switch, GenAI by default, rather than the experiment's kind tag); the
    experiments list when the experiment does not exist yet (nothing is created here)."""
    try:
        found = MlflowClient(tracking_uri=tracking_uri).get_experiment_by_name(experiment)
    except Exception:  # the UI will say what is wrong with the store; the link is only a convenience
        found = None
    page = f"experiments/{found.experiment_id}/runs" if found is not None else "experiments"
    return f"{base_url}/#/{page}?workflowType=machine_learning"


def _entities(record: Mapping[str, Any], spent: float | None, keys: frozenset[str], key: str,
              burn_down_only: bool) -> RecordEntities:
    if not burn_down_only:
        return record_entities(record, spent, keys, key)
    if spent is None:
        raise InvalidParameter("a burn-down point needs the ε spent after its record")
    check_public(record, keys, f"ledger record {record.get('seq')}")
    return burn_down_entities(record, spent, key)


def _string_map(name: str, values: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(values, Mapping):
        raise InvalidParameter(f"{name} must be a mapping of str -> str, got {type(values).__name__}")
    for key, value in values.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidParameter(f"{name} must map str -> str, got {key!r}: {value!r}")
    return dict(values)


@dataclass
class _RunState:
    """What the mirror knows about one run: its stored marks (None: unknown, read before writing) and buffer."""

    marks: dict[str, int] | None
    records: dict[int, RecordEntities] = field(default_factory=dict)
    public: list[RecordEntities] = field(default_factory=list)
    next_public: int = 0
    failure: Exception | None = None

    def pending(self) -> int:
        return len(self.records) + len(self.public)

    def items(self) -> list[tuple[str, RecordEntities]]:
        return [(RECORDS, self.records[s]) for s in sorted(self.records)] + [(PUBLIC, e) for e in self.public]

    def drop_through_marks(self) -> None:
        assert self.marks is not None
        for seq in [s for s in self.records if s <= self.marks[RECORDS]]:
            del self.records[seq]
        self.public = [e for e in self.public if e.ordinal > self.marks[PUBLIC]]
        self.next_public = max(self.next_public, self.marks[PUBLIC] + 1)


class MlflowMirror:
    """Mirror of ledger records into MLflow (see the module docstring for the design).

    Args:
        tracking_uri: any MLflow tracking URI; see :func:`~dpaudit.tracking.resolve_tracking_uri`.
        experiment: name of the MLflow experiment that holds the runs (created when the first run starts).
        batch_size: buffered items per run that trigger a write (MLflow's per-call limits are kept by splitting).
        confidential_keys: keys refused in records and metrics, on top of
            :data:`~dpaudit.public_values.CONFIDENTIAL_KEYS`.

    Raises:
        InvalidParameter: empty URI or experiment name, a batch size < 1, or a tracking server without credentials
            (:func:`~dpaudit.tracking.store.check_credentials`: nothing is sent). With a server, MLflow's
            client is set to try each request once (:func:`~dpaudit.tracking.store.use_server_defaults`).
    """

    def __init__(self, tracking_uri: str, experiment: str = "dpaudit", batch_size: int = 200, *,
                 confidential_keys: Iterable[str] = ()) -> None:
        if not isinstance(tracking_uri, str) or not tracking_uri.strip():
            raise InvalidParameter(f"tracking URI must be a non-empty string, got {tracking_uri!r}")
        if not isinstance(experiment, str) or not experiment.strip():
            raise InvalidParameter(f"experiment must be a non-empty string, got {experiment!r}")
        self.batch_size = check_count("batch_size", batch_size)
        check_credentials(tracking_uri)
        if is_server(tracking_uri):
            use_server_defaults()
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.confidential_keys = confidential_key_set(confidential_keys)
        self.artifact_location = prepare_store(tracking_uri)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self._experiment_id: str | None = None
        self._runs: dict[str, _RunState] = {}
        self._lock = threading.RLock()

    # --- runs -------------------------------------------------------------------------------------------------

    def experiment_id(self) -> str:
        """The id of this mirror's experiment, created on first use, tagged so that the MLflow UI shows its runs
        list (:data:`~dpaudit.tracking.run_page.EXPERIMENT_KIND`), not the GenAI view.

        Raises:
            MirrorError: MLflow cannot be reached or the experiment is deleted.
        """
        with self._lock:
            if self._experiment_id is None:
                self._experiment_id = ensure_experiment(self.client, self.experiment, self.artifact_location,
                                                        {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
            return self._experiment_id

    def start_run(self, name: str, params: dict[str, str], tags: dict[str, str],
                  parent_run_id: str | None = None) -> str:
        """Create a run (nested under ``parent_run_id`` if given), log its params, and return its id.

        Raises:
            InvalidParameter: empty name, params or tags that are not str -> str, or hold a confidential key.
            MirrorError: MLflow could not be written.
        """
        if not isinstance(name, str) or not name.strip():
            raise InvalidParameter(f"run name must be a non-empty string, got {name!r}")
        params = _string_map("params", params)
        tags = _string_map("tags", tags)
        check_public({**params, **tags}, self.confidential_keys, f"run {name!r} params / tags")
        if parent_run_id is not None:
            tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
        experiment_id = self.experiment_id()
        try:
            run_id = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
            entries = [Param(k, v) for k, v in params.items()]
            for start in range(0, len(entries), MAX_PARAMS_TAGS_PER_BATCH):
                self.client.log_batch(run_id, params=entries[start:start + MAX_PARAMS_TAGS_PER_BATCH])
        except Exception as exc:
            raise MirrorError(f"cannot start MLflow run {name!r} at {self.tracking_uri}: {exc}") from exc
        with self._lock:
            self._runs[run_id] = _RunState(marks={RECORDS: -1, PUBLIC: -1})
        return run_id

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        """Flush the run's buffer and mark the run ended.

        Raises:
            InvalidParameter: unknown status.
            MirrorError: the buffer could not be written (the run is left running, so it can be resynced).
        """
        if status not in END_STATUSES:
            raise InvalidParameter(f"status must be one of {sorted(END_STATUSES)}, got {status!r}")
        with self._lock:
            if run_id in self._runs:
                self._flush_run(run_id, self._runs[run_id])
            try:
                self.client.set_terminated(run_id, status=status)
            except Exception as exc:
                raise MirrorError(f"cannot end MLflow run {run_id}: {exc}") from exc
            self._runs.pop(run_id, None)

    def find_session_run(self, run_id: str) -> Run | None:
        """The MLflow run of dpaudit run ``run_id``: the oldest run of this mirror's experiment tagged
        ``dpaudit.run_id = run_id``, else a run whose MLflow id is ``run_id`` (runs mirrored before the session made
        its own ids), else None. Reads only: a missing experiment is not created. For writing the mirror (a session,
        ``dpaudit mirror sync``); what is verified is found by :meth:`find_run`, which refuses two tagged runs.

        Raises:
            MirrorError: MLflow cannot be read.
        """
        tagged = self._tagged_runs(run_id, 1)
        return tagged[0] if tagged else self._run_by_mlflow_id(run_id)

    def find_run(self, run_id: str) -> Run:
        """The one MLflow run of ``run_id``: a dpaudit run id (tag ``dpaudit.run_id``) or an MLflow run id.

        Any user who may edit the experiment can create a run carrying another run's tag, so when two runs carry it
        none is chosen (the oldest could be a planted copy with an early ``start_time``).

        Raises:
            VerificationError: no such run in this store, more than one run tagged ``dpaudit.run_id = run_id``, or
                the store cannot be read.
        """
        try:
            tagged = self._tagged_runs(run_id, 2)
            run = tagged[0] if len(tagged) == 1 else None if tagged else self._run_by_mlflow_id(run_id)
        except MirrorError as exc:
            raise VerificationError(str(exc)) from exc
        if len(tagged) > 1:
            raise VerificationError(
                f"more than one MLflow run at {redact_credentials(self.tracking_uri)} is tagged {RUN_ID_TAG} = "
                f"{run_id!r} (e.g. {tagged[0].info.run_id} and {tagged[1].info.run_id}): refusing to choose one, since "
                "any user who may edit the experiment can plant a copy; give the MLflow run id, or the run's folder")
        if run is None:
            raise VerificationError(f"MLflow run {run_id!r} not found at {redact_credentials(self.tracking_uri)} "
                                    f"(neither a run tagged {RUN_ID_TAG} = {run_id!r} nor an MLflow run id)")
        return run

    def _tagged_runs(self, run_id: str, limit: int) -> list[Run]:
        """Up to ``limit`` runs of this mirror's experiment tagged ``dpaudit.run_id = run_id``, oldest first."""
        try:
            experiment = self.client.get_experiment_by_name(self.experiment)
            if experiment is None or not is_run_id(run_id):  # no quote can reach the filter string
                return []
            return list(self.client.search_runs([experiment.experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'",
                                                max_results=limit, order_by=["attributes.start_time ASC"]))
        except Exception as exc:
            raise MirrorError(f"cannot search MLflow at {self.tracking_uri} for run {run_id!r}: {exc}") from exc

    def _run_by_mlflow_id(self, run_id: str) -> Run | None:
        try:
            return self.client.get_run(run_id)
        except MlflowException:
            return None
        except Exception as exc:
            raise MirrorError(f"cannot read MLflow run {run_id!r} at {self.tracking_uri}: {exc}") from exc

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        """Set run tags (e.g. the certified claim at close), in calls of at most MLflow's per-call limit.

        Raises:
            InvalidParameter: tags that are not str -> str, or hold a confidential key.
            MirrorError: MLflow could not be written.
        """
        tags = _string_map("tags", tags)
        check_public(tags, self.confidential_keys, f"run {run_id} tags")
        entries = [RunTag(k, v) for k, v in tags.items()]
        try:
            for start in range(0, len(entries), MAX_PARAMS_TAGS_PER_BATCH):
                self.client.log_batch(run_id, tags=entries[start:start + MAX_PARAMS_TAGS_PER_BATCH])
        except Exception as exc:
            raise MirrorError(f"cannot tag MLflow run {run_id}: {exc}") from exc

    # --- records ----------------------------------------------------------------------------------------------

    def _state(self, run_id: str) -> _RunState:
        state = self._runs.get(run_id)
        if state is None:
            state = self._runs[run_id] = _RunState(marks=None)
        return state

    def _read_marks(self, run_id: str) -> dict[str, int]:
        try:
            tags = self.client.get_run(run_id).data.tags
        except Exception as exc:
            raise MirrorError(f"cannot read MLflow run {run_id}: {exc}") from exc
        try:
            return {stream: int(tags.get(key, "-1")) for stream, key in MARK_TAGS.items()}
        except ValueError as exc:
            raise MirrorError(f"MLflow run {run_id} has a corrupted mark tag: {exc}") from exc

    def record(self, run_id: str, record: Mapping[str, Any], spent_epsilon: float | None, *, key: str = SPENT_KEY,
               burn_down_only: bool = False) -> None:
        """Buffer one ledger record for ``run_id`` (written when the run's buffer is full, or on flush).

        Records must reach one run in ledger order; one at or below the run's stored mark is a replay and is
        skipped. A failed automatic write is remembered, not raised: :meth:`flush` / :meth:`end_run` raise it.

        Args:
            run_id: the MLflow run (session or trial).
            record: the ledger record.
            spent_epsilon: ε spent after it, or None; plotted for open / charge / close records (ε remaining is
                the budget param minus it, so it is not logged).
            key: the burn-down metric's key (:func:`~dpaudit.tracking.entities.spent_key`).
            burn_down_only: send only the burn-down point (a trial's charge, for the session run).

        Raises:
            InvalidParameter: malformed record, a confidential key in it, or a non-finite number to mirror.
        """
        entities = _entities(record, spent_epsilon, self.confidential_keys, key, burn_down_only)
        with self._lock:
            state = self._state(run_id)
            if state.marks is not None and entities.ordinal <= state.marks[RECORDS]:
                return
            state.records.setdefault(entities.ordinal, entities)
            self._maybe_flush(run_id, state)

    def log_public_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        """Buffer metrics computed on public data only (e.g. accuracy on a public test set) for ``run_id``.

        Raises:
            InvalidParameter: bad, reserved or confidential metric names, non-finite values, or a bad step.
            MirrorError: the run's marks could not be read (a run this mirror did not start).
        """
        with self._lock:
            state = self._state(run_id)
            if state.marks is None:
                state.marks = self._read_marks(run_id)
                state.drop_through_marks()
            entities = public_metric_entities(state.next_public, metrics, step, int(time.time() * 1000),
                                              self.confidential_keys)
            state.public.append(entities)
            state.next_public += 1
            self._maybe_flush(run_id, state)

    def _maybe_flush(self, run_id: str, state: _RunState) -> None:
        if state.pending() >= self.batch_size and state.failure is None:
            with contextlib.suppress(MirrorError):  # kept in state.failure; flush() and end_run() raise it
                self._flush_run(run_id, state)

    def _flush_run(self, run_id: str, state: _RunState) -> None:
        if state.marks is None:
            try:
                state.marks = self._read_marks(run_id)
            except MirrorError as exc:
                state.failure = exc
                raise
        state.drop_through_marks()
        for batch in plan_batches(state.items(), MARK_TAGS):
            try:
                self.client.log_batch(run_id, metrics=list(batch.metrics), tags=list(batch.tags))
            except Exception as exc:
                state.marks = None  # the call may have been applied, wholly or in part: re-read before retrying
                state.failure = exc
                raise MirrorError(
                    f"cannot write {state.pending()} ledger items to MLflow run {run_id} at {self.tracking_uri}: "
                    f"{exc}. The ledger is complete; flush again or resync the run from the ledger."
                ) from exc
            for stream, entities in batch.items:
                state.marks[stream] = max(state.marks[stream], entities.ordinal)
            state.drop_through_marks()
        state.failure = None

    def failure(self) -> Exception | None:
        """The failure of an automatic write that :meth:`record` kept (a run's buffer is waiting), or None."""
        with self._lock:
            return next((s.failure for s in self._runs.values() if s.failure is not None), None)

    def unwritten(self) -> set[int]:
        """The ``seq`` of every buffered ledger record not yet written, over all runs."""
        with self._lock:
            return {seq for state in self._runs.values() for seq in state.records}

    def flush(self) -> None:
        """Write every buffered item of every run.

        Raises:
            MirrorError: some run could not be written (the others were); its items stay buffered.
        """
        failed = []
        with self._lock:
            for run_id, state in list(self._runs.items()):
                if state.pending() or state.failure is not None:
                    try:
                        self._flush_run(run_id, state)
                    except MirrorError as exc:
                        failed.append(exc)
        if failed:
            raise MirrorError("; ".join(str(e) for e in failed)) from failed[0]

    def resync(self, run_id: str, records: Sequence[Mapping[str, Any]], spent: Sequence[float | None], *,
               key: str = SPENT_KEY, burn_down_only: frozenset[int] = frozenset()) -> int:
        """Catch ``run_id`` up with ``records`` (e.g. the whole ledger); idempotent.

        Reads the run's stored mark, mirrors the records above it and writes them at once.

        Args:
            run_id: the run.
            records: ledger records, in ledger order.
            spent: ε spent after each record (None where unknown).
            key: the burn-down metric's key.
            burn_down_only: ``seq`` of the records of which only the burn-down point is sent (a trial's charges).

        Returns:
            How many of ``records`` were newly mirrored.

        Raises:
            InvalidParameter: lengths differ, or a record is refused (nothing is written then).
            MirrorError: MLflow could not be read or written.
        """
        if len(spent) != len(records):
            raise InvalidParameter(f"resync needs one spent value per record: {len(records)} records, "
                                   f"{len(spent)} spent")
        built = [_entities(r, s, self.confidential_keys, key, r.get("seq") in burn_down_only)
                 for r, s in zip(records, spent, strict=True)]
        with self._lock:
            state = self._state(run_id)
            state.marks = self._read_marks(run_id)
            state.drop_through_marks()
            new = {e.ordinal for e in built if e.ordinal > state.marks[RECORDS]}
            for entities in built:
                if entities.ordinal in new:
                    state.records.setdefault(entities.ordinal, entities)
            self._flush_run(run_id, state)
        return len(new)

    # --- artifacts --------------------------------------------------------------------------------------------

    def log_artifacts(self, run_id: str, paths: Sequence[Path], artifact_path: str | None = None) -> None:
        """Attach files (ledger, certificate, report) or folders to the run.

        Raises:
            InvalidParameter: a path does not exist.
            MirrorError: the artifact store could not be written.
        """
        paths = [Path(p) for p in paths]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise InvalidParameter(f"cannot attach missing files {missing}")
        try:
            for path in paths:
                if path.is_dir():
                    self.client.log_artifacts(run_id, str(path), artifact_path)
                else:
                    self.client.log_artifact(run_id, str(path), artifact_path)
        except Exception as exc:
            raise MirrorError(f"cannot attach artifacts to MLflow run {run_id}: {exc}") from exc

    def download_artifacts(self, run: str | Run, dst: Path) -> Path:
        """Download all of the run's artifacts into ``dst`` and return the local folder (for ``dpaudit verify``).

        Args:
            run: a dpaudit run id or an MLflow run id (:meth:`find_run`), or a run :meth:`find_run` returned.
            dst: the folder to download into.

        Raises:
            VerificationError: no such run, or its artifacts cannot be read.
        """
        found = (run if isinstance(run, Run) else self.find_run(run)).info.run_id
        dst = Path(dst)
        dst.mkdir(parents=True, exist_ok=True)
        try:
            return Path(self.client.download_artifacts(found, "", str(dst)))
        except Exception as exc:
            raise VerificationError(redact_credentials(f"cannot download the artifacts of MLflow run {found}: {exc}")
                                    ) from exc
