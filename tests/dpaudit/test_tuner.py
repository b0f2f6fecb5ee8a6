"""dpaudit.tune over the user's trainer (dpaudit/tuner.py, dpaudit/tuning/user.py and the plugins' ``user``
modules): each method certifies and verifies; the candidates come from the session's randomness; randtune's
repetitions write nothing and the released output does not depend on K; constant-overhead's partition models are
never charged and its objective is rescaled to [0, 1]; a trainer that escapes its setting, skips make_private or
returns another model is refused; a plan the budget cannot pay for trains nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import dpaudit
from dpaudit.errors import BudgetExceeded, InvalidParameter, PluginError, UncoveredRelease
from dpaudit.ledger import read_records
from dpaudit.tuning.user import Objective
from dpaudit.verify import verify_bundle

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

N = 240
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, 4)).astype(np.float32)
W = _rng.normal(size=4)
Y = (X @ W > 0).astype(np.int64)
XV = _rng.normal(size=(100, 4)).astype(np.float32)
YV = (XV @ W > 0).astype(np.int64)
SPACE = {"design": "grid", "parameters": {"lr": {"low": 0.1, "high": 1.0, "log": True, "points": 2},
                                          "batch_size": 40, "epochs": 1, "noise_multiplier": 1.0,
                                          "max_grad_norm": 1.0}}


def fit(trial, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> nn.Module:
    """Train ``model`` for ``trial`` through ``trial.make_private`` (a new SGD optimizer unless one is given)."""
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=trial.params["lr"])
    model, optimizer, loader = trial.make_private(
        module=model, optimizer=optimizer, data_loader=DataLoader(trial.dataset, batch_size=trial.params["batch_size"]))
    for _ in range(trial.params["epochs"]):
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    return model


def train(trial):
    return fit(trial, nn.Linear(4, 2))


def accuracy(model) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(XV)).argmax(1).numpy() == YV).mean())


def _tune(session, method, **kwargs):
    kwargs.setdefault("space", SPACE)
    kwargs.setdefault("train", train)
    options = {"randtune": {"gamma": 0.5}, "constant-overhead": {"record_ids": np.arange(N), "k": 3, "t_max": 2},
               "naive": {}}[method]
    return dpaudit.tune(session, method, score=accuracy, score_range=(0.0, 1.0), dataset=(X, Y),
                        **{**options, **kwargs})


def _records(session, kind):
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r for r in records if r.type == kind]


@pytest.mark.parametrize("method, charges", [("naive", 2), ("randtune", 1), ("constant-overhead", 2)])
def test_each_method_selects_certifies_and_verifies(make_session, method, charges):
    with make_session(20.0, 1e-5, seed=1) as session:
        result = _tune(session, method)
    assert result.selected is not None and result.selected["index"] in (0, 1)
    assert result.model_sha256 in {r.body["output"].get("model_sha256") for r in _records(session, "release")}
    assert len(_records(session, "charge")) == charges
    # the score's values leave: that it reads public data only is stated in what is certified
    assert "public-objective" in json.dumps([r.body for r in _records(session, "charge")])
    assert len(result.settings) == 2
    info = [r.body["info"] for r in _records(session, "info") if "settings" in r.body["info"]]
    assert info and info[0]["settings"] == list(result.settings)  # the space and its draws are recorded
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid


def test_randtune_writes_one_record_set_whatever_k(make_session):
    counts, repetitions = set(), set()
    for seed in range(4):  # different seeds draw different K (geometric, gamma = 0.5)
        calls = []

        def counted(trial, calls=calls):
            calls.append(trial)
            return train(trial)

        with make_session(20.0, 1e-5, seed=seed) as session:
            result = _tune(session, "randtune", train=counted)
        kinds = [r.type for r in read_records(session.ledger_path)[0]]
        counts.add((kinds.count("charge"), kinds.count("release"), kinds.count("info")))
        repetitions.add(len(calls))
        assert "repetitions" not in result.public and "K" not in result.public
    assert len(repetitions) > 1  # the seeds did draw different K, so the next line has power
    assert len(counts) == 1  # the ledger's shape does not reveal K


def test_candidates_do_not_depend_on_the_data(make_session):
    drawn = []
    for data in ((X, Y), (X[:120] * 3.0, 1 - Y[:120])):
        with make_session(20.0, 1e-5, seed=5) as session:
            space = {**SPACE, "design": "random", "samples": 3}
            drawn.append(dpaudit.tune(session, "naive", space=space, train=train, score=accuracy,
                                      score_range=(0.0, 1.0), dataset=data).settings)
    assert drawn[0] == drawn[1]


def test_constant_overhead_partition_models_are_uncharged_and_the_final_run_is_enveloped(make_session):
    calls = []

    def spy(trial):
        calls.append((trial.mode, len(trial.dataset)))
        return train(trial)

    with make_session(20.0, 1e-5, seed=2) as session:
        _tune(session, "constant-overhead", train=spy)
    partitions = [n for mode, n in calls if mode == "partition"]
    assert len(partitions) == 2 * 3 and sum(partitions) == 2 * N  # every setting on k = 3 disjoint partitions
    assert [mode for mode, _ in calls if mode != "partition"] == ["covered"]
    kinds = [r.body["event"].get("kind") for r in _records(session, "charge")]
    assert kinds[0] == "poisson_subsampled_gaussian" and len(kinds) == 2  # the envelope, then the rounds


def test_constant_overhead_needs_stable_record_ids(make_session):
    with make_session(20.0, 1e-5) as session, pytest.raises(InvalidParameter, match="record_ids"):
        dpaudit.tune(session, "constant-overhead", space=SPACE, train=train, score=accuracy, score_range=(0, 1),
                     dataset=(X, Y))


def test_objective_rescales_to_the_unit_interval_and_orders_nan_last():
    rmse = Objective(lambda m: 0.0, 0.0, 50.0, maximize=False)
    assert rmse.utility(0.0) == 1.0 and rmse.utility(50.0) == 0.0 and rmse.utility(10.0) == pytest.approx(0.8)
    acc = Objective(lambda m: 0.0, 0.0, 1.0)
    assert acc.utility(0.25) == 0.25 and acc.key(float("nan")) < acc.key(0.0)
    with pytest.raises(InvalidParameter, match="low < high"):
        Objective(lambda m: 0.0, 1.0, 1.0)


def test_a_trainer_that_escapes_its_setting_is_refused(make_session):
    def bigger_batch(trial):
        model = nn.Linear(4, 2)
        return trial.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                  data_loader=DataLoader(trial.dataset, batch_size=80))[0]

    def less_noise(trial):
        model = nn.Linear(4, 2)
        return trial.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                  data_loader=DataLoader(trial.dataset, batch_size=40), noise_multiplier=0.5)[0]

    def own_data(trial):
        model = nn.Linear(4, 2)
        loader = DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(Y)), batch_size=40)
        return trial.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                  data_loader=loader)[0]

    for bad, match in ((bigger_batch, "batch_size"), (less_noise, "noise_multiplier"), (own_data, "trial.dataset")):
        with make_session(20.0, 1e-5) as session, pytest.raises(InvalidParameter, match=match):
            _tune(session, "naive", train=bad)
        assert _records(session, "charge") == []


def test_a_trainer_that_skips_make_private_or_returns_another_model_is_refused(make_session):
    def plain(trial):
        return nn.Linear(4, 2)

    def swapped(trial):
        train(trial)
        return nn.Linear(4, 2)

    with make_session(20.0, 1e-5) as session, pytest.raises(PluginError, match="make_private"):
        _tune(session, "naive", train=plain)
    with make_session(20.0, 1e-5) as session, pytest.raises(UncoveredRelease, match="other than"):
        _tune(session, "randtune", train=swapped)


def test_a_plan_the_budget_cannot_pay_for_trains_nothing(make_session):
    calls = []

    def spy(trial):
        calls.append(trial)
        return train(trial)

    for method in ("naive", "randtune", "constant-overhead"):
        with make_session(0.5, 1e-5) as session, pytest.raises(BudgetExceeded):
            _tune(session, method, train=spy)
        assert calls == [] and _records(session, "charge") == []


def test_settings_must_fix_their_dp_sgd_parameters(make_session):
    space = {"parameters": {"lr": {"low": 0.1, "high": 1.0}, "batch_size": 40, "epochs": 1}}
    with make_session(20.0, 1e-5) as session, pytest.raises(InvalidParameter, match="noise_multiplier"):
        _tune(session, "naive", space=space)
    with make_session(20.0, 1e-5) as session, pytest.raises(InvalidParameter, match="method"):
        dpaudit.tune(session, "bayes", space=SPACE, train=train, score=accuracy, score_range=(0, 1), dataset=(X, Y))
