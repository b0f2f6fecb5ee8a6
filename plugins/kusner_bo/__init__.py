"""``kusner-bo``: differentially private Bayesian optimisation (Kusner et al. 2015), docs/plugins/kusner-bo.md.

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: kusner-bo``). Importing this package registers the
sensitivity formulas of Algorithm 3 (``kusner_alg3_best_validation``, unconditional) and of Algorithms 1-2
(``kusner_alg1_posterior_mean``, ``kusner_alg1_best_value``, ``kusner_alg2_best_value``, conditional on
Assumption 1, each failing with probability δ).
"""

from dpaudit.registry import Plugin
from dpaudit_plugins.kusner_bo.algorithm3 import Algorithm3Release, gp_ucb_proposer, grid_proposer, run_algorithm3
from dpaudit_plugins.kusner_bo.config import parse_config
from dpaudit_plugins.kusner_bo.gp_algorithms import (
    ExactObservations,
    GpModel,
    GpRelease,
    NoisyObservations,
    run_gp_algorithm,
)
from dpaudit_plugins.kusner_bo.plugin import PLUGIN_NAME, TRAINING_NAME, VALIDATION_NAME, VERSION, run
from dpaudit_plugins.kusner_bo.sensitivity import algorithm3_sensitivity

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="Private Bayesian optimisation (Kusner et al. 2015): Algorithms 1-2 (GP-UCB on GPyTorch; the best "
    "hyperparameters by the exponential mechanism and the best value by Laplace, (ε, δ) each, (ε, 5δ/3) for "
    "Algorithm 1's value, CONDITIONAL on the GP assumption with a stated k1) and Algorithm 3 (best validation "
    "score of L2-regularised ERM, unconditional pure ε-DP); validation set protected, training set public",
    citation="Kusner, Gardner, Garnett & Weinberger, Differentially Private Bayesian Optimization, ICML 2015 "
    "(Algorithms 1-3, Theorems 1, 3, 5, 7)",
    event_kinds=("exponential", "laplace"),
    run=run,
    smoke_config={"lambdas": [0.01, 0.1, 1.0], "loss": "ramp", "epsilon": 1.0, "T": 3, "train_rows": 500,
                  "validation_rows": 200},
    protected=(VALIDATION_NAME,),
    public=(TRAINING_NAME,),
    dataset_size_public=False,  # Algorithm 3 pads the validation set to the public size m0; n is never released
    check_config=parse_config,  # `dpaudit run` refuses a bad config before opening a run
)

__all__ = ["PLUGIN", "Algorithm3Release", "ExactObservations", "GpModel", "GpRelease", "NoisyObservations",
           "algorithm3_sensitivity", "gp_ucb_proposer", "grid_proposer", "run_algorithm3", "run_gp_algorithm"]
