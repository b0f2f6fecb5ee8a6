"""The ``dpareto`` configuration: everything public, fixed before any trial (docs/plugins/dpareto.md).

``method`` selects the search: ``"hvpoi"`` (the paper's acquisition, default) or ``"qlognehvi"`` (BoTorch's
log noisy expected hypervolume improvement), both after an initial Sobol design; or a baseline, ``"random"`` (uniform
on the declared scales) or ``"grid"``. Keys of another method are refused, so a typo cannot fall back to a default.
The number of trials is fixed by the configuration alone (BO: ``n_initial + n_iterations``; random: ``n_trials``;
grid: ``grid_points^d``), so the plan's cost is known before the first trial.

``front`` selects the front's guarantee: ``"public-eval"`` (default; threat model (a), the evaluation data are public)
or ``"private"`` (threat model (b), :mod:`~dpaudit_plugins.dpareto.private_front`: each trial's error on a protected
evaluation set released by the Laplace mechanism at ``evaluation_epsilon``, required then and refused otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.parallel import PARALLEL_KEYS, ParallelOptions
from dpaudit.validation import check_count, check_finite, check_known_keys
from dpaudit_plugins.dpareto.catalog import build_task
from dpaudit_plugins.dpareto.domain import MAX_GRID_POINTS
from dpaudit_plugins.dpareto.private_front import FRONTS, PRIVATE, PrivateFront, check_protects, for_task
from dpaudit_plugins.dpareto.task import Task
from dpaudit_plugins.dpareto.trials import SplitTask

BO_METHODS = ("hvpoi", "qlognehvi")
METHODS = (*BO_METHODS, "random", "grid")
DEFAULT_REFERENCE = (10.0, 1.0)
"""The anti-ideal point (ε, error) of Avent et al. 2020, Sec. 5."""

_COMMON = {"task", "method", "reference_point", "front", "evaluation_epsilon", *PARALLEL_KEYS}
_KEYS = {"hvpoi": {"n_initial", "n_iterations", "raw_samples", "restarts", "refit_every", "acquisition_maxiter"},
         "random": {"n_trials"}, "grid": {"grid_points"}}
_KEYS["qlognehvi"] = _KEYS["hvpoi"] | {"mc_samples"}


@dataclass(frozen=True)
class BoSettings:
    """The Bayesian optimisation loop's settings (fixed up front).

    Attributes:
        n_initial: points of the initial scrambled Sobol design (paper: 16).
        n_iterations: BO iterations after it, one trial each.
        raw_samples: Sobol candidates scored per iteration to start the acquisition's optimisation.
        restarts: L-BFGS-B restarts from the best candidates.
        refit_every: refit the GPs' hyperparameters every k-th iteration (warm-started); between refits the GPs
            are conditioned on new data with the previous hyperparameters.
        acquisition_maxiter: L-BFGS-B iterations per restart.
        mc_samples: quasi-MC samples of qLogNEHVI (``"qlognehvi"`` only).
    """

    n_initial: int = 16
    n_iterations: int = 48
    raw_samples: int = 1024
    restarts: int = 2
    refit_every: int = 1
    acquisition_maxiter: int = 50
    mc_samples: int = 128


@dataclass(frozen=True)
class DparetoConfig:
    """A parsed configuration.

    Attributes:
        task: the task (:mod:`dpaudit_plugins.dpareto.catalog`).
        method: ``"hvpoi"``, ``"qlognehvi"``, ``"random"`` or ``"grid"``.
        reference_point: the anti-ideal (ε, error), recorded in the ledger before the first trial, never replaced.
        bo: the BO settings (BO methods).
        n_trials: trials of random sampling.
        grid_points: points per axis of grid search.
        front: the private front's settings (``front: "private"``); None: the evaluation data are public.
        parallel: where the trials run (``workers``, ``ray_address``; :class:`dpaudit.parallel.ParallelOptions`):
            BO then proposes ``workers`` points per batch (docs/plugins/dpareto.md, "Parallel trials").
    """

    task: Task
    method: str = "hvpoi"
    reference_point: tuple[float, float] = DEFAULT_REFERENCE
    bo: BoSettings = field(default_factory=BoSettings)
    n_trials: int = 64
    grid_points: int = 3
    front: PrivateFront | None = None
    parallel: ParallelOptions = ParallelOptions()

    def __post_init__(self) -> None:
        if self.front is not None:
            check_protects(self.task, self.front)
        if self.parallel != ParallelOptions() and not isinstance(self.task, SplitTask):
            raise InvalidParameter(f"the dpareto task {self.task.name!r} evaluates its trials in the driver only: it "
                                   "cannot run them in parallel (workers, ray_address)")

    @property
    def planned_trials(self) -> int:
        """The number of trials, fixed by the configuration."""
        if self.method in BO_METHODS:
            return self.bo.n_initial + self.bo.n_iterations
        if self.method == "random":
            return self.n_trials
        return self.grid_points ** self.task.domain.dimension


def parse_config(config: Mapping[str, Any]) -> DparetoConfig:
    """Parse and validate a configuration (no data read, no session needed).

    Raises:
        InvalidParameter: unknown keys, an unknown method or task, bad values, more than
            :data:`~dpaudit_plugins.dpareto.domain.MAX_GRID_POINTS` planned trials.
    """
    if not isinstance(config, Mapping):
        raise InvalidParameter("the dpareto configuration must be a mapping")
    method = config.get("method", "hvpoi")
    if method not in METHODS:
        raise InvalidParameter(f"unknown dpareto method {method!r}; known: {', '.join(METHODS)}")
    check_known_keys(config, _COMMON | _KEYS[method], f"the dpareto configuration (method {method!r})")
    if "task" not in config:
        raise InvalidParameter("the dpareto configuration needs a 'task' section")
    reference = config.get("reference_point", DEFAULT_REFERENCE)
    if isinstance(reference, (str, bytes)) or not isinstance(reference, Sequence) or len(reference) != 2:
        raise InvalidParameter("reference_point must be [epsilon, error]")
    ref = (check_finite("reference_point[0]", reference[0]), check_finite("reference_point[1]", reference[1]))
    if not (ref[0] > 0 and 0 < ref[1] <= 1):
        raise InvalidParameter(f"reference_point must have epsilon > 0 and error in (0, 1], got {list(ref)}")
    defaults = BoSettings()
    bo = BoSettings(**{name: check_count(name, config.get(name, getattr(defaults, name)),
                                         minimum=0 if name == "n_iterations" else 1)
                       for name in BoSettings.__dataclass_fields__})
    if method in BO_METHODS and bo.n_initial < 2:
        raise InvalidParameter("n_initial must be at least 2 (the GPs need data before the first iteration)")
    task, front = _front(config, build_task(config["task"]))
    cfg = DparetoConfig(task=task, method=method, reference_point=ref, bo=bo,
                        n_trials=check_count("n_trials", config.get("n_trials", 64)),
                        grid_points=check_count("grid_points", config.get("grid_points", 3), minimum=2), front=front,
                        parallel=ParallelOptions.from_mapping(config))
    if cfg.planned_trials > MAX_GRID_POINTS:  # before any grid or plan is built
        raise InvalidParameter(f"the configuration plans {cfg.planned_trials} trials; at most {MAX_GRID_POINTS} "
                               "are allowed")
    return cfg


def _front(config: Mapping[str, Any], task: Task) -> tuple[Task, PrivateFront | None]:
    """The task and the private front's settings (None for a public-evaluation front)."""
    front = config.get("front", FRONTS[0])
    if front not in FRONTS:
        raise InvalidParameter(f"unknown dpareto front {front!r}; known: {', '.join(FRONTS)}")
    if front != PRIVATE:
        if "evaluation_epsilon" in config:
            raise InvalidParameter(f"evaluation_epsilon is a setting of front {PRIVATE!r} only")
        return task, None
    if "evaluation_epsilon" not in config:
        raise InvalidParameter(f"front {PRIVATE!r} needs evaluation_epsilon (the epsilon of each trial's error "
                               "release)")
    return for_task(task, config["evaluation_epsilon"])
