"""``randtune``: random-repetition private hyperparameter selection with DP-SGD (docs/plugins/randtune.md).

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: randtune``) and the Python API :func:`tune`.
"""

from dpaudit.registry import Plugin
from dpaudit.tuning import TUNING_PROTECTED, TUNING_PUBLIC
from dpaudit_plugins.randtune.base_event import REPETITION_ASSUMPTIONS, dominating_event
from dpaudit_plugins.randtune.config import RandTuneConfig
from dpaudit_plugins.randtune.plugin import PLUGIN_NAME, VERSION, RandTuneOutcome, run, tune

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="Private hyperparameter selection: K ~ geometric / truncated negative binomial / Poisson repetitions, "
    "each a DP-SGD training of a random candidate, best by public validation accuracy released; one "
    "repeat-and-select event charged before K is drawn",
    citation="Liu & Talwar 2019 (STOC), Thm. 3.4; Papernot & Steinke 2022 (ICLR), Thms. 2 and 6",
    event_kinds=("repeat_and_select", "poisson_subsampled_gaussian"),
    run=run,
    smoke_config={
        "candidates": [
            {"lr": 2.0, "max_grad_norm": 1.0, "noise_multiplier": 1.5, "epochs": 1, "batch_size": 40},
            {"lr": 0.5, "max_grad_norm": 0.5, "noise_multiplier": 1.5, "epochs": 1, "batch_size": 40},
        ],
        "distribution": "geometric", "gamma": 0.5, "train_rows": 2000, "test_rows": 1000,
    },
    protected=TUNING_PROTECTED,
    public=TUNING_PUBLIC,
    dataset_size_public=True,  # DP-SGD's sampling rate q = B/n uses n (assumption dataset-size-public)
    check_config=RandTuneConfig.from_mapping,  # `dpaudit run` refuses a bad config before opening a run
)

__all__ = ["PLUGIN", "REPETITION_ASSUMPTIONS", "RandTuneConfig", "RandTuneOutcome", "dominating_event", "tune"]
