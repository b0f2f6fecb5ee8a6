"""The Adult tasks (Avent et al. 2020, Table 1): the plan charges one Poisson-subsampled Gaussian event per
replication, the point's ε is one model's, the worst case dominates the domain, and a run through the plugin charges
every trial before training and verifies."""

from __future__ import annotations

import itertools
import json

import pytest

from dpaudit.data.adult_a1a import TEST_NAME, TRAIN_NAME
from dpaudit.errors import InvalidParameter
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.ledger import read_records
from dpaudit.sensitivity import Neighbouring
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dpareto.config import parse_config
from dpaudit_plugins.dpareto.plugin import explore
from dpaudit_plugins.dpareto.task import Task, check_dominated, epsilon_of_events
from dpaudit_plugins.dpareto.tasks_adult import TRAIN_SIZE, build_logreg_adam, build_logreg_sgd, build_svm_sgd


class _View:
    neighbouring = Neighbouring.ADD_REMOVE


POINT = {"epochs": 3, "batch_size": 100, "lr": 0.01, "noise_multiplier": 2.0, "max_grad_norm": 1.0}


def test_plan_is_one_event_per_replication_and_one_models_epsilon():
    task = build_logreg_sgd({"replications": 3})
    assert isinstance(task, Task) and TRAIN_SIZE == 30956
    plan = task.plan(POINT, _View())
    assert len(plan.events) == 3 and len(set(plan.events)) == 1
    event = plan.events[0]
    assert isinstance(event, PoissonSubsampledGaussianEvent)
    assert event.sample_rate == pytest.approx(100 / 30956) and event.steps == 3 * (30956 // 100)
    assert event.noise_multiplier == 2.0 and event.neighbouring is Neighbouring.ADD_REMOVE
    epsilon, oracle = epsilon_of_events([event], 1e-5)
    assert plan.epsilon == pytest.approx(epsilon) and oracle.sampling == "poisson" and oracle.delta == 1e-5


def test_worst_case_dominates_every_corner_of_table_1():
    task = build_svm_sgd({"replications": 2})
    assert [(p.lower, p.upper) for p in task.domain.parameters] == [(1, 64), (8, 512), (5e-4, 5e-2), (0.1, 16.0),
                                                                     (0.1, 4.0)]
    worst = task.worst_case(_View())
    for corner in itertools.product(*[(p.lower, p.upper) for p in task.domain.parameters]):
        check_dominated(task.plan(task.domain.point(corner), _View()).events, worst)


@pytest.mark.parametrize("config", [{"replications": 0}, {"delta": 0.0}, {"rows": 0}, {"rows": 511},
                                    {"rows": 512}, {"replicas": 2}, {"accountant": "pld"},
                                    {"accountant": "nope"}])
def test_bad_configuration_is_refused(config):
    with pytest.raises(InvalidParameter):
        build_logreg_adam(config)


def test_a_random_search_through_the_plugin_charges_each_replication_and_verifies(make_session):
    cfg = parse_config({"task": {"name": "adult-logreg-adam", "replications": 2, "rows": 600}, "method": "random",
                        "n_trials": 2})
    with make_session(1e6, 1e-3, adaptive=True, protected=(TRAIN_NAME,), public=(TEST_NAME,)) as session:
        out = explore(session, cfg)
    records, problems = read_records(session.ledger_path)
    assert not problems
    charges = [r for r in records if r.type == "charge"]
    releases = [r for r in records if r.type == "release"]
    assert len(charges) == len(releases) == 4  # 2 trials x 2 replications, each released once (its digest)
    for trial in out["trials"]:
        assert 0.0 <= trial["error"] <= 1.0 and len(trial["charges"]) == 2
    charge_seqs = {r.seq for r in charges}
    first_training = min(r.seq for r in records if r.type == "info" and "charge_seq" in r.body.get("info", {}))
    assert min(charge_seqs) < first_training
    certificate = json.loads(session.certificate_path.read_text(encoding="utf-8"))
    assert TRAIN_NAME in json.dumps(certificate)
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert report.valid and "epsilon-claims" in {c.name for c in report.checks}
    ledgered = [r.body["info"]["dpareto_trial"] for r in records
                if r.type == "info" and "dpareto_trial" in r.body.get("info", {})]
    for trial, point in zip(ledgered, out["trials"], strict=True):  # ε about each replication, one claim each
        assert trial["certified"] is True and trial["epsilon_claim"]["accountant"] == "rdp"
        assert trial["epsilon_claim"]["models"] == [[seq] for seq in point["charges"]]


def test_rows_at_the_largest_lot_and_a_pld_accountant_are_refused_at_parse_time():
    """rows = 512 made q = 1 at lot 512 (an internal error after the charges); "pld" made the worst case's ε a PLD
    of 247,616 steps at σ = 0.1 (memory exhausted): both are refused when the configuration is parsed."""
    for task in ({"name": "adult-logreg-sgd", "rows": 512}, {"name": "adult-svm-sgd", "accountant": "pld"}):
        with pytest.raises(InvalidParameter, match="rows must be more than 512|accountant must be one of"):
            parse_config({"task": task, "method": "random", "n_trials": 1})

