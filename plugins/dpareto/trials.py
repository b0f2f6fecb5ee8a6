"""Certified trials: charge the plans' events, run the task, record the outcomes (ledger and MLflow).

Order of operations for a batch of trials (one trial with ``workers = 1``; all through the plugin's session view):

1. each trial's plan (events and ε) for its point; for an adaptively chosen point, the plan must be dominated by
   the task's worst case (:func:`~dpaudit_plugins.dpareto.task.check_dominated`), the bound the budget was checked
   against before the first trial; every trial of the batch is checked before any is charged;
2. in trial order, each event charged (``mechanism = "dpareto-trial"``, in the ledger before the trial touches
   data) and the trial's seed drawn from the session's randomness (:func:`charge_trials`);
3. the task's evaluation under those charges: for a :class:`SplitTask`, ``prepare`` in the driver (data access,
   claims), ``compute`` on the executor (a worker process, a Ray task, or in process: :mod:`dpaudit.parallel`),
   then ``finish`` in the driver (the models' releases); any other task's ``evaluate`` in the driver;
4. in trial order, in a nested MLflow run named after the trial: for a private front, the error is released
   through the session's Laplace mechanism (:mod:`~dpaudit_plugins.dpareto.private_front`), in the driver, and only
   the released error goes further (MLflow, the ledger, the search); then an ``info`` record with the point, ε and
   its oracle, the error (or the failure) and the charges' sequence numbers (docs/plugins/dpareto.md, "Parallel
   trials").

**Whose ε.** For a trial that charges, the recorded ε is the plugin's own: each model's charged events composed by
the oracle's accountant at the oracle's δ (:func:`~dpaudit_plugins.dpareto.task.model_epsilon`), and a task that
states a smaller ε is refused before anything is charged (a task bug, or a forged front). The record's
``epsilon_claim`` lists each model's charge sequence numbers with the accountant, its version and δ, so
``dpaudit verify`` recomputes every point's ε from the ledger's charges (:mod:`dpaudit.epsilon_claims`) and fails a
recorded ε below it. A trial that charges nothing (synthetic public data, the SVT example) records
``"certified": false``: its ε is the oracle's statement, and nothing in the ledger backs it.

A failed trial (:class:`~dpaudit_plugins.dpareto.task.TrialFailed`, an arithmetic error, an error on public data
that is not a finite number in [0, 1], or a split task's ``compute`` that raised or whose worker died) keeps its
charges (the budget was spent) and is recorded with its reason; any other exception in the driver propagates (a bug
is not a failed trial). A private front's error is never failed on its range: it is clipped to [0, 1] and released
(:func:`~dpaudit_plugins.dpareto.private_front.clip_rate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from dpaudit.epsilon_claims import RELEASE_CLAIM_KEY
from dpaudit.errors import InvalidParameter
from dpaudit.events import PrivacyEvent
from dpaudit.parallel import Executor, SequentialExecutor, TrialFailure
from dpaudit.tolerance import within
from dpaudit.tuning.seeds import draw_seed
from dpaudit_plugins.dpareto.objectives import is_valid_error
from dpaudit_plugins.dpareto.task import (
    EpsilonOracle,
    Params,
    Task,
    TrialFailed,
    TrialPlan,
    check_dominated,
    model_epsilon,
)

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge
    from dpaudit_plugins.dpareto.private_front import ErrorRelease

TRIAL_MECHANISM = "dpareto-trial"


@dataclass(frozen=True)
class Trial:
    """One evaluated point.

    Attributes:
        index: 0-based position in the run.
        phase: ``"initial"``, ``"bo"``, ``"bo-fallback"`` (a BO trial whose acquisition was zero at every
            candidate: a random point, :data:`~dpaudit_plugins.dpareto.search.FALLBACK_PHASE`), ``"random"`` or
            ``"grid"``.
        unit: the point's coordinates in the unit cube (after integer rounding).
        params: the hyperparameters the task ran with.
        epsilon: the trial's privacy objective: each model's ε (the plugin's recomputation from the charged events,
            or the task's larger statement), or the oracle's ε when nothing was charged.
        oracle: how ``epsilon`` was derived.
        error: the error in [0, 1]; None when the trial failed.
        failure: why it failed (one line); None when it did not.
        charges: ledger sequence numbers of the trial's charges.
        models: the charges' positions per model (the groups ``epsilon`` is about); empty when nothing was charged.
        error_release: how ``error`` was released (private front: the ``release_claim`` that ``dpaudit verify``
            compares with the ledger's release, :mod:`dpaudit.epsilon_claims`); None when the error was not noised
            (public evaluation data) or the trial failed.
    """

    index: int
    phase: str
    unit: tuple[float, ...]
    params: dict[str, float | int]
    epsilon: float
    oracle: EpsilonOracle
    error: float | None
    failure: str | None
    charges: tuple[int, ...]
    models: tuple[tuple[int, ...], ...] = ()
    error_release: Mapping[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "phase": self.phase, "params": dict(self.params), "epsilon": self.epsilon,
                "epsilon_oracle": self.oracle.to_dict(), "error": self.error, "failure": self.failure,
                "charges": list(self.charges), "certified": bool(self.charges), **self._claim(),
                **({} if self.error_release is None else {RELEASE_CLAIM_KEY: dict(self.error_release)})}

    def _claim(self) -> dict[str, Any]:
        """The ``epsilon_claim`` verify re-derives (:mod:`dpaudit.epsilon_claims`); none when nothing was charged."""
        if not self.charges:
            return {}
        return {"epsilon_claim": {"accountant": self.oracle.accountant, "version": self.oracle.version,
                                  "delta": self.oracle.delta,
                                  "models": [[self.charges[i] for i in group] for group in self.models]}}


@runtime_checkable
class SplitTask(Protocol):
    """A task whose trial splits into driver and worker parts, so that trials can run in parallel
    (:mod:`dpaudit.parallel`; docs/plugins/dpareto.md, "Parallel trials"). Its ``evaluate(params, charges, view,
    seed)`` must equal ``finish(params, charges, view, compute(prepare(params, charges, view), seed))``."""

    def prepare(self, params: Params, charges: tuple[Charge, ...], view: PluginSession) -> Any:
        """In the driver, after the charges: read the data through ``view``, claim the charges, and return the
        worker's inputs (public hyperparameters and the data arrays; picklable)."""

    def compute(self, inputs: Any, seed: int) -> Any:
        """In a worker: the trial's computation, a pure function of ``inputs`` and ``seed`` (no view: nothing can
        be charged, claimed, released or recorded here); picklable result."""

    def finish(self, params: Params, charges: tuple[Charge, ...], view: PluginSession, computed: Any) -> float:
        """In the driver: record what the computation released (e.g. the models' digests) and return the error.

        Raises:
            TrialFailed: the trial produced no usable error (its releases are recorded first).
        """


@dataclass(frozen=True)
class ChargedTrial:
    """A trial whose events are charged and whose seed is drawn, not run yet.

    Attributes:
        index, phase: as :class:`Trial`.
        unit: the point's unit coordinates (after integer rounding).
        params: the hyperparameters.
        plan: the point's plan.
        epsilon: the trial's privacy objective (:class:`Trial`).
        charges: the plan's charges, in order.
        seed: the trial's only randomness, drawn from the session's source right after its charges.
    """

    index: int
    phase: str
    unit: tuple[float, ...]
    params: dict[str, float | int]
    plan: TrialPlan
    epsilon: float
    charges: tuple[Charge, ...]
    seed: int

    @property
    def name(self) -> str:
        return f"dpareto-trial-{self.index}"


def checked_epsilon(plan: TrialPlan, worst: tuple[PrivacyEvent, ...] | None) -> float:
    """The trial's privacy objective, after the checks that must pass before anything is charged.

    Raises:
        InvalidParameter: the plan exceeds ``worst``, or states an ε below its events'.
    """
    if worst is not None:
        check_dominated(plan.events, worst)
    if not plan.events:
        return plan.epsilon
    charged = model_epsilon(plan)
    if not within(charged, plan.epsilon):
        raise InvalidParameter(f"the task states epsilon {plan.epsilon:g} for a trial whose events cost "
                               f"{charged:g} per model ({plan.oracle.accountant}, delta {plan.oracle.delta:g}); "
                               "nothing was charged")
    return max(plan.epsilon, charged)


def charge_trials(task: Task, view: PluginSession, units: np.ndarray, first: int, phases: Sequence[str],
                  worst: tuple[PrivacyEvent, ...] | None, plans: list[TrialPlan] | None = None) -> list[ChargedTrial]:
    """Check every trial of a batch, then charge each one's events and draw its seed, in order (the driver).

    Args:
        units: (q, d) unit coordinates; trial i gets index ``first + i`` and phase ``phases[i]``.
        worst: the worst-case events every plan must be dominated by (adaptively chosen points); None for points
            whose plans were already checked with the whole fixed plan.
        plans: the points' plans when already computed (fixed plans); else asked of the task here.

    Raises:
        InvalidParameter: a plan exceeds ``worst``, or states an ε below its events' (nothing of the batch charged).
        BudgetExceeded: a charge is refused.
    """
    values = task.domain.from_unit(np.asarray(units, dtype=float).reshape(len(units), -1))
    params = [task.domain.point(row) for row in values]
    plans = [task.plan(p, view) for p in params] if plans is None else plans
    epsilons = [checked_epsilon(plan, worst) for plan in plans]
    snapped = task.domain.to_unit(values)
    return [ChargedTrial(index=first + i, phase=phases[i], unit=tuple(float(u) for u in snapped[i]), params=params[i],
                         plan=plan, epsilon=epsilon,
                         charges=tuple(view.charge(event, mechanism=TRIAL_MECHANISM) for event in plan.events),
                         seed=draw_seed(view.rng))
            for i, (plan, epsilon) in enumerate(zip(plans, epsilons, strict=True))]


def compute_trial(task: SplitTask, job: tuple[Any, int]) -> Any:
    """A worker's job: ``task.compute(inputs, seed)`` (:meth:`dpaudit.parallel.Executor.map`)."""
    inputs, seed = job
    return task.compute(inputs, seed)


def run_trials(task: Task, view: PluginSession, charged: list[ChargedTrial], executor: Executor,
               release: ErrorRelease | None = None) -> list[Trial]:
    """Run charged trials and record each, in order: a :class:`SplitTask`'s computations on a parallel ``executor``
    (the driver prepares each, the workers compute, the driver finishes each); with the in-process executor
    (``workers = 1``), or for any other task, ``evaluate`` in the driver, one trial at a time (the sequential
    path: the same records in the same order, since ``evaluate`` is ``prepare``, ``compute``, ``finish``).

    A trial whose computation raised or whose worker died is failed (its charges stay); nothing of it is recorded
    as a release.

    Args:
        release: the private front's error release (:mod:`~dpaudit_plugins.dpareto.private_front`), made here in
            the driver after the exact error came back; None: the error is post-processing of the trial's models
            (public evaluation data).
    """
    if isinstance(executor, SequentialExecutor) or not isinstance(task, SplitTask):
        return [_conclude(view, trial, lambda t=trial: task.evaluate(t.params, t.charges, view, t.seed), release)
                for trial in charged]
    inputs = [task.prepare(trial.params, trial.charges, view) for trial in charged]
    outcomes = executor.map(compute_trial, task, [(i, trial.seed) for i, trial in zip(inputs, charged, strict=True)])
    return [_conclude(view, trial, partial(_finish, task, view, trial, outcome), release)
            for trial, outcome in zip(charged, outcomes, strict=True)]


def _finish(task: SplitTask, view: PluginSession, trial: ChargedTrial, outcome: Any) -> float:
    if isinstance(outcome, TrialFailure):
        raise TrialFailed(f"its computation failed in the worker: {outcome.reason}")
    return task.finish(trial.params, trial.charges, view, outcome)


def _conclude(view: PluginSession, charged: ChargedTrial, evaluate: Callable[[], float],
              release: ErrorRelease | None) -> Trial:
    """Evaluate one charged trial in its nested MLflow run, release its error (private front), record it."""
    error: float | None = None
    failure: str | None = None
    released: Mapping[str, Any] | None = None
    with view.trial(charged.name, charged.params):
        try:
            value = evaluate()
        except (TrialFailed, ArithmeticError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        else:
            if release is not None:  # never failed on the range of a private value: released clipped
                error, released = release(value, charged.index)
            elif is_valid_error(value):
                error = float(value)
            else:
                failure = f"the error {value!r} is not a finite number in [0, 1]"
        view.log_public_metrics({"epsilon": charged.epsilon, **({"error": error} if error is not None else {})})
    trial = Trial(index=charged.index, phase=charged.phase, unit=charged.unit, params=charged.params,
                  epsilon=charged.epsilon, oracle=charged.plan.oracle, error=error, failure=failure,
                  charges=tuple(c.seq for c in charged.charges), models=tuple(charged.plan.groups()),
                  error_release=released)
    view.record_info({"dpareto_trial": trial.to_dict()})
    return trial
