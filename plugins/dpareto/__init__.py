"""``dpareto``: privacy-utility Pareto fronts by multi-objective Bayesian optimisation, every trial certified
(Avent, González, Diethe, Paleyes & Balle, PoPETs 2020), docs/plugins/dpareto.md.

Exposes :data:`PLUGIN` (entry point ``dpaudit.plugins: dpareto``). The task interface a new trade-off implements is
:class:`~dpaudit_plugins.dpareto.task.Task` (registered by name in :mod:`dpaudit_plugins.dpareto.catalog`).
"""

from collections.abc import Mapping
from typing import Any

from dpaudit.data.adult_a1a import EVAL_NAME, TEST_NAME, TRAIN_NAME
from dpaudit.registry import Plugin
from dpaudit_plugins.dpareto.catalog import MNIST_TEST_NAME, MNIST_TRAIN_NAME
from dpaudit_plugins.dpareto.config import parse_config
from dpaudit_plugins.dpareto.plugin import PLUGIN_NAME, VERSION, run


def data_sets(config: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(protected, public): the configured task's data sets, so that ``dpaudit run`` declares only those (a private
    front's run does not list the public copy of the evaluation records it protects, nor a public-evaluation run the
    protected copy).

    Raises:
        InvalidParameter: a bad configuration.
    """
    task = parse_config(config).task
    return tuple(task.protected), tuple(task.public)

PLUGIN = Plugin(
    name=PLUGIN_NAME,
    version=VERSION,
    summary="Privacy-utility Pareto fronts (DPareto): two GPs on log epsilon and logit error, HVPoI or qLogNEHVI "
    "acquisition, random and grid baselines; every trial charged through the session, BO certified by the Renyi "
    "filter of an adaptive session; hypervolume against a recorded reference point; optionally a private front "
    "(errors on protected evaluation data released by the Laplace mechanism)",
    citation="Avent, Gonzalez, Diethe, Paleyes & Balle, Automatic Discovery of Privacy-Utility Pareto Fronts, "
    "PoPETs 2020 (Alg. 1, Sec. 3-4); Couckuyt, Deschrijver & Dhaene 2014 (HVPoI)",
    event_kinds=("poisson_subsampled_gaussian", "laplace"),  # laplace: the private front's error releases
    run=run,
    smoke_config={"task": {"name": "adult-logreg-sgd", "replications": 1, "rows": 600}, "method": "random",
                  "n_trials": 2},
    # the Adult tasks' training set (a1a construction) and, for the private front, the protected copy of its
    # evaluation records (a public-evaluation run never reads it; a private-front run never reads the public copy);
    # the SVT task reads no data; the MNIST smoke task trains on mnist-5000-train and evaluates on mnist-5000-test.
    # A run declares only its configured task's sets (data_for)
    protected=(TRAIN_NAME, EVAL_NAME, MNIST_TRAIN_NAME),
    public=(TEST_NAME, MNIST_TEST_NAME),
    data_for=data_sets,
    dataset_size_public=True,  # DP-SGD's q = B/n uses the training set's size (tasks_adult.py, tasks_mnist.py)
    check_config=parse_config,
)

__all__ = ["PLUGIN", "data_sets", "parse_config", "run"]
