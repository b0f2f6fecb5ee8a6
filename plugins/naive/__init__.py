"""``naive``: every candidate trained with DP-SGD, the best released, budget by composition (docs/plugins/naive.md).

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: naive``) and the Python API :func:`tune`.
"""

from dpaudit.registry import Plugin
from dpaudit.tuning import TUNING_PROTECTED, TUNING_PUBLIC
from dpaudit_plugins.naive.config import NaiveConfig
from dpaudit_plugins.naive.plugin import PLUGIN_NAME, VERSION, NaiveOutcome, composition_bounds, run, tune

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="Baseline private hyperparameter selection: every candidate trained with DP-SGD (one charge each), "
    "the best by public validation accuracy released, total by the tightest composition",
    citation="Abadi et al. 2016 (DP-SGD); composition as in dpaudit's accountants (Mironov 2017; KOV 2015; "
    "Dwork & Roth 2014); the naive baseline of Ding et al. (Table 1)",
    event_kinds=("poisson_subsampled_gaussian",),
    run=run,
    smoke_config={
        "candidates": [
            {"lr": 2.0, "max_grad_norm": 1.0, "noise_multiplier": 1.5, "epochs": 1, "batch_size": 40},
            {"lr": 0.5, "max_grad_norm": 0.5, "noise_multiplier": 2.0, "epochs": 1, "batch_size": 40},
        ],
        "train_rows": 2000, "test_rows": 1000,
    },
    protected=TUNING_PROTECTED,
    public=TUNING_PUBLIC,
    dataset_size_public=True,  # DP-SGD's sampling rate q = B/n uses n (assumption dataset-size-public)
    check_config=NaiveConfig.from_mapping,  # `dpaudit run` refuses a bad config before opening a run
)

__all__ = ["PLUGIN", "NaiveConfig", "NaiveOutcome", "composition_bounds", "tune"]
