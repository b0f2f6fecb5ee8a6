"""``dpareto``: privacy-utility Pareto fronts by multi-objective Bayesian optimisation, every trial certified
(Avent, González, Diethe, Paleyes & Balle, PoPETs 2020), docs/plugins/dpareto.md.

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: dpareto``). The task interface a new trade-off implements is
:class:`~dpaudit_plugins.dpareto.task.Task` (registered by name in :mod:`dpaudit_plugins.dpareto.catalog`).
"""

from dpaudit.data.adult_a1a import TEST_NAME, TRAIN_NAME
from dpaudit.registry import Plugin
from dpaudit_plugins.dpareto.config import parse_config
from dpaudit_plugins.dpareto.plugin import PLUGIN_NAME, VERSION, run

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="Privacy-utility Pareto fronts (DPareto): two GPs on log epsilon and logit error, HVPoI or qLogNEHVI "
    "acquisition, random and grid baselines; every trial charged through the session, BO certified by the Renyi "
    "filter of an adaptive session; hypervolume against a recorded reference point",
    citation="Avent, Gonzalez, Diethe, Paleyes & Balle, Automatic Discovery of Privacy-Utility Pareto Fronts, "
    "PoPETs 2020 (Alg. 1, Sec. 3-4); Couckuyt, Deschrijver & Dhaene 2014 (HVPoI)",
    event_kinds=("poisson_subsampled_gaussian",),
    run=run,
    smoke_config={"task": {"name": "adult-logreg-sgd", "replications": 1, "rows": 600}, "method": "random",
                  "n_trials": 2},
    protected=(TRAIN_NAME,),  # the Adult tasks' training set (a1a construction); the SVT task reads no data
    public=(TEST_NAME,),
    dataset_size_public=True,  # DP-SGD's sampling rate q = B/n uses the training set's size (tasks_adult.py)
    check_config=parse_config,
)

__all__ = ["PLUGIN", "parse_config", "run"]
