"""``opacus-training``: DP-SGD and DP-Adam through Opacus inside an audited session (docs/plugins/opacus-training.md).

Exposes :data:`PLUGIN` (the entry point ``dpaudit.plugins: opacus-training``). The training itself is the tuning
kit's (:func:`dpaudit.tuning.train_private`, :func:`dpaudit.tuning.train_private_loader`).
"""

from dpaudit.data.catalog import TEST_NAME, TRAIN_NAME
from dpaudit.registry import Plugin
from dpaudit_plugins.opacus_training.config import TrainingConfig
from dpaudit_plugins.opacus_training.plugin import PLUGIN_NAME, VERSION, run

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
    dataset_size_public=True,  # DP-SGD's sampling rate q = B/n uses n (assumption dataset-size-public)
    check_config=TrainingConfig.from_mapping,  # `dpaudit run` refuses a bad config before opening a run
)

__all__ = ["PLUGIN", "TrainingConfig"]
