"""The examples in examples/ run end to end at their smoke size (seeded), each with a verified certificate: (a) the
MNIST-5000 CNN tuned with randtune, (b) the diabetes regression MLP through constant-overhead on RMSE, (c) the user's
own CSV files and training loop with make_private, and the diabetes study file through ``dpaudit run --config``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import main as cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, low, high", [
    ("mnist_cnn_randtune", 0.0, 1.0),               # accuracy
    ("diabetes_mlp_constant_overhead", 0.0, 400.0),  # RMSE
    ("own_loop_make_private", 0.0, 1.0),             # accuracy
])
def test_example_runs_at_smoke_size_and_verifies(name, low, high):
    out = _example(name).main(smoke=True, seed=0)  # each example asserts its own verification
    assert low <= out["score"] <= high and out["epsilon"] > 0
    assert (Path(out["run_dir"]) / "certificate.json").exists()


def test_own_loop_meets_its_target_epsilon():
    assert _example("own_loop_make_private").main(smoke=True, seed=1)["epsilon"] <= 2.0


def test_the_study_file_example_runs_through_the_cli():
    result = CliRunner().invoke(cli, ["run", "--config", str(EXAMPLES / "diabetes_study.toml"), "--seed", "0",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["results"]["method"] == "constant-overhead" and out["claim"]["epsilon"] <= 8.0
    assert CliRunner().invoke(cli, ["verify", out["run_dir"], "--allow-not-for-release"]).exit_code == 0
