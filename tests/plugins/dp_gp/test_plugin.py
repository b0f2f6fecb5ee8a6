"""The ``dp-gp`` plugin end to end: both methods release, verify and return public results; bad configurations and
sessions are refused; ``dpaudit run dp-gp --neighbouring replace_one`` certifies."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpaudit.cli import main
from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.registry import load_plugins
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dp_gp import PLUGIN, SMOKE_CONFIG, DpGpConfig


def test_plugin_is_registered():
    assert load_plugins()["dp-gp"] is PLUGIN


@pytest.mark.parametrize("method", ["cloaking", "standard"])
def test_both_methods_release_and_verify(make_session, method):
    with make_session(epsilon=2.0, neighbouring="replace_one", protected=PLUGIN.protected) as s:
        out = PLUGIN.run(s, {**SMOKE_CONFIG, "method": method})
    assert out["method"] == method and len(out["predictions"]) == 25 == len(out["noise_sd"])
    assert out["sensitivity_formula"] == ("dp_gp_cloaking" if method == "cloaking" else "dp_gp_standard_rkhs")
    if method == "cloaking":
        assert out["covariance"]["max_constraint"] == pytest.approx(1.0, abs=1e-9)
        assert out["sensitivity"] == pytest.approx((350 - 25) / 80, rel=1e-6)  # Δ = d once M is tight
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    assert "dp-gp-public-inputs" in json.dumps(json.loads(s.certificate_path.read_text(encoding="utf-8")))


def test_add_remove_session_is_refused(make_session):
    with make_session(protected=PLUGIN.protected) as s, pytest.raises(InvalidParameter, match="replace-one"):
        PLUGIN.run(s, SMOKE_CONFIG)


def test_session_must_protect_the_data_set(make_session):
    with make_session(neighbouring="replace_one", protected=("other",)) as s, \
            pytest.raises(PluginError, match="diabetes-train"):
        PLUGIN.run(s, SMOKE_CONFIG)


@pytest.mark.parametrize("change", [
    {"method": "laplace"},
    {"jitter": 1e-6},                               # a standard-method key in a cloaking config
    {"colour": "red"},
    {"epsilon": -1.0},
    {"delta": 1.0},
    {"clip_upper": 10.0},                           # below clip_lower
    {"scale": 0.0},
    {"lengthscale": 0.0},
    {"lengthscale": [1.0, 2.0]},                    # two lengthscales for one input
    {"inputs": "bmi"},
    {"test_points": [[1.0]]},                       # both test_points and test_grid
    {"test_grid": {"lower": [1.0], "upper": [0.0], "points": 3}},
    {"test_grid": {"lower": [1.0, 2.0], "upper": [3.0, 4.0], "points": 3}},  # 2-D test points, 1-D inputs
])
def test_bad_configs_are_refused_before_any_data(change):
    with pytest.raises(InvalidParameter):
        DpGpConfig.from_mapping({**SMOKE_CONFIG, **change})


def test_missing_test_points_are_refused():
    config = {k: v for k, v in SMOKE_CONFIG.items() if k != "test_grid"}
    with pytest.raises(InvalidParameter, match="exactly one of test_points"):
        DpGpConfig.from_mapping(config)


def test_cli_runs_dp_gp_under_replace_one(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**SMOKE_CONFIG, "method": "standard"}), encoding="utf-8")
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "run", "dp-gp", "--epsilon", "2", "--delta",
                                       "1e-5", "--seed", "0", "--neighbouring", "replace_one", "--config",
                                       str(tmp_path / "config.json"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["results"]["method"] == "standard"
    verified = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "verify", out["run_dir"],
                                         "--allow-not-for-release"])
    assert verified.exit_code == 0, verified.output


@pytest.mark.parametrize(("change", "key"), [
    ({"lengthscale": {"a": 1.0}}, "lengthscale"),
    ({"lengthscale": [[1.0]]}, "lengthscale"),
    ({"variance": "1.0"}, "variance"),
    ({"noise": None}, "noise"),
    ({"centre": [150.0]}, "centre"),
    ({"prior_mean": "0"}, "prior_mean"),
    ({"data": "adult-train"}, "diabetes-train"),
])
def test_bad_config_types_get_a_one_line_error_naming_the_key(tmp_path, change, key):
    """Before, a dict or nested lengthscale raised TypeError and a string variance a raw ValueError ("internal
    error" from the CLI), and another data set passed check_config and the run then closed REFUSED."""
    with pytest.raises(InvalidParameter, match=key):
        PLUGIN.check_config({**SMOKE_CONFIG, **change})
    (tmp_path / "config.json").write_text(json.dumps({**SMOKE_CONFIG, **change}), encoding="utf-8")
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "run", "dp-gp", "--epsilon", "2", "--delta",
                                       "1e-5", "--neighbouring", "replace_one", "--config",
                                       str(tmp_path / "config.json")])
    assert result.exit_code == 2, result.output
    assert key in result.output and "internal error" not in result.output
    assert not list((tmp_path / "runs").glob("**/ledger*")), "no run may be opened"


def test_cli_cloaking_at_a_single_test_point_verifies(tmp_path):
    """One test point makes C rank 1, which crashed the cloaking solver (the run closed FAILED)."""
    config = {k: v for k, v in SMOKE_CONFIG.items() if k != "test_grid"}
    (tmp_path / "config.json").write_text(json.dumps({**config, "test_points": [[30.0]]}), encoding="utf-8")
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "run", "dp-gp", "--epsilon", "2", "--delta",
                                       "1e-5", "--seed", "0", "--neighbouring", "replace_one", "--config",
                                       str(tmp_path / "config.json"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["results"]["covariance"]["rank"] == 1 and len(out["results"]["predictions"]) == 1
    verified = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "verify", out["run_dir"],
                                         "--allow-not-for-release"])
    assert verified.exit_code == 0, verified.output


def test_the_python_api_takes_another_protected_data_set():
    """Only the CLI's check is bound to diabetes-train: the experiments run dp-gp on sessions protecting other sets."""
    assert DpGpConfig.from_mapping({**SMOKE_CONFIG, "data": "howell1-women"}).data == "howell1-women"
