"""``constant-overhead``: private hyperparameter selection with constant privacy overhead (Ding, Wu, Xu & Pan 2023,
Alg. 1) followed by DP-SGD training, in one audited session (docs/plugins/constant-overhead.md).

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: constant-overhead``) and the pieces it is built from:
record-keyed partitions, the aggregated utility and its sensitivity formula, the elastic loop and the proposers.
"""

from dpaudit.registry import Plugin
from dpaudit.tuning import TUNING_PROTECTED, TUNING_PUBLIC, Candidate
from dpaudit_plugins.constant_overhead.candidates import default_grid
from dpaudit_plugins.constant_overhead.config import ConstantOverheadConfig
from dpaudit_plugins.constant_overhead.formulas import FORMULA_ID
from dpaudit_plugins.constant_overhead.loop import Iteration, LoopResult, LoopState, Proposer, advance, run_elastic_loop
from dpaudit_plugins.constant_overhead.partition import (
                    assign_partitions,
                    draw_partition_key,
                    partition_members,
                    partition_of,
)
from dpaudit_plugins.constant_overhead.plugin import PLUGIN_NAME, VERSION, run
from dpaudit_plugins.constant_overhead.proposers import GridProposer, LocalPerturbationProposer
from dpaudit_plugins.constant_overhead.utility import PartitionUtilities, aggregate_utility

SMOKE_CANDIDATES = [{"lr": lr, "max_grad_norm": 1.0, "noise_multiplier": 1.0, "epochs": 1, "batch_size": 64}
                    for lr in (0.5, 2.0, 8.0)]

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="constant-overhead private hyperparameter selection (k record-keyed partitions, elastic AboveThreshold "
    "loop charged for T_max rounds up front), then DP-SGD training of the selected candidate",
    citation="Ding, Wu, Xu & Pan 2023 (Constant-overhead differentially private hyperparameter tuning), Alg. 1; "
    "Dwork & Roth 2014, Alg. 1 (AboveThreshold); Abadi et al. 2016 (DP-SGD)",
    event_kinds=("above_threshold", "poisson_subsampled_gaussian"),
    run=run,
    smoke_config={"candidates": SMOKE_CANDIDATES, "k": 4, "epsilon_round": 0.5, "t_max": 3, "u0": 0.5,
                  "granularity": 0.1, "train_rows": 2000, "test_rows": 1000},
    protected=TUNING_PROTECTED,
    public=TUNING_PUBLIC,
    dataset_size_public=True,  # DP-SGD's sampling rate q = B/n uses n (assumption dataset-size-public)
    check_config=ConstantOverheadConfig.from_mapping,  # `dpaudit run` refuses a bad config before opening a run
)

__all__ = [
    "FINAL_TEST_NAME",
    "FORMULA_ID",
    "PLUGIN",
    "VALIDATION_NAME",
    "Candidate",
    "ConstantOverheadConfig",
    "GridProposer",
    "Iteration",
    "LocalPerturbationProposer",
    "LoopResult",
    "LoopState",
    "PartitionUtilities",
    "Proposer",
    "advance",
    "aggregate_utility",
    "assign_partitions",
    "default_grid",
    "draw_partition_key",
    "partition_members",
    "partition_of",
    "run_elastic_loop",
]
