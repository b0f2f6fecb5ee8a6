"""The ``dpareto`` plugin: privacy-utility Pareto fronts by multi-objective BO, every trial certified
(Avent et al. 2020; docs/plugins/dpareto.md).

A run fixes its plan before the first trial: the task, the method, the number of trials and the reference point,
which is recorded in the ledger and never replaced. The budget is then asked for the whole plan (for BO, the task's
worst-case trial times the number of trials; for the baselines, every planned point's own events), so a budget that
cannot pay for every planned trial is refused before any trial runs.

What the front's guarantee is (threat model (a) of the issue: the evaluation data are public):

* each trial's model is (ε_i, δ)-DP by its own charge, and its released error is post-processing of it;
* BO chooses each trial's privacy parameters from earlier trials' errors, so the composition of all trials is
  certified by the session's Rényi filter, valid for adaptively chosen parameters: a BO run whose trials charge
  anything needs an adaptive session (``dpaudit run dpareto --adaptive``) and is refused otherwise;
* the baselines' points are fixed before the first trial (public randomness or a grid), so a fixed-parameter
  session's accountant composes them under its stated assumption;
* a task whose trials touch no protected data (the SVT example) charges nothing: its ε values are the oracle's
  statement about the algorithm at those parameters.

With ``front: "private"`` (threat model (b), :mod:`~dpaudit_plugins.dpareto.private_front`) the evaluation data are
protected too: each trial's error is released by the session's Laplace mechanism, the budget is asked for every
planned trial *and* every planned evaluation release before the first trial, and the certificate states what the
front protects with the budget split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.data.access import require_data
from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Neighbouring
from dpaudit.tuning.seeds import draw_seed
from dpaudit_plugins.dpareto.config import BO_METHODS, DparetoConfig, parse_config
from dpaudit_plugins.dpareto.plot import front_png
from dpaudit_plugins.dpareto.private_front import (
    ErrorRelease,
    describe,
    evaluation_events,
    release_requirement,
    releaser,
)
from dpaudit_plugins.dpareto.results import summarise
from dpaudit_plugins.dpareto.search import Evaluate, bayesian_optimisation, random_points, run_fixed
from dpaudit_plugins.dpareto.trials import Trial, charge_trials, run_trials

if TYPE_CHECKING:
    from dpaudit.events import PrivacyEvent
    from dpaudit.parallel import Executor
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Session
    from dpaudit_plugins.dpareto.task import TrialPlan

PLUGIN_NAME = "dpareto"
VERSION = "0.1.0"
FRONT_PLOT = "dpareto-front.png"
"""The front's plot, attached to the session's MLflow run under ``plugins/dpareto/``."""

GUARANTEES = {
    "adaptive-renyi-filter": "every trial's model (hence every released error and the front) is covered by the "
    "session's budget (epsilon_B, delta_B), certified by its Renyi filter, which is valid although each trial's "
    "privacy parameters were chosen from earlier trials' results",
    "fixed-plan": "every trial's parameters were fixed before the first trial (public randomness or a grid); the "
    "certificate's (epsilon, delta) composes all trials under that assumption",
    "no-protected-data": "the trials touched no protected data (synthetic public inputs); each epsilon is the "
    "privacy oracle's statement about the algorithm at those parameters, nothing was charged",
}
EVALUATION = {"public-eval": "; the evaluation data are public",
              "private": "; the evaluation data are protected too: each released error is a Laplace release on them, "
              "charged to the same budget (private front)"}
"""The clause a charging guarantee adds about the evaluation data, by ``front``."""


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """Explore the configured task's privacy-utility front and return it with every trial.

    Raises:
        InvalidParameter: a bad configuration, or BO with charging trials in a session that is not adaptive.
        PluginError: the session does not declare the task's data.
        BudgetExceeded: the plan does not fit the budget (checked before the first trial).
    """
    return explore(session, parse_config(config))


def explore(session: Session, cfg: DparetoConfig) -> dict[str, Any]:
    """:func:`run` on a parsed configuration (whose task may be any :class:`~dpaudit_plugins.dpareto.task.Task`).

    Raises:
        InvalidParameter: BO with charging trials in a session that is not adaptive.
        PluginError: the session does not declare the task's data.
        BudgetExceeded: the plan does not fit the budget (checked before the first trial).
    """
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    task = cfg.task
    require_data(view, protected=task.protected, public=task.public)
    seed = draw_seed(view.rng)
    if cfg.method in BO_METHODS:
        trials, guarantee = _run_bo(view, cfg, seed)
    else:
        trials, guarantee = _run_fixed(view, cfg, seed)
    front = describe(cfg.front, task, cfg.planned_trials)
    clause = "" if guarantee == "no-protected-data" else EVALUATION[front["front"]]
    statement = {"name": guarantee, "statement": GUARANTEES[guarantee] + clause,
                 "neighbouring": Neighbouring(view.neighbouring).value, **front}
    summary = summarise(trials, cfg.reference_point)
    view.record_info({"dpareto_front": {"guarantee": statement, "hypervolume": summary["hypervolume"],
                                        "front": [t["index"] for t in summary["front"]]}})
    view.log_public_artifact(FRONT_PLOT, front_png(trials, cfg.reference_point, f"{task.name}, {cfg.method}"))
    return {"task": task.describe(), "method": cfg.method, "planned_trials": cfg.planned_trials,
            "domain": task.domain.to_dict(), **summary, "guarantee": statement}


def _record_plan(view: PluginSession, cfg: DparetoConfig, seed: int) -> None:
    """The plan, in the ledger before the first trial: the reference point is recorded once and never replaced; for a
    private front, the release claim ``dpaudit verify`` requires of every trial's error (``release_requirement``)."""
    view.record_info({"dpareto_plan": {"task": cfg.task.describe(), "method": cfg.method,
                                       "planned_trials": cfg.planned_trials,
                                       "reference_point": list(cfg.reference_point), "seed": seed,
                                       "front": describe(cfg.front, cfg.task, cfg.planned_trials),
                                       **release_requirement(cfg.front)}})


def _evaluations(view: PluginSession, cfg: DparetoConfig) -> tuple[list, ErrorRelease | None]:
    """The planned evaluation releases' events and the function that makes them (none for a public-evaluation
    front): the budget check covers them with the trials, before the first trial."""
    if cfg.front is None:
        return [], None
    return (evaluation_events(view, cfg.front, cfg.task, cfg.planned_trials),
            releaser(view, cfg.front, cfg.task, cfg.planned_trials))


def _run_bo(view: PluginSession, cfg: DparetoConfig, seed: int) -> tuple[list[Trial], str]:
    task, n = cfg.task, cfg.planned_trials
    worst = task.worst_case(view)
    evaluations, release = _evaluations(view, cfg)
    if worst or evaluations:
        if view.accountant is not None:
            raise InvalidParameter("dpareto's Bayesian optimisation chooses each trial's privacy parameters from "
                                   "earlier results: run it in an adaptive session (dpaudit run dpareto --adaptive)")
        view.check_affordable(list(worst) * n + evaluations)
    _record_plan(view, cfg, seed)
    with cfg.parallel.executor() as executor:
        evaluate = _evaluator(view, cfg, executor, worst, release)
        trials = bayesian_optimisation(task.domain, cfg.method, cfg.bo, cfg.reference_point, evaluate, seed,
                                       batch=executor.workers)
    return trials, "adaptive-renyi-filter" if worst or evaluations else "no-protected-data"


def _evaluator(view: PluginSession, cfg: DparetoConfig, executor: Executor, worst: tuple[PrivacyEvent, ...] | None,
               release: ErrorRelease | None, plans: list[TrialPlan] | None = None) -> Evaluate:
    """The search's ``evaluate``: charge a batch of trials in the driver, run them on ``executor``, record them."""
    done = 0

    def evaluate(units: np.ndarray, phases: Sequence[str]) -> list[Trial]:
        nonlocal done
        batch_plans = None if plans is None else plans[done:done + len(units)]
        charged = charge_trials(cfg.task, view, units, done, phases, worst, batch_plans)
        done += len(units)
        return run_trials(cfg.task, view, charged, executor, release)

    return evaluate


def _run_fixed(view: PluginSession, cfg: DparetoConfig, seed: int) -> tuple[list[Trial], str]:
    task = cfg.task
    points = (random_points(cfg.n_trials, task.domain.dimension, seed) if cfg.method == "random"
              else task.domain.grid(cfg.grid_points))
    points = task.domain.snap(points)
    plans = [task.plan(task.domain.point(row), view) for row in task.domain.from_unit(points)]
    evaluations, release = _evaluations(view, cfg)
    events = [event for plan in plans for event in plan.events] + evaluations
    if events:
        view.check_affordable(events)
    _record_plan(view, cfg, seed)
    with cfg.parallel.executor() as executor:
        trials = run_fixed(points, cfg.method, _evaluator(view, cfg, executor, None, release, plans), executor.workers)
    if not events:
        return trials, "no-protected-data"
    return trials, "adaptive-renyi-filter" if view.accountant is None else "fixed-plan"
