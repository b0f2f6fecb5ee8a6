"""The audited session: the only door through which a plugin or a user touches private data.

The path of one release (DESIGN.md): build the :class:`~dpaudit.events.PrivacyEvent` → the budget filter
admits it or raises :class:`~dpaudit.errors.BudgetExceeded` → a fsynced ``charge`` record is appended to the
ledger (write-ahead: before any noise exists) → noise is drawn with an exact sampler from a secure source → a
fsynced ``release`` record holding the noisy output is appended → the output is returned. Records are mirrored
to MLflow in batches. Closing the session composes every charge into a signed certificate.

Example:
    >>> from dpaudit import Session
    >>> with Session(epsilon=1.0, delta=1e-6, name="my-study") as s:      # doctest: +SKIP
    ...     m = s.laplace(value, sensitivity=1.0, epsilon=0.1)
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import canonical, transparency
from dpaudit import store as run_store
from dpaudit.accounting import DEFAULT_ACCOUNTANT, get_accountant
from dpaudit.accounting.filters import DEFAULT_FILTER_ORDERS, FILTER_NAME, FILTER_VERSION
from dpaudit.budget import AdaptiveBudgetFilter, BudgetFilter
from dpaudit.certificate import build_certificate, write_certificate
from dpaudit.coverage import (
    AboveThresholdRound,
    CoverageState,
    RoundState,
    after_claim,
    after_release,
    after_round_start,
    next_query,
    unused,
)
from dpaudit.errors import DPAuditError, InvalidParameter, UncoveredRelease, UnsupportedEvent
from dpaudit.events import (
    AboveThresholdEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatAndSelectEvent,
    SelfComposedEvent,
    compose,
    neighbouring_of,
)
from dpaudit.ledger import Ledger, Record
from dpaudit.mechanisms import calibration
from dpaudit.mechanisms.above_threshold import AboveThreshold
from dpaudit.mechanisms.additive import release_gaussian, release_laplace
from dpaudit.mechanisms.exponential import sample_exponential
from dpaudit.mechanisms.randomness import RandomSource, SecureRandom
from dpaudit.mechanisms.repetitions import sample_repetitions
from dpaudit.provenance import code_version, dpaudit_version
from dpaudit.public_values import CONFIDENTIAL_KEYS, check_public
from dpaudit.sensitivity import Neighbouring, Norm, Sensitivity, declared
from dpaudit.signing import load_or_create_key, public_key_fingerprint
from dpaudit.validation import check_count, check_delta, check_epsilon


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
                   filter_orders: Sequence[float] | None) -> tuple[BudgetFilter | AdaptiveBudgetFilter, dict[str, Any]]:
    """The session's budget filter and what the ``open`` record says about its accounting.

    Raises:
        InvalidParameter: an accountant named for an adaptive session, orders for a fixed one, bad orders.
    """
    if not adaptive:
        if filter_orders is not None:
            raise InvalidParameter("filter_orders applies to an adaptive session only (adaptive=True)")
        chosen = get_accountant(accountant or DEFAULT_ACCOUNTANT)
        return (BudgetFilter(epsilon, delta, chosen),
                {"accountant": {"name": chosen.name, "version": chosen.version()}})
    if accountant is not None:
        raise InvalidParameter(f"an adaptive session is accounted by its Renyi filter, not by the {accountant!r} "
                               "accountant (the fixed-parameter accountants need parameters fixed in advance)")
    adaptive_filter = AdaptiveBudgetFilter(epsilon, delta, DEFAULT_FILTER_ORDERS if filter_orders is None
                                           else filter_orders)
    return adaptive_filter, {"accountant": {"name": FILTER_NAME, "version": FILTER_VERSION},
                             "adaptive": adaptive_filter.filter.to_dict()}


class Session:
    """An audited differentially private session with a budget fixed before any data is touched.

    Args:
        epsilon: ε_B of the whole session (> 0).
        delta: δ_B of the whole session, in (0, 1).
        name: human-readable name (MLflow run name).
        neighbouring: ``"add_remove"`` or ``"replace_one"``; every charged event must use it.
        protected: names of the data sets the guarantee protects (stated in the certificate).
        public: names of data used without privacy protection (e.g. a public test set), stated as such.
        accountant: name of the accountant whose bound is certified (default: the tightest sound one); not with
            ``adaptive``.
        rng: randomness source; :class:`SecureRandom` by default. A seeded source marks the certificate
            "not for release".
        store: run store root (default ``$DPAUDIT_HOME`` or ``./dpaudit_runs``).
        tracking_uri: MLflow tracking URI (default ``$MLFLOW_TRACKING_URI`` or the embedded SQLite store).
        mirror: mirror the ledger into MLflow (default True).
        confidential: allow :meth:`log_confidential` (raw values in a separate, marked MLflow experiment).
        signing_key: path of the Ed25519 key that signs the certificate (default ``<store>/keys/``).
        adaptive: admit charges whose privacy parameters depend on earlier noisy outputs, through a Rényi filter
            (:class:`~dpaudit.budget.AdaptiveBudgetFilter`); the certificate then claims the budget (ε_B, δ_B) and
            drops the ``privacy-parameters-fixed-in-advance`` assumption. Releases without a Rényi-DP bound are
            refused. Default False: the tighter fixed-parameter accountants, with that assumption.
        filter_orders: the filter's orders (integers ≥ 2 of the RDP grid; default
            :data:`~dpaudit.accounting.filters.DEFAULT_FILTER_ORDERS`); only with ``adaptive``.
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        name: str = "dpaudit-session",
        *,
        neighbouring: Neighbouring | str = Neighbouring.ADD_REMOVE,
        protected: Sequence[str] = ("private data set",),
        public: Sequence[str] = (),
        accountant: str | None = None,
        rng: RandomSource | None = None,
        store: Path | str | None = None,
        tracking_uri: str | None = None,
        mirror: bool = True,
        confidential: bool = False,
        signing_key: Path | str | None = None,
        adaptive: bool = False,
        filter_orders: Sequence[float] | None = None,
    ) -> None:
        epsilon = check_epsilon(epsilon, "budget epsilon")
        delta = check_delta(delta, "budget delta", allow_zero=False)
        try:
            self.neighbouring = Neighbouring(neighbouring)
        except ValueError:
            raise InvalidParameter(
                f"neighbouring must be 'add_remove' or 'replace_one', got {neighbouring!r}") from None
        if not protected:
            raise InvalidParameter("name at least one protected data set")
        self.name = name
        self.protected = tuple(protected)
        self.public = tuple(public)
        self.rng = rng if rng is not None else SecureRandom()
        self._filter, accounting = _budget_filter(epsilon, delta, accountant, adaptive, filter_orders)
        self._root = run_store.store_root(store)
        self._key_path = Path(signing_key) if signing_key else run_store.default_key_path(self._root)
        # the key and the store id are fixed at open: the open record, the MLflow tag and the certificate name them
        self._key = load_or_create_key(self._key_path)
        self.key_fingerprint = public_key_fingerprint(self._key)
        self.store_id = run_store.load_or_create_store_id(self._root)
        self._charges: dict[int, Charge] = {}
        self._mirror = None
        self._mirror_error: Exception | None = None
        self._confidential = None
        self._closed = False
        self._plugins: dict[str, str] = {}
        # what each charge has used of what it covers, and the live AboveThreshold rounds (their noisy thresholds),
        # keyed by charge seq; private, changed only under the filter lock (dpaudit/coverage.py)
        self._coverage: dict[int, CoverageState] = {}
        self._rounds: dict[tuple[int, int], AboveThreshold] = {}
        self._trial_run: str | None = None
        self._mirrored_to: dict[int, str] = {}  # ledger seq -> the MLflow run (session or trial) it belongs to

        if mirror:
            from dpaudit.tracking import KEY_FINGERPRINT_TAG, MlflowMirror, resolve_tracking_uri

            self._mirror = MlflowMirror(resolve_tracking_uri(tracking_uri), experiment="dpaudit")
            self.run_id = self._mirror.start_run(
                name, params={"budget_epsilon": str(epsilon), "budget_delta": str(delta),
                              "neighbouring": self.neighbouring.value, "accountant": accounting["accountant"]["name"]},
                tags={"dpaudit.protected": ", ".join(self.protected), "dpaudit.for_release": str(self.rng.for_release),
                      KEY_FINGERPRINT_TAG: self.key_fingerprint},
            )
            if confidential:
                from dpaudit.tracking import ConfidentialLog

                self._confidential = ConfidentialLog(self._mirror, "dpaudit")
        else:
            self.run_id = uuid.uuid4().hex
        self.run_dir = self._root / self.run_id
        self._ledger = Ledger.create(self.run_dir / run_store.LEDGER)
        self._append("open", {
            "name": name,
            "run_id": self.run_id,
            "store_id": self.store_id,
            "signing_key_fingerprint": self.key_fingerprint,
            "budget": {"epsilon": epsilon, "delta": delta},
            "neighbouring": self.neighbouring.value,
            "protected": list(self.protected),
            "public": list(self.public),
            **accounting,
            "randomness": self.rng.describe(),
            "dpaudit_version": dpaudit_version(),
            "code_version": code_version(),
            "confidential_log": bool(confidential),
        })

    # --- context management -----------------------------------------------------------------------------------

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(status="FAILED" if exc_type is not None else "FINISHED")

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

    def _append(self, kind: str, body: dict[str, Any]) -> Record:
        """Append one record and mirror it, under the session's lock (the filter lock).

        One lock orders ledger appends and their mirroring (a run must receive its records in ledger order), and
        makes "is the session open?" and the append one step. The body is checked for confidential keys first
        (:func:`dpaudit.public_values.check_public`), whatever the mirror setting: a refused body writes nothing.

        Raises:
            InvalidParameter: the body holds a confidential key (e.g. ``true_value``).
            DPAuditError: the session is closed.
        """
        check_public(body, CONFIDENTIAL_KEYS, f"{kind} record")
        with self._filter.lock:
            self._check_open()
            record = self._ledger.append(kind, body)
            self._mirror_record(record)
        return record

    def _mirror_record(self, record: Record) -> None:
        """Mirror one record to the current run (caller holds the filter lock)."""
        run = self._trial_run or self.run_id
        self._mirrored_to[record.seq] = run
        if self._mirror is None or self._mirror_error is not None:
            return
        try:
            self._mirror.record(run, asdict(record), self._filter.spent)
        except Exception as exc:  # the ledger is the source of truth; the mirror catches up on close
            self._mirror_error = exc

    def _check_open(self) -> None:
        if self._closed:
            raise DPAuditError("session is closed; open a new Session")

    def charge(self, event: PrivacyEvent, *, plugin: str, mechanism: str) -> Charge:
        """Reserve budget for ``event`` and write its ``charge`` record, before any noise is drawn.

        Raises:
            BudgetExceeded: the composed ε would exceed the budget; nothing is charged or written.
            UnsupportedEvent: wrong neighbouring relation, or the accountant cannot bound the event.
        """
        self._check_open()
        if not isinstance(event, PrivacyEvent):
            raise InvalidParameter(f"charge needs a PrivacyEvent, got {type(event).__name__}")
        relation = neighbouring_of(event)
        if relation is not self.neighbouring:
            raise UnsupportedEvent(
                f"event is about {relation.value} neighbours but the session protects {self.neighbouring.value}"
            )
        described = event.to_dict()
        check_public(described, CONFIDENTIAL_KEYS, "charge record")
        with self._filter.lock:
            self._check_open()
            admission = self._filter.admit(event)
            record = self._ledger.append("charge", {
                "event": described, "plugin": plugin, "mechanism": mechanism,
                "epsilon_spent": admission.epsilon, "bound_source": admission.source,
            })
            self._filter.commit(event, admission)
            charge = Charge(record.seq, event, plugin, mechanism)
            self._charges[record.seq] = charge
            self._mirror_record(record)
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
        with self._filter.lock:
            if isinstance(self.coverage(charge).coverage.unit, AboveThresholdRound):
                raise UncoveredRelease(f"charge {charge.seq} is an AboveThreshold charge: its answers are released "
                                       "only by the rounds the session runs (AboveThresholdRounds.next_round)")
            self._release(charge, output)

    def _release(self, charge: Charge, output: Any) -> None:
        """Check that ``charge`` covers ``output``, append its release record and count it, in one locked step."""
        body = {"charge_seq": charge.seq, "plugin": charge.plugin, "mechanism": charge.mechanism,
                "label": getattr(charge.event, "label", ""), "output": _jsonable(output)}
        with self._filter.lock:
            self._check_open()
            used = self._covered(charge, lambda state: after_release(state, body["output"]))
            self._append("release", body)
            self._coverage[charge.seq] = used

    def coverage(self, charge: Charge) -> CoverageState:
        """What ``charge`` covers and what of it is used so far (an immutable snapshot; see :mod:`dpaudit.coverage`).

        Raises:
            InvalidParameter: the charge was not made by this session.
            UncoveredRelease: the charged event has no release rule (a composition of different events).
        """
        with self._filter.lock:
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
        with self._filter.lock:
            self._check_open()
            self._coverage[charge.seq] = self._covered(charge, after_claim)

    def _covered(self, charge: Charge, step: Any) -> Any:
        """``step`` applied to ``charge``'s coverage state (caller holds the lock); errors name the charge."""
        if self._charges.get(charge.seq) is not charge:
            raise InvalidParameter(f"charge {charge.seq} was not made by this session")
        try:
            state = self._coverage.get(charge.seq) or unused(charge.event)
            return step(state)
        except UncoveredRelease as exc:
            raise UncoveredRelease(f"charge {charge.seq} ({charge.mechanism}): {exc}") from None

    def _start_round(self, charge: Charge, threshold: float) -> AuditedAboveThreshold:
        """Start the next charged AboveThreshold round of ``charge``: draw its noisy threshold, keep it here."""
        with self._filter.lock:
            self._check_open()
            started, index = self._covered(charge, after_round_start)
            leaf = next(charge.event.leaves())[0]  # an AboveThreshold charge is one leaf, self-composed
            assert isinstance(leaf, AboveThresholdEvent)
            self._rounds[(charge.seq, index)] = AboveThreshold(threshold, leaf.threshold_scale, leaf.query_scale,
                                                               leaf.grid, leaf.max_queries, self.rng)
            self._coverage[charge.seq] = started
        return AuditedAboveThreshold(self, charge, index)

    def _answer(self, charge: Charge, round_index: int, value: float) -> bool:
        """Answer one query of a started round: check coverage, draw the query noise, write the answer, return it."""
        with self._filter.lock:
            self._check_open()
            query = self._covered(charge, lambda state: next_query(state, round_index))
            mechanism = self._rounds.get((charge.seq, round_index))
            if mechanism is None:
                raise UncoveredRelease(f"charge {charge.seq}: round {round_index} was not started by this session")
            above = mechanism.test(value)
            self._release(charge, {"round": round_index, "query": query, "above": bool(above)})
        return above

    def record_info(self, plugin: str, body: Mapping[str, Any]) -> None:
        """Record public information (e.g. a realised iteration count); it is never used for accounting.

        Raises:
            InvalidParameter: the body holds a confidential key (nothing is written, whatever the mirror setting).
        """
        self._check_open()
        self._append("info", {"plugin": plugin, "info": _jsonable(dict(body))})

    def register_plugin(self, name: str, version: str) -> None:
        """Note a plugin (and its version) that acts in this session; it is listed in the certificate."""
        self._plugins[name] = version

    def log_public_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Mirror metrics computed on PUBLIC data only (e.g. accuracy on a public test set)."""
        self._check_open()
        self.record_info("session", {"public_metrics": dict(metrics), "step": step})
        if self._mirror is not None and self._mirror_error is None:
            try:
                self._mirror.log_public_metrics(self._trial_run or self.run_id, dict(metrics), step)
            except Exception as exc:
                self._mirror_error = exc

    def log_confidential(self, values: Mapping[str, float], step: int = 0) -> None:
        """Log raw, NON-private values into the separate confidential experiment (only if enabled at open)."""
        if self._confidential is None:
            raise DPAuditError("confidential logging is off: open the Session with confidential=True (values "
                               "logged there are not differentially private and are outside the release)")
        self._confidential.log(self.name, dict(values), step)

    @contextlib.contextmanager
    def trial(self, name: str) -> Iterator[None]:
        """Mirror the records made inside the block to a nested MLflow run (one tuning trial)."""
        if self._mirror is None:
            yield
            return
        previous = self._trial_run
        self._trial_run = self._mirror.start_run(name, params={}, tags={}, parent_run_id=self.run_id)
        try:
            yield
        finally:
            self._mirror.end_run(self._trial_run)
            self._trial_run = previous

    # --- mechanisms -------------------------------------------------------------------------------------------

    def laplace(self, value: Any, sensitivity: float | Sensitivity, epsilon: float, *, label: str = "",
                grid: float | None = None) -> Any:
        """Release ``value`` (a number or array) with discrete Laplace noise; ε-DP for L1 sensitivity Δ."""
        event = self.laplace_event(sensitivity, epsilon, dimension=int(np.size(value)), label=label, grid=grid)
        charge = self.charge(event, plugin="session", mechanism="laplace")
        out = release_laplace(value, event.scale, event.grid, self.rng)
        self.record_release(charge, out)
        return out

    def laplace_event(self, sensitivity: float | Sensitivity, epsilon: float, *, dimension: int = 1,
                      label: str = "", grid: float | None = None) -> LaplaceEvent:
        """The event :meth:`laplace` charges for a ``dimension``-coordinate release (for :meth:`check_affordable`)."""
        sens = _as_sensitivity(sensitivity, Norm.L1, "laplace")
        epsilon = check_epsilon(epsilon)
        grid = grid if grid is not None else calibration.default_grid(sens.value)
        scale = calibration.calibrate_laplace_scale(epsilon, sens.value, grid, dimension)
        return LaplaceEvent(neighbouring=self.neighbouring, sensitivity=sens, label=label, epsilon=epsilon,
                            scale=scale, grid=grid, dimension=dimension)

    def gaussian(self, value: Any, sensitivity: float | Sensitivity, epsilon: float, delta: float, *,
                 label: str = "", grid: float | None = None) -> Any:
        """Release ``value`` with discrete Gaussian noise calibrated to (ε, δ) for L2 sensitivity Δ."""
        sens = _as_sensitivity(sensitivity, Norm.L2, "gaussian")
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta, allow_zero=False)
        dimension = int(np.size(value))
        grid = grid if grid is not None else calibration.default_grid(sens.value)
        sigma = calibration.calibrate_discrete_gaussian(epsilon, delta, sens.value, grid, dimension)
        event = GaussianEvent(neighbouring=self.neighbouring, sensitivity=sens, label=label, epsilon=epsilon,
                              delta=delta, sigma=sigma, grid=grid, dimension=dimension)
        charge = self.charge(event, plugin="session", mechanism="gaussian")
        out = release_gaussian(value, sigma, grid, self.rng)
        self.record_release(charge, out)
        return out

    def exponential(self, scores: Sequence[float], sensitivity: float | Sensitivity, epsilon: float, *,
                    monotone: bool = False, label: str = "") -> int:
        """Choose a candidate index with the exponential mechanism (exact sampler); ε-DP.

        ``monotone=True`` halves the noise (rate ε/Δ instead of ε/(2Δ)) on the caller's word that every score moves in
        the same direction between neighbours; dpaudit cannot check that, so the event then carries the conditional
        assumption :data:`~dpaudit.events.MONOTONE_SCORES`, listed in the certificate.
        """
        scores = list(scores)  # exact: ints and Fractions are not rounded to floats (the sampler is exact on them)
        event = self.exponential_event(sensitivity, epsilon, n_candidates=len(scores), monotone=monotone,
                                       label=label)
        charge = self.charge(event, plugin="session", mechanism="exponential")
        index = sample_exponential(scores, epsilon, event.sensitivity.value, monotone, self.rng)
        self.record_release(charge, index)
        return index

    def exponential_event(self, sensitivity: float | Sensitivity, epsilon: float, *, n_candidates: int,
                          monotone: bool = False, label: str = "") -> ExponentialEvent:
        """The event :meth:`exponential` charges for ``n_candidates`` candidates (for :meth:`check_affordable`)."""
        sens = _as_sensitivity(sensitivity, Norm.L1, "exponential")
        return ExponentialEvent(neighbouring=self.neighbouring, sensitivity=sens, label=label,
                                epsilon=check_epsilon(epsilon), n_candidates=n_candidates, monotone=monotone)

    def above_threshold(self, threshold: float, sensitivity: float | Sensitivity, epsilon: float, *,
                        max_queries: int, label: str = "", grid: float | None = None,
                        plugin: str = "session") -> AuditedAboveThreshold:
        """Start one AboveThreshold run charged ε; each answer is written to the ledger before it is returned."""
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
        return AboveThresholdRounds(self, self.charge(event, plugin=plugin, mechanism="above_threshold"))

    def above_threshold_rounds_event(self, sensitivity: float | Sensitivity, epsilon: float, *, max_queries: int,
                                     rounds: int, label: str = "", grid: float | None = None) -> PrivacyEvent:
        """The event :meth:`above_threshold_rounds` charges, calibrated, not charged (for :meth:`check_affordable`)."""
        sens = _as_sensitivity(sensitivity, Norm.L1, "above_threshold")
        epsilon = check_epsilon(epsilon)
        check_count("max_queries", max_queries)
        check_count("rounds", rounds)
        grid = grid if grid is not None else calibration.default_grid(sens.value)
        t_scale, q_scale = calibration.calibrate_above_threshold(epsilon, sens.value, grid)
        leaf = AboveThresholdEvent(neighbouring=self.neighbouring, sensitivity=sens, label=label, epsilon=epsilon,
                                   threshold_scale=t_scale, query_scale=q_scale, grid=grid, max_queries=max_queries)
        return leaf if rounds == 1 else SelfComposedEvent(event=leaf, count=rounds)

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
        if not events:
            raise InvalidParameter("check_affordable needs at least one event")
        for event in events:
            relation = neighbouring_of(event)
            if relation is not self.neighbouring:
                raise UnsupportedEvent(f"event is about {relation.value} neighbours but the session protects "
                                       f"{self.neighbouring.value}")
        with self._filter.lock:
            return self._filter.admit(compose(list(events))).epsilon

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
        unknown = set(params) - {"gamma", "eta", "mu"}
        if unknown:
            raise InvalidParameter(f"unknown repetition parameters {sorted(unknown)}")
        event = RepeatAndSelectEvent(event=base_event, distribution=distribution, label=label,
                                     **{k: float(v) for k, v in params.items()})
        if distribution == "truncated_negative_binomial" and not (event.eta >= 1 and float(event.eta).is_integer()):
            raise InvalidParameter(f"K ~ TNB(eta={event.eta}) has no exact sampler here: use a whole eta >= 1")
        charge = self.charge(event, plugin=plugin, mechanism="repeat_and_select")
        frozen_at = self._ledger.freeze_clock()  # before K exists: no record time after this depends on K
        repetitions = sample_repetitions(distribution, event.parameters(), self.rng)
        opening = {"charge_seq": charge.seq, "repetitions": repetitions,
                   "salt": f"{self.rng.randbelow(2**256):064x}"}
        folder = self.run_dir / "confidential"
        folder.mkdir(exist_ok=True)
        (folder / f"repetitions-{charge.seq}.json").write_text(canonical.dumps(opening), encoding="utf-8")
        self.record_info(plugin, {"repetitions_commitment": canonical.sha256_hex(canonical.encode(opening)),
                                  "commitment_scheme": "sha256(canonical JSON of {charge_seq, repetitions, salt}); "
                                  "opening kept by the run owner, outside the release",
                                  "clock_frozen_at": frozen_at,
                                  "clock": "frozen right after this charge, before K was drawn, until the session "
                                  "closes: no record time from here on depends on K (the K repetitions' duration "
                                  "would reveal K)"})
        return charge, repetitions

    # --- closing ----------------------------------------------------------------------------------------------

    def close(self, status: str = "FINISHED") -> dict[str, Any]:
        """Close the ledger, build and sign the certificate, write it (and the report) and mirror them.

        Idempotent: a second call returns the certificate already written.
        """
        if self._closed:
            return json.loads(self.certificate_path.read_text())
        with self._filter.lock:  # the close record and the flag are one step: no release slips in after close
            self._append("close", {"status": status, "charges": len(self._charges)})
            self._closed = True
        self._ledger.close()
        certificate = build_certificate(self._ledger.records(), key=self._key, plugins=self._plugins,
                                        confidential_experiment=(self._confidential.experiment_name
                                                                 if self._confidential else None))
        write_certificate(self.run_dir, certificate, self._key)
        # the store's transparency log: a run later deleted or swapped is caught by `dpaudit verify --store`
        transparency.append_entry(self._root, self.store_id, transparency.LogEntry.of(self.run_id, certificate),
                                  self._key)
        from dpaudit.report import write_reports

        write_reports(self.run_dir)
        if self._mirror is not None:
            self._finish_mirror(status)
        return certificate

    def _finish_mirror(self, status: str) -> None:
        assert self._mirror is not None
        try:
            if self._mirror_error is not None:
                self._resync_mirror()
            self._mirror.flush()
            self._mirror.log_artifacts(self.run_id, sorted(p for p in self.run_dir.iterdir() if p.is_file()))
            self._mirror.end_run(self.run_id, status)
            if self._confidential is not None:
                self._confidential.close()
        except Exception as exc:
            print(f"dpaudit: warning: MLflow mirror incomplete ({exc}); the ledger and certificate in "
                  f"{self.run_dir} are complete; re-sync later", file=sys.stderr)


    def _resync_mirror(self) -> None:
        """After a mirror failure: catch every run (session and trials) up with its own ledger records."""
        assert self._mirror is not None
        by_run: dict[str, list[Record]] = {}
        for record in self._ledger.records():
            by_run.setdefault(self._mirrored_to.get(record.seq, self.run_id), []).append(record)
        for run, records in by_run.items():
            self._mirror.resync(run, [asdict(r) for r in records], [r.body.get("epsilon_spent") for r in records])


class AboveThresholdRounds:
    """A read-only view of the AboveThreshold rounds that one charge, made before the first of them, pays for.

    The rounds' state (how many started, each round's answers, its noisy threshold) lives in the session, keyed by
    the charge; this object holds none of it, so nothing here can be raised, reset or built around another
    mechanism. Rounds start only through the session (:meth:`next_round`).
    """

    def __init__(self, session: Session, charge: Charge) -> None:
        self._session = session
        self._charge = charge

    @property
    def charge(self) -> Charge:
        return self._charge

    @property
    def rounds(self) -> int:
        """The rounds charged (fixed up front)."""
        return self._session.coverage(self._charge).coverage.count

    @property
    def rounds_started(self) -> int:
        return self._session.coverage(self._charge).rounds_started

    def next_round(self, threshold: float) -> AuditedAboveThreshold:
        """Start the next round with a public ``threshold``.

        Raises:
            UncoveredRelease: all charged rounds are used (a :class:`~dpaudit.errors.BudgetExceeded`; nothing is
                drawn).
        """
        return self._session._start_round(self._charge, threshold)


class AuditedAboveThreshold:
    """A view of one AboveThreshold round run by the session: every answer is a release, written to the ledger first.

    Building one by hand gives only another view of a round the session started (its answers are counted in the
    session, keyed by the charge); a round the session did not start answers nothing.
    """

    def __init__(self, session: Session, charge: Charge, round_index: int) -> None:
        if isinstance(round_index, bool) or not isinstance(round_index, int):
            raise InvalidParameter(f"round_index must be an int, got {type(round_index).__name__}")
        self._session = session
        self._charge = charge
        self._round_index = round_index

    @property
    def charge(self) -> Charge:
        return self._charge

    @property
    def round_index(self) -> int:
        return self._round_index

    def _state(self) -> RoundState:
        rounds = self._session.coverage(self._charge).rounds
        return (rounds[self._round_index] if 0 <= self._round_index < len(rounds) else None) or RoundState()

    @property
    def halted(self) -> bool:
        return self._state().halted

    @property
    def queries_made(self) -> int:
        return self._state().answers

    def test(self, value: float) -> bool:
        """Is the (noisy) query above the (noisy) threshold? Refused once halted or past ``max_queries``.

        Raises:
            UncoveredRelease: the round has halted or answered ``max_queries`` queries (nothing is drawn).
            InvalidParameter: ``value`` is not a finite number (the query is not counted).
        """
        return self._session._answer(self._charge, self._round_index, value)
