"""One certified trial: charge the plan's events, run the task, record the outcome (ledger and MLflow).

Order of operations for a trial at a point (all through the plugin's session view):

1. the task's plan (events and ε) for the point; for an adaptively chosen point, the plan must be dominated by the
   task's worst case (:func:`~dpaudit_plugins.dpareto.task.check_dominated`), the bound the budget was checked
   against before the first trial;
2. each event charged (``mechanism = "dpareto-trial"``): in the ledger before the trial touches data;
3. the task's evaluation under those charges, in a nested MLflow run named after the trial;
4. an ``info`` record with the point, ε and its oracle, the error (or the failure) and the charges' sequence numbers.

**Whose ε.** For a trial that charges, the recorded ε is the plugin's own: each model's charged events composed by
the oracle's accountant at the oracle's δ (:func:`~dpaudit_plugins.dpareto.task.model_epsilon`), and a task that
states a smaller ε is refused before anything is charged (a task bug, or a forged front). The record's
``epsilon_claim`` lists each model's charge sequence numbers with the accountant, its version and δ, so
``dpaudit verify`` recomputes every point's ε from the ledger's charges (:mod:`dpaudit.epsilon_claims`) and fails a
recorded ε below it. A trial that charges nothing (synthetic public data, the SVT example) records
``"certified": false``: its ε is the oracle's statement, and nothing in the ledger backs it.

A failed trial (:class:`~dpaudit_plugins.dpareto.task.TrialFailed`, an arithmetic error, or an error that is not a
finite number in [0, 1]) keeps its charges (the budget was spent) and is recorded with its reason; any other
exception propagates (a bug is not a failed trial).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.events import PrivacyEvent
from dpaudit.tolerance import within
from dpaudit.tuning.seeds import draw_seed
from dpaudit_plugins.dpareto.objectives import is_valid_error
from dpaudit_plugins.dpareto.task import EpsilonOracle, Task, TrialFailed, TrialPlan, check_dominated, model_epsilon

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession

TRIAL_MECHANISM = "dpareto-trial"


@dataclass(frozen=True)
class Trial:
    """One evaluated point.

    Attributes:
        index: 0-based position in the run.
        phase: ``"initial"``, ``"bo"``, ``"random"`` or ``"grid"``.
        unit: the point's coordinates in the unit cube (after integer rounding).
        params: the hyperparameters the task ran with.
        epsilon: the trial's privacy objective: each model's ε (the plugin's recomputation from the charged events,
            or the task's larger statement), or the oracle's ε when nothing was charged.
        oracle: how ``epsilon`` was derived.
        error: the error in [0, 1]; None when the trial failed.
        failure: why it failed (one line); None when it did not.
        charges: ledger sequence numbers of the trial's charges.
        models: the charges' positions per model (the groups ``epsilon`` is about); empty when nothing was charged.
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

    @property
    def failed(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "phase": self.phase, "params": dict(self.params), "epsilon": self.epsilon,
                "epsilon_oracle": self.oracle.to_dict(), "error": self.error, "failure": self.failure,
                "charges": list(self.charges), "certified": bool(self.charges), **self._claim()}

    def _claim(self) -> dict[str, Any]:
        """The ``epsilon_claim`` verify re-derives (:mod:`dpaudit.epsilon_claims`); none when nothing was charged."""
        if not self.charges:
            return {}
        return {"epsilon_claim": {"accountant": self.oracle.accountant, "version": self.oracle.version,
                                  "delta": self.oracle.delta,
                                  "models": [[self.charges[i] for i in group] for group in self.models]}}


def run_trial(task: Task, view: PluginSession, unit: np.ndarray, index: int, phase: str,
              worst: tuple[PrivacyEvent, ...] | None, plan: TrialPlan | None = None) -> Trial:
    """Charge, run and record one trial at unit coordinates ``unit``.

    Args:
        worst: the worst-case events the point's plan must be dominated by (adaptively chosen points); None for a point
            whose plan was already checked with the whole fixed plan.
        plan: the point's plan when already computed (fixed plans); else asked of the task here.

    Raises:
        InvalidParameter: the plan exceeds ``worst``, or states an ε below its events' (nothing charged).
        BudgetExceeded: a charge is refused (nothing of this trial ran).
    """
    values = task.domain.from_unit(np.asarray(unit, dtype=float).reshape(1, -1))
    params = task.domain.point(values[0])
    plan = task.plan(params, view) if plan is None else plan
    if worst is not None:
        check_dominated(plan.events, worst)
    epsilon = plan.epsilon
    if plan.events:
        charged = model_epsilon(plan)
        if not within(charged, plan.epsilon):
            raise InvalidParameter(f"the task states epsilon {plan.epsilon:g} for a trial whose events cost "
                                   f"{charged:g} per model ({plan.oracle.accountant}, delta {plan.oracle.delta:g}); "
                                   "nothing was charged")
        epsilon = max(plan.epsilon, charged)
    charges = tuple(view.charge(event, mechanism=TRIAL_MECHANISM) for event in plan.events)
    error: float | None = None
    failure: str | None = None
    with view.trial(f"dpareto-trial-{index}", params):
        try:
            value = task.evaluate(params, charges, view, draw_seed(view.rng))
        except (TrialFailed, ArithmeticError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        else:
            if is_valid_error(value):
                error = float(value)
            else:
                failure = f"the error {value!r} is not a finite number in [0, 1]"
        view.log_public_metrics({"epsilon": epsilon, **({"error": error} if error is not None else {})})
    trial = Trial(index=index, phase=phase, unit=tuple(float(u) for u in task.domain.to_unit(values)[0]),
                  params=params, epsilon=epsilon, oracle=plan.oracle, error=error, failure=failure,
                  charges=tuple(c.seq for c in charges), models=tuple(plan.groups()))
    view.record_info({"dpareto_trial": trial.to_dict()})
    return trial
