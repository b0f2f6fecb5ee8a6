"""The MNIST-5000 MLP smoke task: a 10-class MLP trained by the kernel's DP-SGD under the plugin's charges, one per
model; its plan, worst case and configuration, and a seeded run through ``dpaudit run dpareto`` whose JSON output has
the front and the hypervolume with its reference point, every trial charged before it trains, and a verified
certificate."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from opacus.data_loader import DPDataLoader
from torch.utils.data import TensorDataset

from dpaudit.cli import main
from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.ledger import read_records
from dpaudit.sensitivity import Neighbouring
from dpaudit.tuning.training import train_private_loader
from dpaudit_plugins.dpareto import PLUGIN
from dpaudit_plugins.dpareto.config import parse_config
from dpaudit_plugins.dpareto.task import Task, check_dominated, epsilon_of_events
from dpaudit_plugins.dpareto.tasks_mnist import TEST_NAME, TRAIN_NAME, TRAIN_SIZE, build

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dpareto_mnist.json"


class _View:
    neighbouring = Neighbouring.ADD_REMOVE


POINT = {"epochs": 2, "batch_size": 100, "lr": 0.05, "noise_multiplier": 1.5, "max_grad_norm": 1.0}


def test_plan_is_one_poisson_event_per_replication_and_one_models_epsilon():
    task = build({"replications": 2})
    assert isinstance(task, Task) and task.architecture == "784-64-10" and task.n_parameters() == 50_890
    plan = task.plan(POINT, _View())
    assert len(plan.events) == 2 and len(set(plan.events)) == 1 and plan.models == 2
    event = plan.events[0]
    assert isinstance(event, PoissonSubsampledGaussianEvent) and event.neighbouring is Neighbouring.ADD_REMOVE
    assert event.sample_rate == pytest.approx(100 / TRAIN_SIZE) and event.steps == 2 * (TRAIN_SIZE // 100)
    epsilon, oracle = epsilon_of_events([event], 1e-5, "rdp")
    assert plan.epsilon == pytest.approx(epsilon) and oracle.sampling == "poisson" and oracle.delta == 1e-5


@pytest.mark.parametrize("config", [{}, {"max_epochs": 3, "lot": [128, 256]}])
def test_worst_case_dominates_every_corner_of_the_domain(config):
    task = build(config)
    worst = task.worst_case(_View())
    for corner in itertools.product(*[(p.lower, p.upper) for p in task.domain.parameters]):
        check_dominated(task.plan(task.domain.point(corner), _View()).events, worst)


def test_domain_is_the_papers_mnist_rows_reduced_for_a_smoke_test():
    bounds = [(p.name, p.lower, p.upper, p.scale) for p in build({}).domain.parameters]
    assert bounds == [("epochs", 1, 4, "linear"), ("batch_size", 16, 256, "log"), ("lr", 1e-3, 0.5, "log"),
                      ("noise_multiplier", 0.1, 16.0, "log"), ("max_grad_norm", 0.1, 12.0, "log")]


@pytest.mark.parametrize("config", [{"hidden": []}, {"hidden": "64"}, {"hidden": [0]}, {"max_epochs": 1},
                                    {"lot": [8, 256]}, {"lot": [256, 16]}, {"lot": [16, 512]}, {"lot": 64},
                                    {"lot": [16.5, 64]}, {"replications": 0}, {"delta": 0.0},
                                    {"accountant": "pld"}, {"epochs": 3}])
def test_bad_configuration_is_refused(config):
    with pytest.raises(InvalidParameter):
        parse_config({"task": {"name": "mnist-mlp-sgd", **config}, "method": "random", "n_trials": 1})


def test_a_private_front_is_refused_the_held_out_set_is_public():
    with pytest.raises(InvalidParameter, match="no evaluation set to protect"):
        parse_config({"task": {"name": "mnist-mlp-sgd"}, "method": "random", "n_trials": 1, "front": "private",
                      "evaluation_epsilon": 0.1})


def test_the_shipped_example_config_parses_and_the_plugin_declares_the_tasks_data():
    cfg = parse_config(json.loads(EXAMPLE.read_text(encoding="utf-8")))
    assert cfg.task.name == "mnist-mlp-sgd" and cfg.planned_trials == 8
    assert TRAIN_NAME in PLUGIN.protected and TEST_NAME in PLUGIN.public and TEST_NAME not in PLUGIN.protected


def test_multiclass_training_refuses_the_one_logit_public_metrics():
    loader = DPDataLoader(TensorDataset(torch.zeros(4, 1), torch.zeros(4, dtype=torch.int64)), sample_rate=0.5)
    with pytest.raises(InvalidParameter, match="multiclass"):
        train_private_loader(_View(), torch.nn.Linear(1, 2), loader, optimizer="sgd", lr=0.1, epochs=1,
                             max_grad_norm=1.0, noise_multiplier=1.0, label="x", public_eval=([[0.0]], [0]),
                             multiclass=True)


def test_a_charge_that_does_not_cover_the_trial_trains_nothing(make_session):
    """A model trains only under a charge that dominates its own run: under a charge for fewer steps nothing is
    claimed, trained or released."""
    task = build({"max_epochs": 2, "lot": [128, 256]})
    small = task.plan({**POINT, "epochs": 1, "batch_size": 128}, _View())
    with make_session(1e6, 1e-3, adaptive=True, protected=(TRAIN_NAME,), public=(TEST_NAME,)) as session:
        view = session.for_plugin("dpareto", "test")
        charges = tuple(view.charge(e, mechanism="dpareto-trial") for e in small.events)
        with pytest.raises(PluginError, match="not dominated"):
            task.evaluate({**POINT, "epochs": 2, "batch_size": 128}, charges, view, seed=1)
    records, _ = read_records(session.ledger_path)
    assert not [r for r in records if r.type == "release"]
    assert not [r for r in records if r.type == "info" and "charge_seq" in r.body.get("info", {})]


def test_dpaudit_run_dpareto_on_mnist_charges_every_trial_and_verifies(tmp_path):
    config = tmp_path / "mnist.json"
    config.write_text(json.dumps({"task": {"name": "mnist-mlp-sgd", "max_epochs": 2, "lot": [192, 256]},
                                  "method": "hvpoi", "n_initial": 2, "n_iterations": 1, "raw_samples": 64,
                                  "acquisition_maxiter": 10}))
    store = str(tmp_path / "runs")
    result = CliRunner().invoke(main, ["--store", store, "run", "dpareto", "--adaptive", "--epsilon", "1e6",
                                       "--delta", "1e-3", "--seed", "5", "--config", str(config), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    results = out["results"]
    assert results["hypervolume"]["reference_point"] == [10.0, 1.0] and results["hypervolume"]["value"] > 0
    assert results["front"] and len(results["trials"]) == 3
    assert results["task"]["model"].startswith("MLP 784-64-10")
    records, problems = read_records(Path(out["run_dir"]) / "ledger.jsonl")
    assert not problems
    charges = {r.seq: r for r in records if r.type == "charge"}
    runs = [r for r in records if r.type == "info" and "charge_seq" in r.body.get("info", {})]
    assert len(charges) == len(runs) == 3  # one charge per trial (one model each), one training run on each
    for run in runs:  # each charge is in the ledger before the run it pays for
        assert run.body["info"]["charge_seq"] in charges and run.body["info"]["charge_seq"] < run.seq
    for trial in results["trials"]:
        assert trial["certified"] and len(trial["charges"]) == 1 and 0.0 <= trial["error"] <= 1.0
        assert trial["epsilon_claim"]["models"] == [trial["charges"]]
    verified = CliRunner().invoke(main, ["--store", store, "verify", out["run_dir"], "--allow-not-for-release"])
    assert verified.exit_code == 0, verified.output
