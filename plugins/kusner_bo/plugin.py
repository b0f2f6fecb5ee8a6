"""The ``kusner-bo`` plugin: Kusner et al. 2015, Algorithms 1-3 on Adult (docs/plugins/kusner-bo.md).

Adult's ``adult.data`` is split by record id (a record's own key, so a neighbouring data set keeps the split of
the shared records): ids < ``train_rows`` are the **public** training set; the next ``validation_rows`` ids are the
**protected** validation set, in record-id order.

* Algorithm 3 (``"algorithm": 3``): unconditional pure ε-DP release of the best validation score.
* Algorithms 1 and 2: λ̃ (exponential mechanism on μ_T) and the best value (Laplace), each (ε, δ_s)-DP
  **conditional on Assumption 1** with the configured k1 and k2 (δ_s = δ, or 5δ/3 for Algorithm 1's value),
  composing to (2ε, δ + δ_s); tasks in :mod:`dpaudit_plugins.kusner_bo.tasks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpaudit.data.access import require_data
from dpaudit.data.catalog import SLICE_TRAINING_NAME, SLICE_VALIDATION_NAME
from dpaudit.tuning.seeds import draw_seed
from dpaudit_plugins.kusner_bo.algorithm3 import gp_ucb_proposer, run_algorithm3
from dpaudit_plugins.kusner_bo.config import Algorithm3Config, GpConfig, parse_config
from dpaudit_plugins.kusner_bo.gp_algorithms import (
    ExactObservations,
    GpModel,
    NoisyObservations,
    run_gp_algorithm,
)
from dpaudit_plugins.kusner_bo.gp_sensitivity import public_constants
from dpaudit_plugins.kusner_bo.losses import get_loss
from dpaudit_plugins.kusner_bo.tasks import AdultSplit, SgdTask, ThresholdTask, adult_split

if TYPE_CHECKING:
    from dpaudit.data.catalog import DataSet
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Session

PLUGIN_NAME = "kusner-bo"
VERSION = "0.2.0"
VALIDATION_NAME = SLICE_VALIDATION_NAME
TRAINING_NAME = SLICE_TRAINING_NAME


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """Run the configured algorithm and return its public results.

    Raises:
        PluginError: the session does not protect :data:`VALIDATION_NAME` or list :data:`TRAINING_NAME` as public.
        InvalidParameter: a bad configuration.
        BudgetExceeded: the releases do not fit the budget (checked before any evaluation).
    """
    cfg = parse_config(config)
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    require_data(view, protected=(VALIDATION_NAME,), public=(TRAINING_NAME,))
    if isinstance(cfg, Algorithm3Config):
        return _run_algorithm3(view, cfg)
    return _run_gp(view, cfg)


def read_split(session: PluginSession, train_rows: int, validation_rows: int) -> tuple[DataSet, DataSet]:
    """The public training records (ids below ``train_rows``) and the protected validation records (the next
    ``validation_rows`` ids), through the session."""
    return (session.data(TRAINING_NAME, rows=train_rows),
            session.data(VALIDATION_NAME, offset=train_rows, rows=validation_rows))


def _run_algorithm3(session: PluginSession, cfg: Algorithm3Config) -> dict[str, Any]:
    train, validation = read_split(session, cfg.train_rows, cfg.validation_rows)
    loss = get_loss(cfg.loss)
    proposer = gp_ucb_proposer(cfg.lambdas, session.device) if cfg.proposer == "gp-ucb" else None
    release = run_algorithm3(session, train.X, train.y, validation.X, validation.y, cfg.lambdas, loss=loss,
                             epsilon=cfg.epsilon, T=cfg.T, validation_size=cfg.validation_size,
                             solver_tolerance=cfg.solver_tolerance,
                             proposer=proposer)
    return {"algorithm": 3, "released_best_validation_score": release.value, "epsilon": release.epsilon,
            "sensitivity": release.sensitivity.value, "loss": loss.name, "lambdas": list(cfg.lambdas), "T": cfg.T,
            "validation_size": cfg.validation_size, "proposer": cfg.proposer,
            "guarantee": "unconditional pure ε-DP for the validation set; the training set is public"}


def build_task(cfg: GpConfig, device: object, split: AdultSplit) -> SgdTask | ThresholdTask:
    """The configured Adult task on ``split`` (public: the grid and the training split)."""
    if cfg.algorithm == 1:
        return SgdTask.build(split, (*cfg.log10_learning_rate, cfg.grid_points), (*cfg.log10_lambda, cfg.grid_points),
                             batch_size=cfg.batch_size, epochs=cfg.epochs, device=device)
    return ThresholdTask.build(split, (*cfg.log10_lambda, cfg.grid_points), (*cfg.threshold, cfg.grid_points))


def _run_gp(session: PluginSession, cfg: GpConfig) -> dict[str, Any]:
    task = build_task(cfg, session.device, adult_split(*read_split(session, cfg.train_rows, cfg.validation_rows)))
    split = task.split
    model = GpModel(cfg.kernel, cfg.k1, cfg.gain)

    def gain(accuracy: float) -> float:
        return (accuracy - cfg.gain_offset) / cfg.gain_scale

    if isinstance(task, SgdTask):
        observations: NoisyObservations | ExactObservations = NoisyObservations(cfg.sigma)

        def objective(i: int) -> float:  # a fresh SGD order per evaluation: the observation noise
            return gain(task.evaluate(i, split.X_val, split.y_val, seed=draw_seed(session.rng)))
    else:
        observations = ExactObservations(cfg.A, cfg.tau)

        def objective(i: int) -> float:
            return gain(task.evaluate(i, split.X_val, split.y_val))

    coordinates = task.space.coordinates
    constants = public_constants(model, observations, coordinates, cfg.T, cfg.delta)
    session.record_info({"algorithm": cfg.algorithm, "constants": constants,
                                      "candidates": len(coordinates), "gain": cfg.gain})
    release = run_gp_algorithm(session, objective, coordinates, model=model, observations=observations, T=cfg.T,
                               epsilon=cfg.epsilon, delta=cfg.delta)
    return {"algorithm": cfg.algorithm, "released_hyperparameters": task.space.describe(release.index),
            "released_index": release.index, "released_value": release.value,
            # post-processing: the noisy value mapped back to accuracy and clipped to [0, 1]
            "released_accuracy": min(max(cfg.gain_offset + cfg.gain_scale * release.value, 0.0), 1.0),
            "epsilon_each": release.epsilon, "delta_each": release.delta,
            "index_sensitivity": release.index_sensitivity.value,
            "value_sensitivity": release.value_sensitivity.value, "constants": constants, "k1": cfg.k1,
            "kernel": {"name": cfg.kernel.name, "lengthscale": cfg.kernel.lengthscale}, "T": cfg.T,
            "device": str(session.device),
            "guarantee": (f"(ε, δ) = ({cfg.epsilon:g}, {release.index_sensitivity.failure_probability:g}) for λ̃ and "
                          f"({cfg.epsilon:g}, {release.value_sensitivity.failure_probability:g}) for the value, "
                          "composing to at most their sum, for the validation set, CONDITIONAL on Assumption 1 with "
                          "k1 >= "
                          f"{cfg.k1:g}; the training set is public")}
