"""The ``opacus-training`` plugin's entry: train a classifier on Adult with DP-SGD / DP-Adam inside a session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from dpaudit.data.adult import TEST_NAME, TRAIN_NAME, load_adult
from dpaudit.errors import PluginError
from dpaudit_plugins.opacus_training.config import TrainingConfig
from dpaudit_plugins.opacus_training.models import build_model
from dpaudit_plugins.opacus_training.training import MECHANISMS, PLUGIN_NAME, evaluate, train_private

if TYPE_CHECKING:
    from dpaudit.session import Session

VERSION = "0.1.0"
_SEED_RANGE = 2**63


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """Train the configured model on the private Adult training set; return public results only.

    The model is initialised from a seed drawn from ``session.rng`` (data-independent), trained with
    :func:`~dpaudit_plugins.opacus_training.training.train_private`, and evaluated on the public Adult test set.

    Args:
        session: an open session whose ``protected`` tuple names ``"adult-train"``.
        config: :class:`~dpaudit_plugins.opacus_training.config.TrainingConfig` fields.

    Returns:
        Public results: the model digest and size, the charged and realised steps, q, and the unnoised metrics on
        the public test set. The (confidential) training loss is not included.

    Raises:
        PluginError: the session does not protect the Adult training set.
        BudgetExceeded: the session cannot pay for the planned steps (nothing is trained).
    """
    cfg = TrainingConfig.from_mapping(config)
    if TRAIN_NAME not in session.protected:
        raise PluginError(f"{PLUGIN_NAME} trains on {TRAIN_NAME!r}; open the Session with it in protected= so that "
                          f"the certificate names it (got {session.protected})")
    session.register_plugin(PLUGIN_NAME, VERSION)
    data = load_adult(train_rows=cfg.train_rows, test_rows=cfg.test_rows)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(session.rng.randbelow(_SEED_RANGE))
        model = build_model(cfg.model, data.X_train.shape[1], cfg.hidden)
    mechanism = MECHANISMS[cfg.optimizer]
    result = train_private(
        session, model, data.X_train, data.y_train,
        optimizer=cfg.optimizer, lr=cfg.lr, epochs=cfg.epochs, batch_size=cfg.batch_size,
        max_grad_norm=cfg.max_grad_norm, noise_multiplier=cfg.noise_multiplier,
        label=f"{mechanism} {cfg.model} on {TRAIN_NAME}", public_eval=(data.X_test, data.y_test),
    )
    metrics = evaluate(result.model, data.X_test, data.y_test, session.device)
    return {
        "mechanism": mechanism,
        "model_sha256": result.model_sha256,
        "n_parameters": result.n_parameters,
        "planned_steps": result.planned_steps,
        "realised_steps": result.steps,
        "sample_rate": result.sample_rate,
        "charge_seq": result.charge_seq,
        "public_data": TEST_NAME,
        **metrics,
    }
