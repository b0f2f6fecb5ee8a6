"""The ``kusner-bo`` plugin: Kusner et al. 2015, Algorithm 3 on Adult (docs/plugins/kusner-bo.md).

Adult's ``adult.data`` is split by record id (a record's own key, so a neighbouring data set keeps the split of
the shared records): ids < ``train_rows`` are the **public** training set; the next ``validation_rows`` ids are the
**protected** validation set, in record-id order (the canonical order the fixed-size score needs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpaudit.data.adult import load_adult
from dpaudit.errors import PluginError
from plugins.kusner_bo.algorithm3 import run_algorithm3
from plugins.kusner_bo.config import KusnerConfig
from plugins.kusner_bo.losses import get_loss

if TYPE_CHECKING:
    from dpaudit.session import Session

PLUGIN_NAME = "kusner-bo"
VERSION = "0.1.0"
VALIDATION_NAME = "adult-validation (protected)"
TRAINING_NAME = "adult-train-public (training part of kusner-bo, public)"


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """Run Algorithm 3 and return its public results: the noisy best validation score and its parameters.

    Raises:
        PluginError: the session does not protect :data:`VALIDATION_NAME`.
        InvalidParameter: a bad configuration.
    """
    cfg = KusnerConfig.from_mapping(config)
    if VALIDATION_NAME not in session.protected:
        raise PluginError(f"{PLUGIN_NAME} protects {VALIDATION_NAME!r}; open the Session with it in protected= "
                          f"(got {session.protected})")
    session.register_plugin(PLUGIN_NAME, VERSION)
    data = load_adult(train_rows=cfg.train_rows + cfg.validation_rows, test_rows=1)
    public = data.record_ids < cfg.train_rows
    loss = get_loss(cfg.loss)
    release = run_algorithm3(session, data.X_train[public], data.y_train[public], data.X_train[~public],
                             data.y_train[~public], cfg.lambdas, loss=loss, epsilon=cfg.epsilon, T=cfg.T,
                             validation_size=cfg.validation_size, solver_tolerance=cfg.solver_tolerance)
    return {"algorithm": 3, "released_best_validation_score": release.value, "epsilon": release.epsilon,
            "sensitivity": release.sensitivity.value, "loss": loss.name, "lambdas": list(cfg.lambdas), "T": cfg.T,
            "validation_size": cfg.validation_size,
            "guarantee": "unconditional pure ε-DP for the validation set; the training set is public"}
