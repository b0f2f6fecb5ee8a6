"""DPareto's Adult tasks (Avent et al. 2020, Sec. 4, Table 1): logistic regression with DP-SGD, with DP-Adam, and a
linear SVM (hinge loss) with DP-SGD, on Adult in the a1a construction (:mod:`~dpaudit.data.adult_a1a`),
each trial evaluated by the closed-form linear trainer (:mod:`~dpaudit_plugins.dpareto.linear_dpsgd`).

Domain (Table 1, the same for the three tasks and for BO, random and grid search): epochs in [1, 64] (integer),
lot size in [8, 512] (integer, log scale), learning rate in [5·10⁻⁴, 5·10⁻²] (log), noise multiplier σ in
[0.1, 16] (log) and clipping norm in [0.1, 4] (log). Table 1's header calls the noise column "noise variance σ²";
Alg. 3 adds N(0, σ²I), so the column is σ² in the paper's notation; the issue (and this task) takes σ, the noise
multiplier, in [0.1, 16] (docs/plugins/dpareto.md, "Adult tasks").

**One trial** trains ``replications`` models (paper: 10) at the point, each a separate DP-SGD run with its own
charge (the plan's events are ``replications`` copies of one Poisson-subsampled Gaussian event), and reports their
mean misclassification rate on the public evaluation set (the paper's utility oracle). The point's privacy
objective ε is that of **one** model (:func:`~dpaudit_plugins.dpareto.task.epsilon_of_events` of one event at
``delta``, the paper's privacy oracle), while the ledger carries the cost of all replications, which the released
mean error depends on.

The training-set size n (30,956, or the ``rows`` smoke limit) is public by assumption (it sets q = B/n and N), so a
trial's plan needs no data; the data are read through the session view when the trial runs, and a set whose size is
not the planned n is refused before any charge is claimed.

**Private front** (:mod:`~dpaudit_plugins.dpareto.private_front`): :meth:`AdultTask.with_protected_evaluation`
evaluates on the same 1,605 records declared protected (``adult-a1a-test (protected)``) and returns the mean error
count divided by the public constant n_eval = 1,605 (the construction's test size), whatever the realised size
(above 1 on a larger set: the private front clips it to [0, 1] before the noise, and never fails the trial on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from dpaudit.data.adult_a1a import EVAL_NAME, TEST_IDS, TEST_NAME, TRAIN_NAME
from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.events import PrivacyEvent
from dpaudit.tuning.training import SamplingPlan, dp_sgd_event
from dpaudit.validation import check_count, check_delta, check_known_keys
from dpaudit_plugins.dpareto.domain import Domain, Parameter
from dpaudit_plugins.dpareto.linear_dpsgd import (
    ASSUMPTIONS,
    LinearFit,
    LinearJob,
    LinearTrial,
    claim_linear,
    fit_linear,
    record_linear,
)
from dpaudit_plugins.dpareto.task import Params, TrialPlan, epsilon_of_events

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge

#: the size of a1a.t, DPareto's Adult training set
TRAIN_SIZE = 32561 - TEST_IDS
DELTA = 1e-5
REPLICATIONS = 10
ACCOUNTANTS = ("rdp",)
"""The accountants a point's ε may be derived with (see :class:`AdultTask`)."""

DOMAIN = Domain((
    Parameter("epochs", 1, 64, integer=True),
    Parameter("batch_size", 8, 512, scale="log", integer=True),
    Parameter("lr", 5e-4, 5e-2, scale="log"),
    Parameter("noise_multiplier", 0.1, 16.0, scale="log"),
    Parameter("max_grad_norm", 0.1, 4.0, scale="log"),
))


@dataclass(frozen=True)
class AdultTask:
    """One of the three Adult tasks (:class:`~dpaudit_plugins.dpareto.task.Task`).

    Attributes:
        name: the registered task name.
        loss: ``"logistic"`` or ``"hinge"``.
        optimizer: ``"sgd"`` or ``"adam"``.
        replications: models trained per point (their errors are averaged).
        delta: the δ at which each point's ε is stated.
        accountant: the accountant that derives ε, pinned in each point's oracle: ``"rdp"``, the only one offered
            (:data:`ACCOUNTANTS`): a point of the domain composes up to 247,616 Poisson-subsampled Gaussian steps
            (64 epochs of lot 8), which the PLD-based accountants cannot hold in memory at σ = 0.1.
        rows: train on the first ``rows`` a1a training records only (smoke tests; more than 512, the largest
            lot, so that q = B/n < 1); None: all 30,956.
        protected_evaluation: evaluate on the protected copy of the evaluation records (the private front).
    """

    name: str
    loss: str
    optimizer: str
    replications: int = REPLICATIONS
    delta: float = DELTA
    accountant: str = "rdp"
    rows: int | None = None
    protected_evaluation: bool = False

    domain: ClassVar[Domain] = DOMAIN
    evaluation_size: ClassVar[int] = TEST_IDS
    """n_eval, the public divisor of the private front's error count (the construction's 1,605 test records)."""

    @property
    def evaluation_set(self) -> str:
        return EVAL_NAME if self.protected_evaluation else TEST_NAME

    @property
    def protected(self) -> tuple[str, ...]:
        return (TRAIN_NAME, EVAL_NAME) if self.protected_evaluation else (TRAIN_NAME,)

    @property
    def public(self) -> tuple[str, ...]:
        return () if self.protected_evaluation else (TEST_NAME,)

    def with_protected_evaluation(self) -> AdultTask:
        """This task evaluated on the protected evaluation records (:mod:`~dpaudit_plugins.dpareto.private_front`)."""
        return replace(self, protected_evaluation=True)

    def __post_init__(self) -> None:
        check_count("replications", self.replications)
        check_delta(self.delta, allow_zero=False)
        if self.accountant not in ACCOUNTANTS:
            raise InvalidParameter(f"the dpareto Adult tasks' accountant must be one of {', '.join(ACCOUNTANTS)}, "
                                   f"got {self.accountant!r}")
        if self.rows is not None and check_count("rows", self.rows) <= DOMAIN.parameters[1].upper:
            raise InvalidParameter(f"rows must be more than {DOMAIN.parameters[1].upper:g}, the domain's largest lot "
                                   f"size (q = B/n must be below 1), got {self.rows}")
        LinearTrial(self.loss, self.optimizer, 1, 8, 1e-3, 1.0, 1.0)  # refuses an unknown loss or optimizer

    @property
    def dataset_size(self) -> int:
        """n, public by assumption: 30,956, or ``rows`` when smaller."""
        return TRAIN_SIZE if self.rows is None else min(self.rows, TRAIN_SIZE)

    def trial(self, params: Params) -> LinearTrial:
        """The linear trial at ``params``."""
        return LinearTrial(self.loss, self.optimizer, int(params["epochs"]), int(params["batch_size"]),
                           float(params["lr"]), float(params["noise_multiplier"]), float(params["max_grad_norm"]))

    def _plan(self, trial: LinearTrial) -> TrialPlan:
        event = trial.event(self.dataset_size, label=f"dpareto {self.name}: {trial.describe()}")
        epsilon, oracle = epsilon_of_events([event], self.delta, self.accountant)
        return TrialPlan(events=(event,) * self.replications, epsilon=epsilon, oracle=oracle,
                         models=self.replications)

    def plan(self, params: Params, view: PluginSession) -> TrialPlan:
        """``replications`` copies of the point's DP-SGD event; ε of one model at ``delta``."""
        return self._plan(self.trial(params))

    def worst_case(self, view: PluginSession) -> tuple[PrivacyEvent, ...]:
        """The largest sampling rate (lot 512), the most steps (64 epochs of lot 8) and the smallest σ (0.1) of the
        domain in one event: the Poisson-subsampled Gaussian's RDP grows with q and N and falls with σ, so it
        dominates every point's event."""
        n = self.dataset_size
        plan = SamplingPlan(dataset_size=n, sample_rate=min(512, n) / n, steps_per_epoch=n // 8, epochs=64)
        worst = dp_sgd_event(plan, noise_multiplier=0.1, max_grad_norm=4.0, assumptions=ASSUMPTIONS,
                             label=f"dpareto {self.name}: worst case of the domain (q of lot 512, steps of lot 8)")
        return (worst,) * self.replications

    def evaluate(self, params: Params, charges: tuple[Charge, ...], view: PluginSession, seed: int) -> float:
        """Train the replications under ``charges`` (claimed by the trainer) and return their mean error on the
        evaluation set: the rate on the public set, or, protected, the mean error count / ``evaluation_size``
        (:meth:`prepare`, :meth:`compute`, :meth:`finish` in turn).

        Raises:
            PluginError: the training set's size is not the planned n (nothing is claimed or trained).
            TrialFailed: the weights diverged.
        """
        return self.finish(params, charges, view, self.compute(self.prepare(params, charges, view), seed))

    def prepare(self, params: Params, charges: tuple[Charge, ...], view: PluginSession) -> LinearJob:
        """In the driver: read the data through ``view`` and claim ``charges`` (:func:`claim_linear`).

        Raises:
            PluginError: the training set's size is not the planned n (nothing is claimed).
        """
        train = view.data(TRAIN_NAME, **({} if self.rows is None else {"rows": self.rows}))
        test = view.data(self.evaluation_set)
        if len(train) != self.dataset_size:
            raise PluginError(f"the a1a training set has {len(train)} records, the plan assumed "
                              f"{self.dataset_size}")
        return claim_linear(view, charges, self.trial(params), train.X, train.y, test.X, test.y)

    def compute(self, job: LinearJob, seed: int) -> LinearFit:
        """Anywhere (a worker process): train the claimed job (:func:`fit_linear`), a pure function of its inputs."""
        return fit_linear(job, seed=seed)

    def finish(self, params: Params, charges: tuple[Charge, ...], view: PluginSession, fit: LinearFit) -> float:
        """In the driver: record every replication's model (:func:`record_linear`) and return the error.

        Raises:
            TrialFailed: the weights diverged (the models are recorded).
        """
        run = record_linear(view, charges, fit)
        if self.protected_evaluation:  # the count over the public constant, never over the realised (private) size
            return run.error * fit.evaluated / self.evaluation_size
        return run.error

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": f"linear, {self.loss} loss", "optimizer": self.optimizer,
                "protected": list(self.protected), "public": list(self.public), "dataset_size": self.dataset_size,
                "features": "Adult in the a1a construction, 123 binary features (comparable to libsvm a1a, not "
                            "identical)",
                "delta": self.delta, "replications": self.replications, "accountant": self.accountant,
                "sampling": "poisson", "neighbouring": "add_remove"}


def _build(name: str, loss: str, optimizer: str, config: Mapping[str, Any]) -> AdultTask:
    check_known_keys(config, ("replications", "delta", "accountant", "rows"), f"the dpareto {name} task")
    return AdultTask(name, loss, optimizer, **dict(config))


def build_logreg_sgd(config: Mapping[str, Any]) -> AdultTask:
    """Logistic regression with DP-SGD (configuration: optional ``replications``, ``delta``, ``accountant``,
    ``rows``)."""
    return _build("adult-logreg-sgd", "logistic", "sgd", config)


def build_logreg_adam(config: Mapping[str, Any]) -> AdultTask:
    """Logistic regression with DP-Adam (configuration as :func:`build_logreg_sgd`)."""
    return _build("adult-logreg-adam", "logistic", "adam", config)


def build_svm_sgd(config: Mapping[str, Any]) -> AdultTask:
    """Linear SVM (hinge loss) with DP-SGD (configuration as :func:`build_logreg_sgd`)."""
    return _build("adult-svm-sgd", "hinge", "sgd", config)
