"""``opacus-training``: DP-SGD and DP-Adam through Opacus inside an audited session (docs/plugins/opacus-training.md).

Exposes :data:`PLUGIN` (the entry point ``dpaudit.plugins: opacus-training``) and the Python API
:func:`train_private` / :func:`train_private_loader`.
"""

from dpaudit.data.adult import TEST_NAME, TRAIN_NAME
from dpaudit.registry import Plugin
from dpaudit_plugins.opacus_training.config import TrainingConfig
from dpaudit_plugins.opacus_training.plugin import VERSION, run
from dpaudit_plugins.opacus_training.training import (
    PLUGIN_NAME,
    CappedDPOptimizer,
    SamplingPlan,
    TrainResult,
    dp_sgd_event,
    evaluate,
    plan_from_loader,
    state_dict_sha256,
    train_private,
    train_private_loader,
)

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="DP-SGD / DP-Adam training of a logistic regression or MLP on Adult with Opacus, Poisson sampling, "
    "charged as one Poisson-subsampled Gaussian event before the first step",
    citation="Abadi et al. 2016; Opacus (Yousefpour et al. 2021)",
    event_kinds=("poisson_subsampled_gaussian",),
    run=run,
    smoke_config={"model": "logreg", "optimizer": "sgd", "lr": 2.0, "epochs": 1, "batch_size": 40,
                  "max_grad_norm": 1.0, "noise_multiplier": 1.0, "data": "adult", "train_rows": 2000,
                  "test_rows": 1000},
    protected=(TRAIN_NAME,),
    public=(TEST_NAME,),
)

__all__ = [
    "PLUGIN",
    "CappedDPOptimizer",
    "SamplingPlan",
    "TrainResult",
    "TrainingConfig",
    "dp_sgd_event",
    "evaluate",
    "plan_from_loader",
    "state_dict_sha256",
    "train_private",
    "train_private_loader",
]
