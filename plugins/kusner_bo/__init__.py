"""``kusner-bo``: differentially private Bayesian optimisation (Kusner et al. 2015), docs/plugins/kusner-bo.md.

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: kusner-bo``). Importing this package registers Algorithm 3's
sensitivity formula (``kusner_alg3_best_validation``). Algorithm 3 only so far; Algorithms 1-2 are not implemented.
"""

from dpaudit.registry import Plugin
from plugins.kusner_bo.algorithm3 import Algorithm3Release, grid_proposer, run_algorithm3
from plugins.kusner_bo.plugin import PLUGIN_NAME, TRAINING_NAME, VALIDATION_NAME, VERSION, run
from plugins.kusner_bo.sensitivity import algorithm3_sensitivity

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="Private Bayesian optimisation (Kusner et al. 2015), Algorithm 3: the best validation score of "
    "L2-regularised logistic regression over a finite λ grid, released with the Laplace mechanism (pure ε-DP, "
    "validation set protected, training set public)",
    citation="Kusner, Gardner, Garnett & Weinberger, Differentially Private Bayesian Optimization, ICML 2015 "
    "(Algorithm 3, Theorem 7, Corollary 4)",
    event_kinds=("laplace",),
    run=run,
    smoke_config={"lambdas": [0.01, 0.1, 1.0], "loss": "ramp", "epsilon": 1.0, "T": 3, "train_rows": 500,
                  "validation_rows": 200},
    protected=(VALIDATION_NAME,),
    public=(TRAINING_NAME,),
)

__all__ = ["PLUGIN", "Algorithm3Release", "algorithm3_sensitivity", "grid_proposer", "run_algorithm3"]
