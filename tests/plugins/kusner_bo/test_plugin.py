"""The ``kusner-bo`` plugin end to end on Adult (Algorithm 3): public results, verified certificate, refusals."""

from __future__ import annotations

import math

import pytest

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.registry import load_plugins
from dpaudit.verify import verify_bundle
from plugins.kusner_bo import PLUGIN
from plugins.kusner_bo.config import KusnerConfig
from plugins.kusner_bo.plugin import TRAINING_NAME, VALIDATION_NAME


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
    {"lambdas": [1.0], "algorithm": 1},
    {"lambdas": []},
    {"lambdas": [0.0]},
    {"lambdas": [1.0], "loss": "hinge"},
    {"lambdas": [1.0], "colour": "red"},
    {"lambdas": [1.0], "epsilon": -1.0},
])
def test_bad_config_raises(config):
    with pytest.raises(InvalidParameter):
        KusnerConfig.from_mapping(config)


def test_validation_size_defaults_to_validation_rows():
    assert KusnerConfig.from_mapping({"lambdas": [1.0], "validation_rows": 37}).validation_size == 37
