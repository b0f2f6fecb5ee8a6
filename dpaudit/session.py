"""The audited session: the only door through which a plugin or a user touches private data.

The path of one release (DESIGN.md): build the :class:`~dpaudit.events.PrivacyEvent` → the budget filter
admits it or raises :class:`~dpaudit.errors.BudgetExceeded` → a fsynced ``charge`` record is appended to the
ledger (write-ahead: before any noise exists) → noise is drawn with an exact sampler from a secure source → a
fsynced ``release`` record holding the noisy output is appended → the output is returned. Records are mirrored
to MLflow in batches, after the session's lock is released (:mod:`dpaudit.tracking.session_mirror`). Closing the
session composes every charge into a signed certificate. Selection helpers (AboveThreshold rounds, the
repeat-and-select commitment) live in :mod:`dpaudit.selection`, record bodies in :mod:`dpaudit.records`.

Example:
    >>> from dpaudit import Session
    >>> with Session(epsilon=1.0, delta=1e-6, name="my-study") as s:      # doctest: +SKIP
    ...     m = s.laplace(value, sensitivity=1.0, epsilon=0.1)
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.accounting import DEFAULT_ACCOUNTANT, get_accountant
from dpaudit.accounting.filters import DEFAULT_FILTER_ORDERS, FILTER_NAME, FILTER_VERSION
from dpaudit.budget import AdaptiveBudgetFilter, Admission, BudgetFilter, Snapshot
from dpaudit.coverage import (
    AboveThresholdRound,
    CoverageState,
    after_claim,
    after_release,
    after_round_start,
    next_query,
    unused,
)
from dpaudit.data.access import open_data
from dpaudit.data.catalog import DataSet
from dpaudit.data.sources import DataSource, declare_sources
from dpaudit.errors import AccountingError, DPAuditError, InvalidParameter, UncoveredRelease, UnsupportedEvent
from dpaudit.events import (
    ExponentialEvent,
    LaplaceEvent,
    PrivacyEvent,
    compose,
    neighbouring_of,
)
from dpaudit.head import write_head
from dpaudit.ledger import MAX_BODY_DEPTH, Ledger, Record
from dpaudit.lifecycle import exit_status
from dpaudit.mechanisms import above_threshold, exponential, gaussian, laplace, private_inputs, randomized_response
from dpaudit.mechanisms.above_threshold import AboveThreshold
from dpaudit.mechanisms.randomness import RandomSource, SecureRandom
from dpaudit.mechanisms.repeat_and_select import repeat_and_select_event, sample_repetitions
from dpaudit.nist_fields import NOT_DECLARED, NOT_STATED, declarations
from dpaudit.plugin_session import PluginSession, check_plugin_identity
from dpaudit.provenance import code_version, dpaudit_version
from dpaudit.public_values import CONFIDENTIAL_KEYS, check_public
from dpaudit.records import CHARGE, FINISHED, ChargeBody, CloseBody, InfoBody, OpenBody, RecordBody, ReleaseBody
from dpaudit.recovery import finish_close
from dpaudit.resume import ResumePoint, check_accounting, check_resumable, point_of, resume_info, resumed_coverage
from dpaudit.selection import (
    AboveThresholdRounds,
    AuditedAboveThreshold,
    commit_repetitions,
)
from dpaudit.sensitivity import Neighbouring, Norm, Sensitivity, declared
from dpaudit.sidecar import wants_sidecar, write_array
from dpaudit.signing import load_or_create_key, public_key_fingerprint
from dpaudit.tracking.confidential import LOCATION, ConfidentialLog
from dpaudit.tracking.session_mirror import new_run_id, open_session_mirror
from dpaudit.validation import check_delta, check_epsilon, check_finite

__all__ = ["AboveThresholdRounds", "AuditedAboveThreshold", "Charge", "Session"]  # views from dpaudit.selection


@dataclass(frozen=True)
class Charge:
    """A charged event: the ledger sequence number of its ``charge`` record and the event itself."""

    seq: int
    event: PrivacyEvent
    plugin: str
    mechanism: str


def _as_sensitivity(sensitivity: float | Sensitivity, norm: Norm, mechanism: str) -> Sensitivity:
    if isinstance(sensitivity, Sensitivity):
        return sensitivity
    return declared(sensitivity, norm, f"bound passed as a number to Session.{mechanism}()")


def _admitted(decide: Callable[[PrivacyEvent, Snapshot], Any], event: PrivacyEvent, snapshot: Snapshot) -> Any:
    """``decide(event, snapshot)`` (a filter's ``admit_fast`` or ``admit_slow``); an arithmetic fault of an accountant
    on extreme parameters (e.g. exp(ε) for ε = 1e308) is a refusal, not a crash.

    Raises:
        AccountingError: the bound overflowed or divided by zero (nothing is charged).
    """
    try:
        return decide(event, snapshot)
    except ArithmeticError as exc:
        raise AccountingError(f"no privacy bound computable for this event ({exc}); nothing was charged") from None


def _check_name(what: str, value: object) -> None:
    """A plugin or mechanism name is a non-empty string (checked before anything is charged or written)."""
    if not isinstance(value, str) or not value:
        raise InvalidParameter(f"{what} must be a non-empty string, got {value!r}")


def _jsonable(value: Any) -> Any:
    """A JSON-safe copy of a released output (numpy arrays and scalars become lists and floats)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _budget_filter(epsilon: float, delta: float, accountant: str | None, adaptive: bool,
                   filter_orders: Sequence[float] | None
                   ) -> tuple[BudgetFilter | AdaptiveBudgetFilter, dict[str, str], dict[str, Any] | None]:
    """The session's budget filter and what the ``open`` record says about its accounting: the accountant's name and
    version, and the Rényi filter's description for an adaptive session (None otherwise).

    Raises:
        InvalidParameter: an accountant named for an adaptive session, orders for a fixed one, bad orders.
    """
    if not adaptive:
        if filter_orders is not None:
            raise InvalidParameter("filter_orders applies to an adaptive session only (adaptive=True)")
        chosen = get_accountant(accountant or DEFAULT_ACCOUNTANT)
        return BudgetFilter(epsilon, delta, chosen), {"name": chosen.name, "version": chosen.version()}, None
    if accountant is not None:
        raise InvalidParameter(f"an adaptive session is accounted by its Renyi filter, not by the {accountant!r} "
                               "accountant (the fixed-parameter accountants need parameters fixed in advance)")
    adaptive_filter = AdaptiveBudgetFilter(epsilon, delta, DEFAULT_FILTER_ORDERS if filter_orders is None
                                           else filter_orders)
    return adaptive_filter, {"name": FILTER_NAME, "version": FILTER_VERSION}, adaptive_filter.filter.to_dict()


class Session:
    """An audited differentially private session with a budget fixed before any data is touched.

    Args:
        epsilon: ε_B of the whole session (> 0).
        delta: δ_B of the whole session, in (0, 1).
        name: human-readable name (MLflow run name).
        neighbouring: ``"add_remove"`` or ``"replace_one"``; every charged event must use it.
        protected: names of the data sets the guarantee protects (stated in the certificate); when neither it nor
            ``data`` names one, an unnamed ``"private data set"``.
        public: names of data used without privacy protection (e.g. a public test set), stated as such.
        data: the user's own data sets (:mod:`dpaudit.data.sources`: ``dpaudit.data.csv(...)``, ``parquet``,
            ``arrays``, ``torch_dataset``), loaded and checked before anything is written; each name is added to
            ``protected`` or ``public`` by its role, and ``session.data(name)`` returns it.
        accountant: name of the accountant whose bound is certified (default: the tightest sound one); not with
            ``adaptive``.
        rng: randomness source; :class:`SecureRandom` by default. A seeded source marks the certificate
            "not for release".
        store: run store root (default ``$DPAUDIT_HOME`` or ``./dpaudit_runs``).
        tracking_uri: MLflow tracking URI (default ``$MLFLOW_TRACKING_URI`` or the embedded SQLite store); a
            tracking server (``http(s)://``) needs credentials in the environment, else the session is refused
            with ``InvalidParameter`` before its ledger exists (:func:`dpaudit.tracking.store.check_credentials`).
        mirror: mirror the ledger into MLflow (default True).
        confidential: allow :meth:`log_confidential` (raw values in the run's own 0600 file, outside MLflow).
        signing_key: path of the Ed25519 key that signs the certificate (default ``<store>/keys/``).
        adaptive: admit charges whose privacy parameters depend on earlier noisy outputs, through a Rényi filter
            (:class:`~dpaudit.budget.AdaptiveBudgetFilter`); the certificate then claims the budget (ε_B, δ_B) and
            drops the ``privacy-parameters-fixed-in-advance`` assumption. Releases without a Rényi-DP bound are
            refused. Default False: the tighter fixed-parameter accountants, with that assumption.
        filter_orders: the filter's orders (integers ≥ 2 of the RDP grid; default
            :data:`~dpaudit.accounting.filters.DEFAULT_FILTER_ORDERS`); only with ``adaptive``.
        other_releases: the other releases made from the same data, outside this run (NIST SP 800-226; stated in
            the certificate, default "none declared").
        data_custody: who holds the raw data, where, and who may access it (stated in the certificate, default
            "not stated").
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        name: str = "dpaudit-session",
        *,
        neighbouring: Neighbouring | str = Neighbouring.ADD_REMOVE,
        protected: Sequence[str] | None = None,
        public: Sequence[str] = (),
        data: Sequence[DataSource] = (),
        accountant: str | None = None,
        rng: RandomSource | None = None,
        store: Path | str | None = None,
        tracking_uri: str | None = None,
        mirror: bool = True,
        confidential: bool = False,
        signing_key: Path | str | None = None,
        adaptive: bool = False,
        filter_orders: Sequence[float] | None = None,
        other_releases: str = NOT_DECLARED,
        data_custody: str = NOT_STATED,
    ) -> None:
        epsilon = check_epsilon(epsilon, "budget epsilon")
        delta = check_delta(delta, "budget delta", allow_zero=False)
        try:
            self.neighbouring = Neighbouring(neighbouring)
        except ValueError:
            raise InvalidParameter(
                f"neighbouring must be 'add_remove' or 'replace_one', got {neighbouring!r}") from None
        # the user's own data sets are loaded and checked now, before the ledger exists (dpaudit/data/sources.py)
        declared = declarations(other_releases, data_custody)
        named, public, self.data_sources = declare_sources(data, () if protected is None else protected, public)
        protected = named if named or protected is not None else ("private data set",)  # none named: one unnamed
        if not protected:
            raise InvalidParameter("name at least one protected data set")
        self.name = name
        self.protected = tuple(protected)
        self.public = tuple(public)
        self.rng = rng if rng is not None else SecureRandom()
        self._filter, accounted_by, adaptive_filter = _budget_filter(epsilon, delta, accountant, adaptive,
                                                                      filter_orders)
        self._root = run_store.store_root(store)
        self._key_path = Path(signing_key) if signing_key else run_store.default_key_path(self._root)
        # the key and the store id are fixed at open: the open record, the MLflow tag and the certificate name them
        self._key = load_or_create_key(self._key_path)
        self.key_fingerprint = public_key_fingerprint(self._key)
        self.store_id = run_store.load_or_create_store_id(self._root)
        self._charges: dict[int, Charge] = {}
        self._keys: dict[str, int] = {}  # a budget authority's idempotency key → its charge's seq (under the lock)
        self._closed = False
        self._close_status = ""  # the status the close record was written with
        self._certificate: dict[str, Any] | None = None  # set once every close step has succeeded
        self._plugins: dict[str, str] = {}
        self._touched: dict[str, tuple[str, ...]] = {}  # plugin → the protected data sets it has accessed, in order
        # what each charge has used of what it covers, and the live AboveThreshold rounds (their noisy thresholds),
        # keyed by charge seq; private, changed only under the filter lock (dpaudit/coverage.py)
        self._coverage: dict[int, CoverageState] = {}
        self._rounds: dict[tuple[int, int], AboveThreshold] = {}
        # training runs begun under a claim made for another trainer (start_claimed_run), by charge seq
        self._claimed_runs: dict[int, int] = {}
        # the run id is ours, not MLflow's; the mirror (a no-op when off) connects lazily in its own worker thread,
        # so opening imports no MLflow: records are queued under the lock and sent by that thread
        self.run_id = new_run_id()
        self._tracking = open_session_mirror(mirror, tracking_uri, self.run_id)
        self.run_dir = self._root / self.run_id
        self._ledger = Ledger.create(self.run_dir / run_store.LEDGER)
        # raw values, only on request, in their own 0600 file: never in the MLflow store that `dpaudit ui` serves
        self._confidential = ConfidentialLog(self.run_dir) if confidential else None
        self._append(OpenBody(
            name=name, run_id=self.run_id, store_id=self.store_id, signing_key_fingerprint=self.key_fingerprint,
            budget={"epsilon": epsilon, "delta": delta}, neighbouring=self.neighbouring.value,
            protected=self.protected, public=self.public, accountant=accounted_by, adaptive=adaptive_filter,
            randomness=self.rng.describe(), dpaudit_version=dpaudit_version(), code_version=code_version(),
            confidential_log=bool(confidential), declarations=declared))

    @classmethod
    def resume(cls, run_id: str, *, store: Path | str | None = None, signing_key: Path | str | None = None,
               rng: RandomSource | None = None, mirror: bool = False, tracking_uri: str | None = None) -> Session:
        """Reopen the unclosed run ``run_id`` of the store (its process was killed) and continue it.

        The ledger is read and its chain verified (a torn final append is cut off and kept aside,
        :meth:`~dpaudit.ledger.Ledger.open`); the budget, accountant, relation and data-set names come from its
        ``open`` record (the accountant's name and version, and the adaptive filter, must be this dpaudit's:
        :func:`dpaudit.resume.check_accounting`), and the filter is rebuilt by committing every charged event in
        ledger order. The ledger must reach the run's signed head checkpoint (:mod:`dpaudit.head`), so a ledger cut
        at a record boundary is refused; then admission and the certificate compose the charges the run made (a
        consistent rollback of the whole run folder, ledger and checkpoint, is not detectable locally). Every charge
        stays counted, released or not. An ``info`` record naming the records it continues and the charges never
        released (:func:`dpaudit.resume.resume_info`) is appended first. Charges made before the restart are
        reachable only by :meth:`charge_at` and may release only what their coverage has left
        (:func:`dpaudit.resume.resumed_coverage`: no training run or AboveThreshold round of theirs runs again). Not
        carried over: the user's own data sources (catalog data sets stay reachable through :meth:`data`) and plugin
        versions registered before the restart. With ``mirror`` the MLflow mirror continues: its worker first
        catches the session run up with every record before the restart (the run found by its tag, or created), then
        sends the resumed session's records as they are appended; without it, ``dpaudit mirror sync RUN`` does the
        same after the close.

        Args:
            run_id: the run's id in the store.
            store: the run store (default ``$DPAUDIT_HOME`` or ``./dpaudit_runs``).
            signing_key: the key the ``open`` record names (default the store's); any other is refused.
            rng: the randomness source (default :class:`SecureRandom`); it must describe itself as the ``open``
                record's does, except that a seeded run needs an explicit ``SeededRandom`` with a seed the run has
                not used (the same seed would replay noise already released).
            mirror: continue the MLflow mirror (default off: a resumed process connects nowhere unless asked).
            tracking_uri: the MLflow store (default as for a new session); only with ``mirror``.

        Raises:
            InvalidParameter: no such run, a run with a close record, another key, another kind of randomness (or
                a reused seed), or another accountant version (``dpaudit recover RUN`` closes it as it stands).
            LedgerError: the ledger is damaged, names another run id or store than the folder's, or ends before its
                signed head checkpoint (or the checkpoint is missing or not signed by the run key).
        """
        root = run_store.store_root(store)
        run_dir = run_store.run_folder(root, run_id)
        if not (run_dir / run_store.LEDGER).is_file():
            raise InvalidParameter(f"no run {run_id!r} in the store {root} (no {run_store.LEDGER})")
        key_path = Path(signing_key) if signing_key else run_store.default_key_path(root)
        rng = rng if rng is not None else SecureRandom()
        tracking = open_session_mirror(mirror, tracking_uri, run_id)  # a refused URI stops before anything is read
        key, opened = check_resumable(run_dir, root, key_path, rng.describe())  # nothing is written before the checks
        self = cls.__new__(cls)
        self.rng = rng
        self._filter, accounted_by, adaptive_filter = _budget_filter(
            opened.epsilon, opened.delta, None if opened.adaptive else opened.accountant["name"],
            opened.adaptive is not None, None if opened.adaptive is None else opened.adaptive["orders"])
        check_accounting(run_id, opened, accounted_by, adaptive_filter)
        ledger = Ledger.open(run_dir / run_store.LEDGER)
        try:
            point = self._rebuild(point_of(run_dir, ledger.records()))
        except BaseException:
            ledger.close()
            raise
        opened = point.opened
        self.neighbouring = Neighbouring(opened.neighbouring)
        self.name, self.protected, self.public, self.data_sources = opened.name, opened.protected, opened.public, {}
        self._root, self._key_path, self._key = root, key_path, key
        self.key_fingerprint = public_key_fingerprint(key)
        self.store_id = opened.store_id or run_store.load_or_create_store_id(root)
        self._closed, self._close_status, self._certificate = False, "", None
        self._plugins, self._rounds = {}, {}
        self.run_id, self.run_dir, self._ledger = run_id, run_dir, ledger
        self._tracking = tracking
        self._confidential = ConfidentialLog(run_dir) if opened.confidential_log else None
        tracking.catch_up(ledger.records())
        self.record_info("session", resume_info(point, ledger.recovery, rng.describe()))
        return self

    def _rebuild(self, point: ResumePoint) -> ResumePoint:
        """The charges, keys, coverage and data accesses of a resumed session, and its (new, empty) filter's
        state, from its ledger (for :meth:`resume`).

        Raises:
            LedgerError, DPAuditError: a charge record that does not decode.
        """
        self._charges, self._keys, self._coverage, self._touched = {}, {}, {}, {}
        # a claimed run may have been trained before the restart: none starts again (as resumed_coverage's claims)
        self._claimed_runs = {seq: 1 << 62 for seq, _ in point.charges}
        for seq, body in point.charges:  # the filter, charges and coverage an uninterrupted run would hold now
            event = body.privacy_event()
            self._filter.commit(event, Admission(body.epsilon_spent, body.bound_source))
            self._charges[seq] = Charge(seq, event, body.plugin, body.mechanism)
            if body.key is not None:
                self._keys[body.key] = seq
            state = resumed_coverage(event, point.released.get(seq, ()))
            if state is not None:
                self._coverage[seq] = state
            touched = self._touched.get(body.plugin, ())
            self._touched[body.plugin] = (*touched, *(d for d in body.data if d not in touched))
        return point

    def charge_at(self, seq: int) -> Charge:
        """The charge this session holds whose ``charge`` record has sequence number ``seq`` (one made before a
        :meth:`resume` included; what it may still release is its coverage, :meth:`coverage`).

        Raises:
            InvalidParameter: no charge of this session has that sequence number.
        """
        with self._locked():
            charge = self._charges.get(seq)
        if charge is None:
            raise InvalidParameter(f"no charge with sequence number {seq!r} in this session")
        return charge

    # --- context management -----------------------------------------------------------------------------------

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Close with the status of how the block ended (:func:`dpaudit.lifecycle.exit_status`): ``FINISHED``, or
        ``ABORTED`` (interrupted), ``REFUSED`` (bad input, over budget), ``FAILED``, which are not for release."""
        self.close(status=exit_status(exc_type))

    # --- state ------------------------------------------------------------------------------------------------

    @property
    def budget(self) -> tuple[float, float]:
        """(ε_B, δ_B), fixed when the session opened."""
        return self._filter.epsilon, self._filter.delta

    @property
    def ledger_path(self) -> Path:
        return self._ledger.path

    @property
    def certificate_path(self) -> Path:
        return self.run_dir / run_store.CERTIFICATE

    @property
    def device(self):  # -> torch.device
        """The torch device for GP and training work: CUDA when available, else the CPU."""
        import torch

        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def spent_epsilon(self) -> float:
        """Upper bound on ε (at δ_B) of everything charged so far.

        In an adaptive session: the smallest budget its Rényi filter would have needed so far, information only; with
        adaptively chosen parameters only the budget itself is certified (docs/accounting.md).
        """
        return self._filter.spent

    def remaining_epsilon(self) -> float:
        return max(0.0, self._filter.epsilon - self._filter.spent)

    # --- the audited path -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The session's lock (the filter lock, re-entrant).

        Ledger appends, admissions and coverage changes happen under this lock; records are only queued for the
        MLflow mirror under it and sent by the mirror's own worker thread (:mod:`dpaudit.tracking.session_mirror`),
        so a slow MLflow server never blocks a thread's charge.
        """
        with self._filter.lock:
            yield

    def _append(self, body: RecordBody, written: Callable[[], None] | None = None) -> Record:
        """Append one record and queue it for the mirror, under the session's lock.

        The lock makes "is the session open?", the append and the queueing one step (queue order is ledger order,
        so every MLflow run receives its records in ledger order). The body is checked for confidential keys first
        (:func:`dpaudit.public_values.check_public`), whatever the mirror setting: a refused body writes nothing.

        ``written`` updates the session's state for the record (a release's coverage, the closed flag). It runs as
        soon as the record is durable, before the signed head is written, so the state always follows the ledger:
        a head that cannot be written (a full disk, no file descriptor left) raises with the record counted, and a
        retried release is refused instead of releasing a second output under one charge. (The record is then not
        queued for the mirror: ``dpaudit mirror sync`` sends it. Queueing stays after the head's file I/O, which
        releases the GIL: a mirror worker started on the open record would otherwise begin importing MLflow while
        the session still opens.)

        Raises:
            InvalidParameter: the body holds a confidential key (e.g. ``true_value``).
            DPAuditError: the session is closed.
            OSError: the head could not be written (the record is in the ledger and counted).
        """
        described = body.to_dict()
        check_public(described, CONFIDENTIAL_KEYS, f"{body.TYPE} record")
        with self._locked():
            self._check_open()
            record = self._ledger.append(body.TYPE, described)
            if written is not None:
                written()
            write_head(self.run_dir, self.run_id, record, self._key)  # after the fsync: never ahead of the ledger
            self._tracking.enqueue(record, self._filter.spent)
        return record

    def _check_open(self) -> None:
        if self._closed:
            raise DPAuditError("session is closed; open a new Session")

    def charge(self, event: PrivacyEvent, *, plugin: str, mechanism: str,
               imputation: private_inputs.Imputation | None = None, key: str | None = None) -> Charge:
        """Reserve budget for ``event`` and write its ``charge`` record, before any noise is drawn.

        ``imputation`` is the public rule the release applies to its private numbers (the session's own mechanisms
        pass :data:`~dpaudit.mechanisms.private_inputs.RULE`); it is recorded in the charge record, the same for
        every such charge whatever the data. ``key`` is a budget authority's idempotency key
        (:mod:`dpaudit.authority`), recorded in the charge record and unique in the session (kept through
        :meth:`resume`): a charge with a key already charged for the same event, plugin and mechanism returns that
        charge and writes nothing; for another request it is refused.

        Raises:
            BudgetExceeded: the composed ε would exceed the budget; nothing is charged or written.
            UnsupportedEvent: wrong neighbouring relation, or the accountant cannot bound the event.
            InvalidParameter: a bad name or key, or a key charged before for another request.
        """
        self._check_open()
        if not isinstance(event, PrivacyEvent):
            raise InvalidParameter(f"charge needs a PrivacyEvent, got {type(event).__name__}")
        _check_name("plugin", plugin)
        _check_name("mechanism", mechanism)
        if key is not None:
            _check_name("key", key)
        relation = neighbouring_of(event)
        if relation is not self.neighbouring:
            raise UnsupportedEvent(
                f"event is about {relation.value} neighbours but the session protects {self.neighbouring.value}"
            )
        described = event.to_dict()
        check_public(described, CONFIDENTIAL_KEYS, "charge record")
        body = {"event": described, "plugin": plugin, "mechanism": mechanism,
                "imputation": None if imputation is None else imputation.to_dict(),
                "data": self._touched.get(plugin, ()), "key": key}  # data: the protected sets the plugin accessed
        while True:  # the expensive bound is computed on a snapshot without the lock (dpaudit/budget.py)
            with self._locked():
                self._check_open()
                known = self._keyed(key, body)
                if known is not None:
                    return known
                snapshot = self._filter.snapshot()
                admission = _admitted(self._filter.admit_fast, event, snapshot)
                if admission is not None:
                    return self._commit_charge(event, body, admission)
            try:
                admission = _admitted(self._filter.admit_slow, event, snapshot)
            except DPAuditError:
                with self._locked():
                    if self._filter.is_current(snapshot):
                        raise
                continue  # decided on events that are no longer all: decide again
            with self._locked():
                self._check_open()
                known = self._keyed(key, body)
                if known is not None:
                    return known
                if self._filter.is_current(snapshot):
                    return self._commit_charge(event, body, admission)

    def _keyed(self, key: str | None, body: Mapping[str, Any]) -> Charge | None:
        """The charge already made with ``key`` (under the held lock): a retry of the same request gets it back;
        None for no key or a new one.

        Raises:
            InvalidParameter: ``key`` was charged for another event, plugin or mechanism.
        """
        seq = None if key is None else self._keys.get(key)
        if seq is None:
            return None
        charge = self._charges[seq]
        if (canonical.encode(charge.event.to_dict()), charge.plugin, charge.mechanism) != (
                canonical.encode(body["event"]), body["plugin"], body["mechanism"]):
            raise InvalidParameter(f"key {key!r} was charged (charge {seq}) for another event, plugin or mechanism: "
                                   "a key names one reservation")
        return charge

    def keyed_charge(self, key: str) -> Charge | None:
        """The charge made with idempotency key ``key`` (:meth:`charge`), None if there is none."""
        with self._locked():
            seq = self._keys.get(key)
            return None if seq is None else self._charges[seq]

    def keyed_seqs(self) -> tuple[tuple[str, int], ...]:
        """(key, charge seq) of every charge made with an idempotency key, in charge order."""
        with self._locked():
            return tuple(sorted(self._keys.items(), key=lambda item: item[1]))

    def _commit_charge(self, event: PrivacyEvent, body: dict[str, Any], admission: Any) -> Charge:
        """Append the charge record and commit ``event`` to the filter, in one step under the held lock."""
        record = self._ledger.append(CHARGE, ChargeBody(**body, epsilon_spent=admission.epsilon,
                                                        bound_source=admission.source).to_dict())
        # counted as soon as it is durable, before the head (see _append): a failed head write leaves it spent
        self._filter.commit(event, admission)
        charge = Charge(record.seq, event, body["plugin"], body["mechanism"])
        self._charges[record.seq] = charge
        if body["key"] is not None:
            self._keys[body["key"]] = record.seq
        write_head(self.run_dir, self.run_id, record, self._key)
        self._tracking.enqueue(record, self._filter.spent)
        return charge

    def holds(self, charge: Charge) -> bool:
        """Whether ``charge`` was made by this (open) session."""
        return not self._closed and self._charges.get(charge.seq) is charge

    def record_release(self, charge: Charge, output: Any) -> None:
        """Write the ``release`` record of a charged event's (noisy, public) output, fsynced, before returning it.

        The output must be one the charge covers (:mod:`dpaudit.coverage`): one output of the charged dimension for
        Laplace and Gaussian, one index for the exponential mechanism, one model for a DP-SGD charge, one selected
        output for a repeat-and-select. The check and the append are one step under the session's lock, so
        concurrent releases on one charge cannot both pass.

        Raises:
            InvalidParameter: the charge was not made by this session, or the output holds a confidential key.
            UncoveredRelease: the charge's outputs are already released, the output has another shape than the
                one charged, the charge has no release rule, or it is an AboveThreshold charge (whose answers only
                :meth:`AuditedAboveThreshold.test` releases). Nothing is written.
        """
        with self._locked():
            if isinstance(self.coverage(charge).coverage.unit, AboveThresholdRound):
                raise UncoveredRelease(f"charge {charge.seq} is an AboveThreshold charge: its answers are released "
                                       "only by the rounds the session runs (AboveThresholdRounds.next_round)")
            self._release(charge, output)

    def _release(self, charge: Charge, output: Any) -> None:
        """Check that ``charge`` covers ``output``, append its release record and count it, in one locked step.

        A large numeric array is written to a sidecar file (:mod:`dpaudit.sidecar`), fsynced after the coverage
        check and before the record that names its hash.
        """
        sidecar = wants_sidecar(output)
        body = ReleaseBody(charge_seq=charge.seq, plugin=charge.plugin, mechanism=charge.mechanism,
                           label=getattr(charge.event, "label", ""), output=None if sidecar else _jsonable(output))
        with self._locked():
            self._check_open()
            used = self._covered(charge, lambda state: after_release(state, output if sidecar else body.output))
            if sidecar:
                body = replace(body, output_file=write_array(self.run_dir, output))
            self._append(body, lambda: self._coverage.__setitem__(charge.seq, used))

    def coverage(self, charge: Charge) -> CoverageState:
        """What ``charge`` covers and what of it is used so far (an immutable snapshot; see :mod:`dpaudit.coverage`).

        Raises:
            InvalidParameter: the charge was not made by this session.
            UncoveredRelease: the charged event has no release rule (a composition of different events).
        """
        with self._locked():
            return self._covered(charge, lambda state: state)

    def claim(self, charge: Charge) -> None:
        """Start one training run under ``charge`` (e.g. an envelope charged before a private selection).

        A DP-SGD charge covers one run: the first claim succeeds, every later one is refused. The check and the
        count are one step under the session's lock, so of several threads claiming one charge exactly one wins.
        Call it before the run touches any data.

        Raises:
            InvalidParameter: the charge was not made by this session.
            UncoveredRelease: the charge is not a training charge, or its run(s) already started.
        """
        with self._locked():
            self._check_open()
            self._coverage[charge.seq] = self._covered(charge, after_claim)

    def start_claimed_run(self, charge: Charge) -> None:
        """Begin the training run that ``charge``'s claim (:meth:`claim`, made by the caller of a trainer, e.g. the
        driver of parallel trials) covers: each claim starts one run, so a trainer handed a claimed charge trains
        once, however often it is called with it.

        Raises:
            InvalidParameter: the charge was not made by this session.
            UncoveredRelease: the charge was not claimed, or every run claimed under it has begun (before a
                :meth:`resume` included).
        """
        with self._locked():
            self._check_open()
            state = self._covered(charge, lambda state: state)
            begun = self._claimed_runs.get(charge.seq, 0)
            if begun >= state.claims:
                raise UncoveredRelease(f"charge {charge.seq} ({charge.mechanism}): {state.claims} run(s) claimed and "
                                       f"{min(begun, state.claims)} begun under the claim: a claimed charge trains one "
                                       "run per claim")
            self._claimed_runs[charge.seq] = begun + 1

    def _covered(self, charge: Charge, step: Any) -> Any:
        """``step`` applied to ``charge``'s coverage state (caller holds the lock); errors name the charge."""
        if not isinstance(charge, Charge):
            raise InvalidParameter(f"expected a Charge made by this session, got {type(charge).__name__}")
        if self._charges.get(charge.seq) is not charge:
            raise InvalidParameter(f"charge {charge.seq} was not made by this session")
        try:
            state = self._coverage.get(charge.seq) or unused(charge.event)
            return step(state)
        except UncoveredRelease as exc:
            raise UncoveredRelease(f"charge {charge.seq} ({charge.mechanism}): {exc}") from None

    def _start_round(self, charge: Charge, threshold: float) -> int:
        """Start the next charged AboveThreshold round of ``charge``: draw its noisy threshold, keep it here.

        Returns:
            The round's index (for :class:`~dpaudit.selection.AuditedAboveThreshold`).
        """
        threshold = check_finite("threshold", threshold)
        with self._locked():
            self._check_open()
            started, index = self._covered(charge, after_round_start)
            self._rounds[(charge.seq, index)] = above_threshold.start_round(charge.event, threshold, self.rng)
            self._coverage[charge.seq] = started
        return index

    def _answer(self, charge: Charge, round_index: int, value: float) -> bool:
        """Answer one query of a started round: check coverage, draw the query noise, write the answer, return it."""
        with self._locked():
            self._check_open()
            private_inputs.check_query(value)
            query = self._covered(charge, lambda state: next_query(state, round_index))
            mechanism = self._rounds.get((charge.seq, round_index))
            if mechanism is None:
                raise UncoveredRelease(f"charge {charge.seq}: round {round_index} was not started by this session")
            above = mechanism.test(private_inputs.into_domain(value))
            self._release(charge, {"round": round_index, "query": query, "above": bool(above)})
        return above

    def record_info(self, plugin: str, body: Mapping[str, Any]) -> None:
        """Record public information (e.g. a realised iteration count); it is never used for accounting.

        Raises:
            InvalidParameter: the body holds a confidential key, or is nested far deeper than a record may be
                (nothing is written, whatever the mirror setting).
            LedgerError: the body is not canonical-JSON encodable, or nested deeper than
                :data:`dpaudit.ledger.MAX_BODY_DEPTH` levels (nothing is written).
        """
        self._check_open()
        _check_name("plugin", plugin)
        if not isinstance(body, Mapping):
            raise InvalidParameter(f"an info body must be a mapping, got {type(body).__name__}")
        try:
            info = _jsonable(dict(body))
        except RecursionError as exc:
            raise InvalidParameter(f"an info body nested thousands of levels deep (a record body may nest at most "
                                   f"{MAX_BODY_DEPTH}); nothing was written") from exc
        self._append(InfoBody(plugin=plugin, info=info))

    def register_plugin(self, name: str, version: str) -> None:
        """Note a plugin (and its version) that acts in this session; it is listed in the certificate."""
        self._plugins[name] = version

    def log_public_artifact(self, name: str, data: bytes, *, plugin: str = "session") -> None:
        """Attach a file of PUBLIC content only (e.g. a plot of released values) to the session's MLflow run, under
        ``plugins/<plugin>/``; the ledger records its name, size and SHA-256 (an ``info`` record), not its bytes.

        Raises:
            InvalidParameter: ``name`` is not a plain file name (letters, digits, ``._-``; at most 100
                characters), or ``data`` is not bytes (nothing is written).
        """
        self._check_open()
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):
            raise InvalidParameter(f"an artifact name must be a plain file name, got {name!r}")
        if not isinstance(data, (bytes, bytearray)):
            raise InvalidParameter(f"artifact data must be bytes, got {type(data).__name__}")
        _check_name("plugin", plugin)
        artifact_path = f"plugins/{plugin}"
        self.record_info(plugin, {"public_artifact": {"name": name, "bytes": len(data), "artifact_path": artifact_path,
                                                      "sha256": hashlib.sha256(data).hexdigest()}})
        self._tracking.log_public_artifact(name, bytes(data), artifact_path)

    def log_public_metrics(self, metrics: Mapping[str, float], step: int = 0, *, plugin: str = "session") -> None:
        """Mirror metrics computed on PUBLIC data only (e.g. accuracy on a public test set)."""
        self._check_open()
        self.record_info(plugin, {"public_metrics": dict(metrics), "step": step})
        self._tracking.log_public_metrics(metrics, step)

    def log_confidential(self, values: Mapping[str, float], step: int = 0) -> None:
        """Log raw, NON-private values into the run's confidential log, ``<run>/confidential/log.sqlite`` (mode
        0600; never mirrored to MLflow, never exported), only if enabled at open.

        Raises:
            DPAuditError: confidential logging is off.
            InvalidParameter: an empty mapping, a bad name or step, or a non-finite value.
        """
        if self._confidential is None:
            raise DPAuditError("confidential logging is off: open the Session with confidential=True (values "
                               "logged there are not differentially private and are outside the release)")
        self._confidential.log(self.name, values, step)

    def trial(self, name: str, params: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[None]:
        """Mirror the records made inside the ``with`` block to a nested MLflow run (one tuning trial).

        Args:
            name: the nested run's name.
            params: the trial's hyperparameters (public: e.g. ``{"lr": 0.1, "C": 1.0}``), logged as the nested
                run's MLflow params so that trials can be compared in the UI.

        Raises:
            InvalidParameter: an empty name, or params that are not a mapping of valid keys to strings, finite
                numbers, bools or None, or that hold a confidential key (checked before anything is mirrored).
        """
        return self._tracking.trial(name, params)

    # --- mechanisms: thin calls into dpaudit/mechanisms/<name>.py (event, calibration, release) -----------------

    def laplace(self, value: Any, sensitivity: float | Sensitivity, epsilon: float, *, label: str = "",
                grid: float | None = None, plugin: str = "session") -> Any:
        """Release ``value`` (a number or array) with discrete Laplace noise; ε-DP for L1 sensitivity Δ."""
        event = self.laplace_event(sensitivity, epsilon, dimension=private_inputs.check_value(value), label=label,
                                   grid=grid)
        charge = self.charge(event, plugin=plugin, mechanism="laplace", imputation=private_inputs.RULE)
        out = laplace.release(event, private_inputs.into_domain(value), self.rng)
        self.record_release(charge, out)
        return out

    def laplace_event(self, sensitivity: float | Sensitivity, epsilon: float, *, dimension: int = 1,
                      label: str = "", grid: float | None = None) -> LaplaceEvent:
        """The event :meth:`laplace` charges for a ``dimension``-coordinate release (for :meth:`check_affordable`)."""
        return laplace.laplace_event(self.neighbouring, _as_sensitivity(sensitivity, Norm.L1, "laplace"), epsilon,
                                     dimension=dimension, label=label, grid=grid)

    def gaussian(self, value: Any, sensitivity: float | Sensitivity, epsilon: float, delta: float, *,
                 label: str = "", grid: float | None = None, plugin: str = "session") -> Any:
        """Release ``value`` with discrete Gaussian noise calibrated to (ε, δ) for L2 sensitivity Δ."""
        event = gaussian.gaussian_event(self.neighbouring, _as_sensitivity(sensitivity, Norm.L2, "gaussian"), epsilon,
                                        delta, dimension=private_inputs.check_value(value), label=label, grid=grid)
        charge = self.charge(event, plugin=plugin, mechanism="gaussian", imputation=private_inputs.RULE)
        out = gaussian.release(event, private_inputs.into_domain(value), self.rng)
        self.record_release(charge, out)
        return out

    def exponential(self, scores: Sequence[float], sensitivity: float | Sensitivity, epsilon: float, *,
                    monotone: bool = False, label: str = "", plugin: str = "session") -> int:
        """Choose a candidate index with the exponential mechanism (exact sampler); ε-DP.

        ``monotone=True`` halves the noise (rate ε/Δ instead of ε/(2Δ)) on the caller's word that every score moves in
        the same direction between neighbours; dpaudit cannot check that, so the event then carries the conditional
        assumption :data:`~dpaudit.events.MONOTONE_SCORES`, listed in the certificate.
        """
        n_candidates = private_inputs.check_scores(scores)
        event = self.exponential_event(sensitivity, epsilon, n_candidates=n_candidates, monotone=monotone,
                                       label=label)
        charge = self.charge(event, plugin=plugin, mechanism="exponential", imputation=private_inputs.RULE)
        # exact: ints and Fractions are not rounded to floats (the sampler is exact on them)
        index = exponential.release(event, private_inputs.into_domain(scores), self.rng)
        self.record_release(charge, index)
        return index

    def exponential_event(self, sensitivity: float | Sensitivity, epsilon: float, *, n_candidates: int,
                          monotone: bool = False, label: str = "") -> ExponentialEvent:
        """The event :meth:`exponential` charges for ``n_candidates`` candidates (for :meth:`check_affordable`)."""
        return exponential.exponential_event(self.neighbouring, _as_sensitivity(sensitivity, Norm.L1, "exponential"),
                                             epsilon, n_candidates=n_candidates, monotone=monotone, label=label)

    def randomized_response(self, bit: bool, epsilon: float, *, label: str = "", plugin: str = "session") -> bool:
        """Release one bit by randomized response (Warner 1965): kept with probability e^ε/(1 + e^ε); ε-DP.

        The ledger records the reported bit as the index 0 or 1.

        Raises:
            InvalidParameter: ``bit`` is not a bool (checked before anything is charged).
        """
        if not isinstance(bit, (bool, np.bool_)):
            raise InvalidParameter(f"randomized_response needs a bool, got {bit!r}")
        event = randomized_response.randomized_response_event(self.neighbouring, epsilon, label=label)
        charge = self.charge(event, plugin=plugin, mechanism="randomized_response")
        reported = randomized_response.release(event, bool(bit), self.rng)
        self.record_release(charge, int(reported))
        return reported

    def above_threshold(self, threshold: float, sensitivity: float | Sensitivity, epsilon: float, *,
                        max_queries: int, label: str = "", grid: float | None = None,
                        plugin: str = "session") -> AuditedAboveThreshold:
        """Start one AboveThreshold run charged ε; each answer is written to the ledger before it is returned."""
        check_finite("threshold", threshold)  # public: refused before the charge
        rounds = self.above_threshold_rounds(sensitivity, epsilon, max_queries=max_queries, rounds=1, label=label,
                                             grid=grid, plugin=plugin)
        return rounds.next_round(threshold)

    def above_threshold_rounds(self, sensitivity: float | Sensitivity, epsilon: float, *, max_queries: int,
                               rounds: int, label: str = "", grid: float | None = None,
                               plugin: str = "session") -> AboveThresholdRounds:
        """Charge up to ``rounds`` AboveThreshold runs at once, before any of them starts.

        The charge is the ``rounds``-fold composition of an ε-DP AboveThreshold, fixed up front: a loop that stops
        early (a data-dependent stopping time, e.g. Ding et al. 2023, Alg. 1) is still charged for every round
        (the realised count is information only). Each round's threshold is given when the round starts and must
        be public (chosen from earlier noisy outputs or fixed in advance).
        """
        event = self.above_threshold_rounds_event(sensitivity, epsilon, max_queries=max_queries, rounds=rounds,
                                                  label=label, grid=grid)
        return AboveThresholdRounds(self, self.charge(event, plugin=plugin, mechanism="above_threshold",
                                                      imputation=private_inputs.RULE))

    def above_threshold_rounds_event(self, sensitivity: float | Sensitivity, epsilon: float, *, max_queries: int,
                                     rounds: int, label: str = "", grid: float | None = None) -> PrivacyEvent:
        """The event :meth:`above_threshold_rounds` charges, calibrated, not charged (for :meth:`check_affordable`)."""
        return above_threshold.above_threshold_event(
            self.neighbouring, _as_sensitivity(sensitivity, Norm.L1, "above_threshold"), epsilon,
            max_queries=max_queries, rounds=rounds, label=label, grid=grid)

    def check_affordable(self, events: Sequence[PrivacyEvent]) -> float:
        """Check, without charging, that ``events`` together fit what is left of the budget.

        A plugin that will charge several events (e.g. a final training's envelope and T_max tuning rounds) calls
        this first, so that a plan the budget cannot pay for is refused before anything is charged or computed.
        Charges made in between by other threads can still make a later charge fail.

        Returns:
            The filter's upper bound on the composed ε if every event were charged.

        Raises:
            BudgetExceeded: the plan does not fit (nothing is charged).
        """
        self._check_open()
        if isinstance(events, PrivacyEvent) or not isinstance(events, Sequence) or not events:
            raise InvalidParameter("check_affordable needs a non-empty sequence of events")
        for event in events:
            if not isinstance(event, PrivacyEvent):
                raise InvalidParameter(f"check_affordable needs PrivacyEvents, got {type(event).__name__}")
            relation = neighbouring_of(event)
            if relation is not self.neighbouring:
                raise UnsupportedEvent(f"event is about {relation.value} neighbours but the session protects "
                                       f"{self.neighbouring.value}")
        candidate = compose(list(events))
        with self._filter.lock:
            snapshot = self._filter.snapshot()
            admission = _admitted(self._filter.admit_fast, candidate, snapshot)
        if admission is None:  # the expensive bound, without the lock
            admission = _admitted(self._filter.admit_slow, candidate, snapshot)
        return admission.epsilon

    def repeat_and_select(self, base_event: PrivacyEvent, distribution: str, params: Mapping[str, float], *,
                          plugin: str, label: str = "") -> tuple[Charge, int]:
        """Charge a repeat-and-select of ``base_event``, then draw the number of repetitions K (exactly).

        The :class:`~dpaudit.events.RepeatAndSelectEvent` is charged before K is drawn and before any repetition
        runs. The caller then runs K repetitions of a mechanism whose privacy is dominated by ``base_event``,
        charging nothing else for them, and releases (``record_release`` on the returned charge) only the best
        output under a fixed public total order; for the Poisson law K may be 0 (release that nothing was chosen).

        K is returned but **never released**: Papernot & Steinke's and Liu & Talwar's bounds cover the best output
        alone. Revealing K (or any non-selected output, or anything whose size or count grows with K) is not
        covered: given K = k the best of k runs of an ε-DP mechanism can have privacy loss kε. K is *recorded* as
        a hiding commitment: one ``info`` record (whatever K is) holds sha256 of the canonical JSON of K and a
        256-bit random salt; the opening is written to ``<run>/confidential/repetitions-<seq>.json``, which is
        neither mirrored nor exported, so the run's owner can later prove K to an auditor entitled to see it.

        The ledger's clock is frozen right after the charge record, before K is drawn
        (:meth:`~dpaudit.ledger.Ledger.freeze_clock`): every later record of the session, the release and the close
        included, carries the charge's time, so the exported ledger and the certificate's ``closed_at`` do not
        reveal how long the K repetitions took. The commitment record says so. What an observer sees outside the
        evidence (wall-clock time, the MLflow run's own start and end times and upload times) is not covered: the
        caller keeps it secret or accepts it.

        Args:
            base_event: one full run (e.g. a DP-SGD training's event).
            distribution: ``"geometric"``, ``"truncated_negative_binomial"`` (whole η ≥ 1 for sampling) or
                ``"poisson"``.
            params: the law's parameters (``{"gamma": γ}``, ``{"eta": η, "gamma": γ}`` or ``{"mu": μ}``).
            plugin: the charging plugin's name.
            label: public description.

        Returns:
            (the charge, K).

        Raises:
            InvalidParameter: bad law parameters, or a law without an exact sampler (checked before charging).
            BudgetExceeded: the budget cannot pay for it (nothing is charged, K is not drawn).
        """
        event = repeat_and_select_event(base_event, distribution, params, label)
        charge = self.charge(event, plugin=plugin, mechanism="repeat_and_select")
        frozen_at = self._ledger.freeze_clock()  # before K exists: no record time after this depends on K
        repetitions = sample_repetitions(distribution, event.parameters(), self.rng)
        self.record_info(plugin, commit_repetitions(self.run_dir, charge.seq, repetitions, self.rng, frozen_at))
        return charge, repetitions

    # --- closing ----------------------------------------------------------------------------------------------

    def close(self, status: str = FINISHED) -> dict[str, Any]:
        """Close the ledger, build and sign the certificate, write it (and the report) and mirror them.

        ``status`` is how the run ended (:mod:`dpaudit.records`: ``FINISHED``, ``FAILED``, ``ABORTED``,
        ``REFUSED``); only a ``FINISHED`` run's certificate is for release. Leaving a ``with`` block picks it.

        Idempotent and retryable: the ``close`` record is appended once (with the first call's ``status``); each
        later step (certificate and public key, the store's transparency-log entry, the reports;
        :func:`dpaudit.recovery.finish_close`) is done only where missing or stale. After a failure (a full disk,
        a kill) calling ``close()`` again, or ``dpaudit recover RUN`` from another process, finishes the run without
        duplicating anything; once every step has succeeded, later calls return the same certificate. An MLflow
        failure is only a warning (``dpaudit mirror sync RUN`` completes the mirror later).

        Raises:
            LedgerError: the close record or the log entry could not be written (call again to finish).
            OSError: the certificate or a report could not be written (call again to finish).
        """
        if self._certificate is not None:
            return self._certificate
        with self._locked():  # the close record and the flag are one step: no release slips in after close
            if not self._closed:
                self._append(CloseBody(status=status, charges=len(self._charges)),
                             lambda: self._mark_closed(status))
        self._ledger.close()
        certificate, _ = finish_close(self.run_dir, self._root, self._ledger.records(), self._key,
                                      plugins=self._plugins,
                                      confidential_log=None if self._confidential is None else LOCATION)
        self._tracking.finish(self._ledger, self.run_dir, self._close_status)
        self._certificate = certificate
        return certificate

    def _mark_closed(self, status: str) -> None:
        self._closed, self._close_status = True, status

    @property
    def close_status(self) -> str:
        """The status the ``close`` record was written with (``""`` while no close record exists)."""
        return self._close_status

    @property
    def certified(self) -> bool:
        """Whether every close step has succeeded (certificate, log entry, reports)."""
        return self._certificate is not None

    # --- plugin view and data ---

    def for_plugin(self, name: str, version: str) -> PluginSession:
        """Register the plugin ``name`` at ``version`` (listed in the certificate) and return its view of the session.

        Every charge, release, info record and data access made through the view is attributed to the plugin
        (:class:`~dpaudit.plugin_session.PluginSession`). A plugin registers once: asking again with the same version
        returns another view, with another version is refused.

        Raises:
            InvalidParameter: a bad name or version, the reserved name ``"session"``, or another version of a plugin
                already registered.
            DPAuditError: the session is closed.
        """
        check_plugin_identity(name, version)
        with self._filter.lock:
            self._check_open()
            known = self._plugins.get(name)
            if known is not None and known != version:
                raise InvalidParameter(f"plugin {name!r} is registered at version {known!r}, not {version!r}")
            self._plugins[name] = version
        return PluginSession(self, name, version)

    def data(self, name: str, *, plugin: str = "session", **parameters: Any) -> DataSet:
        """The data set ``name`` (declared at open as protected or public), its access recorded as ``info``.

        The only way a plugin obtains data (:func:`dpaudit.data.access.open_data`; docs/data.md, "Data through the
        session"); ``parameters`` are the catalog entry's public loader parameters (e.g. ``rows``).

        Raises:
            InvalidParameter: a name the session did not declare or the catalog does not know, a bad parameter.
        """
        self._check_open()
        data = open_data(self, name, parameters, plugin)
        if name in self.protected:
            with self._locked():
                touched = self._touched.get(plugin, ())
                self._touched[plugin] = touched if name in touched else (*touched, name)
        return data

    # --- training the user's own model (dpaudit/privacy_engine.py) ---

    @property
    def accountant(self):  # -> Accountant | None
        """The accountant whose bound the certificate states; None in an adaptive session (its Rényi filter)."""
        return getattr(self._filter, "accountant", None)

    def make_private(self, **kwargs: Any) -> tuple[Any, ...]:
        """Opacus's ``make_private`` for the caller's own model, loss, optimizer and loop, charged to this session
        before it returns: ``PrivacyEngine(session).make_private(**kwargs)``
        (:meth:`dpaudit.privacy_engine.PrivacyEngine.make_private`; docs/opacus.md). The model is released after
        the last planned step; to stop earlier and release, use a :class:`~dpaudit.privacy_engine.PrivacyEngine`.
        """
        from dpaudit.privacy_engine import PrivacyEngine

        return PrivacyEngine(self).make_private(**kwargs)
