"""The ``kusner-bo`` plugin end to end on Adult (Algorithms 1-3): public results, verified certificates, refusals."""

from __future__ import annotations

import math

import pytest

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.registry import load_plugins
from dpaudit.verify import verify_bundle
from dpaudit_plugins.kusner_bo import PLUGIN
from dpaudit_plugins.kusner_bo.config import GpConfig, parse_config
from dpaudit_plugins.kusner_bo.plugin import TRAINING_NAME, VALIDATION_NAME


def test_plugin_is_registered():
    assert load_plugins()["kusner-bo"] is PLUGIN


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace_one"])
def test_smoke_run_releases_one_laplace_value_and_verifies(make_session, neighbouring):
    with make_session(epsilon=2.0, neighbouring=neighbouring, protected=(VALIDATION_NAME,),
                      public=(TRAINING_NAME,)) as s:
        out = PLUGIN.run(s, PLUGIN.smoke_config)
        assert s.spent_epsilon() == pytest.approx(1.0, rel=1e-6)
    # ramp loss, Λ = {0.01, 0.1, 1}, m₀ = 200: 1·(100 − 1) + min(1, 2/0.01)/200 plus the τ = 1e-9 slack
    assert out["sensitivity"] == pytest.approx(99.0 + 1 / 200, rel=1e-6)
    assert math.isfinite(out["released_best_validation_score"])
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def test_session_must_protect_the_validation_set(make_session):
    with make_session(protected=("something else",)) as s, pytest.raises(PluginError, match="adult-validation"):
        PLUGIN.run(s, PLUGIN.smoke_config)


@pytest.mark.parametrize("config", [
    {"lambdas": [1.0], "algorithm": 1},          # an Algorithm 3 key in an Algorithm 1 config
    {"algorithm": 2, "sigma": 0.1},              # Algorithm 1's key in Algorithm 2
    {"algorithm": 4},
    {"algorithm": True},
    {"lambdas": []},
    {"lambdas": [0.0]},
    {"lambdas": [1.0], "loss": "hinge"},
    {"lambdas": [1.0], "colour": "red"},
    {"lambdas": [1.0], "epsilon": -1.0},
    {"lambdas": [1.0], "proposer": "random"},
    {"algorithm": 1, "k1": 1.5},
    {"algorithm": 1, "delta": 1.0},
    {"algorithm": 1, "kernel": "rbf"},
    {"algorithm": 1, "lengthscale": 0},
    {"algorithm": 1, "epsilon": float("nan")},
    {"algorithm": 2, "T": 1},
    {"algorithm": 2, "A": -1},
    {"algorithm": 2, "threshold": [0.0, 0.5]},
    {"algorithm": 2, "log10_lambda": [0, -1]},
    {"algorithm": 2, "log10_lambda": "low"},
])
def test_bad_config_raises(config):
    with pytest.raises(InvalidParameter):
        parse_config(config)


def test_validation_size_defaults_to_validation_rows():
    assert parse_config({"lambdas": [1.0], "validation_rows": 37}).validation_size == 37


def test_gp_defaults():
    cfg = parse_config({"algorithm": 1})
    assert isinstance(cfg, GpConfig) and cfg.k1 == 0.95 and cfg.kernel.name == "matern52" and cfg.T == 20


SMALL = {"T": 4, "grid_points": 3, "train_rows": 400, "validation_rows": 200, "epsilon": 2.0, "delta": 1e-5}


@pytest.mark.parametrize("algorithm, extra", [(1, {"sigma": 0.2}), (2, {"A": 1.0, "tau": 0.1})])
def test_gp_algorithms_release_hyperparameters_and_value_and_verify(make_session, algorithm, extra):
    with make_session(epsilon=4.5, delta=3e-5, protected=(VALIDATION_NAME,), public=(TRAINING_NAME,)) as s:
        out = PLUGIN.run(s, {"algorithm": algorithm, **SMALL, **extra})
    assert out["algorithm"] == algorithm and 0 <= out["released_index"] < 9
    names = ("log10_learning_rate", "log10_lambda") if algorithm == 1 else ("log10_lambda", "threshold")
    assert set(out["released_hyperparameters"]) == set(names)
    assert 0.0 <= out["released_accuracy"] <= 1.0 and math.isfinite(out["released_value"])
    assert out["constants"]["exponential_sensitivity"] == out["index_sensitivity"]
    assert "CONDITIONAL" in out["guarantee"] and out["device"] in ("cpu", "cuda")
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    assert 3.99 < report.claim["epsilon"] <= 4.0 + 1e-9  # (2ε, δ + δ_s): two ε releases, δ_s = 5δ/3 for Alg. 1


def test_gp_ucb_proposer_for_algorithm3(make_session):
    with make_session(epsilon=2.0, protected=(VALIDATION_NAME,), public=(TRAINING_NAME,)) as s:
        out = PLUGIN.run(s, {**PLUGIN.smoke_config, "proposer": "gp-ucb"})
    assert out["proposer"] == "gp-ucb" and math.isfinite(out["released_best_validation_score"])
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_the_private_validation_size_is_never_published(make_session):
    """kusner-bo states its protected set's size private (``dataset_size_public=False``). Attack: a validation range
    that runs past the end of Adult, so the realised size (161 records, ids 32400-32560) differs from every public
    parameter (offset 32400, rows 300, m₀ 300); it must appear nowhere in the ledger's info records, the MLflow run
    (params, tags, non-release metrics) or the results."""
    from mlflow.tracking import MlflowClient

    from dpaudit.ledger import read_records
    from dpaudit.testing import mentions_number
    from dpaudit.tracking import MlflowMirror

    config = {**PLUGIN.smoke_config, "train_rows": 32400, "validation_rows": 300}
    with make_session(epsilon=2.0, protected=(VALIDATION_NAME,), public=(TRAINING_NAME,), mirror=True) as s:
        realised = len(s.data(VALIDATION_NAME, offset=32400, rows=300))
        out = PLUGIN.run(s, config)
    assert realised == 161 and not PLUGIN.dataset_size_public
    records, _ = read_records(s.ledger_path)
    run = MlflowMirror(MlflowClient().tracking_uri).find_run(s.run_id).data  # found by its tag dpaudit.run_id
    published = [[r.body for r in records if r.type == "info"], run.params, run.tags, out,
                 {k: v for k, v in run.metrics.items() if not k.startswith("release.")}]
    assert not [p for p in published if mentions_number(p, realised)]
