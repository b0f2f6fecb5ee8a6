"""The ``opacus-training`` plugin's entry: train a classifier on Adult with DP-SGD / DP-Adam inside a session.

A thin plugin over the tuning kit (:mod:`dpaudit.tuning`): the data comes through the session, the training is
:func:`dpaudit.tuning.train_private`, and everything is attributed to this plugin through its view of the session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpaudit.data.catalog import TEST_NAME, TRAIN_NAME
from dpaudit.tuning import MECHANISMS, draw_seed, evaluate, require_data, seeded_model, train_private
from dpaudit_plugins.opacus_training.config import TrainingConfig

if TYPE_CHECKING:
    from dpaudit.session import Session

PLUGIN_NAME = "opacus-training"
VERSION = "0.1.0"


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """Train the configured model on the private Adult training set; return public results only.

    The model is initialised from a seed drawn from ``session.rng`` (data-independent), trained with
    :func:`~dpaudit.tuning.training.train_private`, and evaluated on the public Adult test set.

    Args:
        session: an open session whose ``protected`` tuple names ``"adult-train"`` and whose ``public`` tuple
            names ``"adult-test"``.
        config: :class:`~dpaudit_plugins.opacus_training.config.TrainingConfig` fields.

    Returns:
        Public results: the model digest and size, the charged and realised steps, q, and the unnoised metrics on
        the public test set. The (confidential) training loss is not included.

    Raises:
        PluginError: the session does not declare the Adult training set as protected and the test set as public.
        BudgetExceeded: the session cannot pay for the planned steps (nothing is trained).
    """
    cfg = TrainingConfig.from_mapping(config)
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    require_data(view, protected=(TRAIN_NAME,), public=(TEST_NAME,))
    train = view.data(TRAIN_NAME, rows=cfg.train_rows)
    test = view.data(TEST_NAME, rows=cfg.test_rows)
    model = seeded_model(cfg.model, train.X.shape[1], cfg.hidden, draw_seed(view.rng))
    mechanism = MECHANISMS[cfg.optimizer]
    result = train_private(
        view, model, train.X, train.y,
        optimizer=cfg.optimizer, lr=cfg.lr, epochs=cfg.epochs, batch_size=cfg.batch_size,
        max_grad_norm=cfg.max_grad_norm, noise_multiplier=cfg.noise_multiplier,
        label=f"{mechanism} {cfg.model} on {TRAIN_NAME}", public_eval=(test.X, test.y),
    )
    metrics = evaluate(result.model, test.X, test.y, view.device)
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
