"""The private front (threat model (b) of docs/plugins/dpareto.md): the evaluation data are protected too.

In this mode every trial's error is computed on a **protected** evaluation set and released through the session's
Laplace mechanism (:meth:`~dpaudit.plugin_session.PluginSession.laplace`: charged, ledgered, verified) with the
sensitivity of :mod:`~dpaudit_plugins.dpareto.formulas` (1/n_eval, n_eval a public constant, under add/remove and
replace-one), then clipped to [0, 1] (post-processing). The BO surrogates, the front, the hypervolume, the MLflow
metrics and the ledger see only the released errors; the exact errors never leave the trial.

**The exact rate is clipped to [0, 1] before the noise** (:func:`clip_rate`), and a trial is never failed on the
range of its exact rate: the count over the *public* n_eval exceeds 1 on an evaluation set larger than n_eval
(e.g. 1,606 records all misclassified), and a trial that failed there, releasing nothing, would tell D_eval from its
neighbour for free (reviewer R4). Clipping is 1-Lipschitz, so the sensitivity stays 1/n_eval.

**What the certificate covers** (Avent et al. 2020, Sec. 5 suggests composition; Dwork & Roth 2014, Thm. 3.16 and
Mironov 2017, Prop. 1 for adaptive composition): the session composes every trial's training charges and every
evaluation release, so its (ε, δ) bounds the privacy of a record of the training set *and* of a record of the
evaluation set (each is affected by a subset of the composed charges). The split is fixed before the first trial:
per trial, the task's training events (at most its worst case) and one evaluation release at ``evaluation_epsilon``;
the budget is asked for ``planned_trials`` of both before anything is charged. The split is stated in the
certificate by the evaluation releases' sensitivity (a non-conditional assumption, :func:`statement`).

A task that supports the private front is a :class:`PrivatelyEvaluable`. Whether its trial fails must not depend on
the evaluation set (a failed trial releases no error; the Adult tasks fail only when the trained weights diverge).

**Every error is claimed.** The plan record carries :func:`release_requirement`, so ``dpaudit verify`` requires a
``release_claim`` on every trial that states an error, labelled :func:`release_label` of its index (each once), with
the plan's mechanism, ε and sensitivity, which must also be those of the release's charge
(:mod:`dpaudit.epsilon_claims`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dpaudit.epsilon_claims import REQUIRED_KEY
from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.events import PrivacyEvent
from dpaudit.sensitivity import Assumption, Sensitivity, from_formula
from dpaudit.validation import check_count, check_epsilon
from dpaudit_plugins.dpareto.formulas import FORMULA_ID

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit_plugins.dpareto.task import Task

PUBLIC_EVAL = "public-eval"
PRIVATE = "private"
FRONTS = (PUBLIC_EVAL, PRIVATE)
"""The ``front`` configuration values: which guarantee the released front has."""

STATEMENT_ID = "dpareto-private-front"
"""The id of the certificate statement of what a private front protects."""

LABEL_TEMPLATE = "dpareto private front: error of trial {index} on the protected evaluation set"
"""The label of trial ``index``'s evaluation release (:func:`release_label`; verify fills ``{index}`` in)."""

TRIAL_RECORD = "dpareto_trial"
"""The key of each trial's ``info`` record (:mod:`~dpaudit_plugins.dpareto.trials`), whose ``error`` is claimed."""

ErrorRelease = Callable[[Any, int], tuple[float, dict[str, Any]]]
"""``release(exact error, trial_index) -> (released error, its release claim)``: the exact error, whatever its range,
is clipped to [0, 1] before the noise (:func:`clip_rate`); the claim (label, value key, clip range, mechanism, ε,
sensitivity) is recorded with the trial, and ``dpaudit verify`` compares the error with the labelled release and its
charge (:func:`dpaudit.epsilon_claims.release_claim_problems`)."""


@runtime_checkable
class PrivatelyEvaluable(Protocol):
    """A task whose error can be computed on a protected evaluation set.

    Attributes:
        evaluation_set: the data set the errors are computed on.
        evaluation_size: n_eval, the public constant the error count is divided by (fixed before the run, not read
            from the data: :mod:`~dpaudit_plugins.dpareto.formulas`).
    """

    evaluation_set: str
    evaluation_size: int

    def with_protected_evaluation(self) -> Task:
        """The same task with its evaluation set protected: ``evaluation_set`` is in its ``protected`` names and
        :meth:`~dpaudit_plugins.dpareto.task.Task.evaluate` returns (mean error count of the trial's models on it) /
        ``evaluation_size``."""


@dataclass(frozen=True)
class PrivateFront:
    """The private front's settings, fixed before the first trial.

    Attributes:
        evaluation_epsilon: ε of each trial's evaluation release (pure ε-DP, Laplace).
        evaluation_set: the protected evaluation set.
        evaluation_size: n_eval, the public divisor of the error count.
    """

    evaluation_epsilon: float
    evaluation_set: str
    evaluation_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "evaluation_epsilon", check_epsilon(self.evaluation_epsilon, "evaluation_epsilon"))
        check_count("evaluation_size", self.evaluation_size)

    @property
    def sensitivity_value(self) -> float:
        return 1.0 / self.evaluation_size


def for_task(task: Task, evaluation_epsilon: float) -> tuple[Task, PrivateFront]:
    """The task with its evaluation set protected, and the private front's settings for it.

    Raises:
        InvalidParameter: the task has no evaluation data to protect (e.g. the SVT example on synthetic queries), or
            a bad ``evaluation_epsilon``.
    """
    if not isinstance(task, PrivatelyEvaluable):
        raise InvalidParameter(f"the dpareto task {task.name!r} has no evaluation set to protect: front "
                               f"{PRIVATE!r} needs a task with a protected evaluation set (the Adult tasks)")
    protected = task.with_protected_evaluation()
    front = PrivateFront(evaluation_epsilon, protected.evaluation_set, protected.evaluation_size)
    check_protects(protected, front)
    return protected, front


def check_protects(task: Task, front: PrivateFront) -> None:
    """Refuse a task that would not read the front's evaluation set as protected data.

    Raises:
        InvalidParameter: the evaluation set is not among the task's protected names, or is among its public ones.
    """
    if front.evaluation_set not in task.protected or front.evaluation_set in task.public:
        raise InvalidParameter(f"a private front needs the evaluation set {front.evaluation_set!r} protected; the "
                               f"task protects {list(task.protected)} and uses {list(task.public)} as public")


def statement(front: PrivateFront, task: Task, planned_trials: int) -> str:
    """What the front protects and the budget split, fixed before the first trial (certificate and output)."""
    training = [name for name in task.protected if name != front.evaluation_set]
    return (f"dpareto private front: the released front protects the training data {training} and the evaluation "
            f"data [{front.evaluation_set!r}]. Budget split fixed before the first trial, for each of "
            f"{planned_trials} planned trials: the trial's training charges (at most the task's worst case) and one "
            f"Laplace release of its error at epsilon {front.evaluation_epsilon!r} with sensitivity "
            f"1/{front.evaluation_size} (the error count divided by the public constant n_eval = "
            f"{front.evaluation_size}, formula {FORMULA_ID}, clipped to [0, 1] before the noise); the session composes "
            "all of them. Released errors are clipped to [0, 1] again (post-processing); the search and the front "
            "see only the released errors")


def sensitivity(view: PluginSession, front: PrivateFront, task: Task, planned_trials: int) -> Sensitivity:
    """The evaluation release's sensitivity (recomputed by ``dpaudit verify``), carrying :func:`statement`."""
    what = Assumption(STATEMENT_ID, statement(front, task, planned_trials), conditional=False,
                      source="Avent et al. 2020, Sec. 5 (a private front by composition)")
    return from_formula(FORMULA_ID, view.neighbouring, assumptions=(what,), n_eval=front.evaluation_size)


def evaluation_events(view: PluginSession, front: PrivateFront, task: Task, planned_trials: int) -> list[PrivacyEvent]:
    """The events of all planned evaluation releases (for the up-front budget check)."""
    event = view.laplace_event(sensitivity(view, front, task, planned_trials), front.evaluation_epsilon,
                               label=release_label(0))
    return [event] * planned_trials


def release_label(index: int) -> str:
    return LABEL_TEMPLATE.replace("{index}", str(int(index)))


def release_requirement(front: PrivateFront | None) -> dict[str, Any]:
    """The plan record's ``release_claims_required`` (:mod:`dpaudit.epsilon_claims`): for a private front, every
    trial record that states an error must claim trial ``index``'s release with the front's mechanism, ε and
    sensitivity; None for a public-evaluation front (it ends an earlier plan's requirement)."""
    if front is None:
        return {REQUIRED_KEY: None}
    return {REQUIRED_KEY: {"statements": TRIAL_RECORD, "index": "index", "label": LABEL_TEMPLATE, "value": "error",
                           "mechanism": "laplace", "epsilon": front.evaluation_epsilon,
                           "sensitivity": front.sensitivity_value}}


def clip_rate(error: float) -> float:
    """The exact rate clipped to [0, 1], what the Laplace mechanism is applied to (module docstring).

    Raises:
        PluginError: the task returned no real number or NaN (a task bug: a count over a constant is a number);
            the run stops, it is not a failed trial.
    """
    if isinstance(error, bool) or not isinstance(error, Real) or math.isnan(error):
        raise PluginError(f"a private-front task returned {type(error).__name__} for its error, not a number: a task "
                          "bug (the error count over n_eval is a real number)")
    return min(max(float(error), 0.0), 1.0)


def releaser(view: PluginSession, front: PrivateFront, task: Task, planned_trials: int) -> ErrorRelease:
    """The function that releases each trial's error (:data:`ErrorRelease`)."""
    sens = sensitivity(view, front, task, planned_trials)

    def release(error: float, index: int) -> tuple[float, dict[str, Any]]:
        label = release_label(index)
        noisy = float(view.laplace(clip_rate(error), sens, front.evaluation_epsilon, label=label))
        return min(max(noisy, 0.0), 1.0), {"label": label, "value": "error", "clip": [0.0, 1.0],
                                           "mechanism": "laplace", "epsilon": front.evaluation_epsilon,
                                           "sensitivity": sens.value, "formula": FORMULA_ID}

    return release


def describe(front: PrivateFront | None, task: Task, planned_trials: int) -> dict[str, Any]:
    """The output's (and the plan record's) statement of which front guarantee applies."""
    if front is None:
        return {"front": PUBLIC_EVAL, "protects": list(task.protected), "public": list(task.public)}
    return {"front": PRIVATE, "protects": list(task.protected), "public": list(task.public),
            "protection": statement(front, task, planned_trials),
            "budget_split": {"planned_trials": planned_trials, "training_per_trial": "the trial's own charges, at "
                             "most the task's worst case (each point's epsilon is in its epsilon_claim)",
                             "evaluation_epsilon_per_trial": front.evaluation_epsilon,
                             "evaluation_mechanism": "laplace", "evaluation_sensitivity": front.sensitivity_value,
                             "evaluation_size": front.evaluation_size}}
