"""Study files (dpaudit/study.py, dpaudit/study_run.py, ``dpaudit run --config``): a TOML or JSON study is validated
in full before a run opens, every error names the file, the line and the key and exits 2 with no run created; a
valid study tunes, trains and certifies a run that verifies; a plain plugin configuration may be TOML too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import main
from dpaudit.study import StudyError, key_line, load_study, read_config

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

STUDY = """\
[study]
name = "diabetes"
method = "randtune"

[budget]
epsilon = 20.0
delta = 1e-5

[data.train]
source = "diabetes-train"
[data.validation]
source = "diabetes-test"

[model]
kind = "mlp"
hidden = [8]

[training]
loss = "mse"
optimizer = "adam"

[objective]
metric = "rmse"
range = [0.0, 200.0]

[space]
design = "random"
samples = 2
[space.parameters]
lr = { low = 0.01, high = 0.1, log = true }
batch_size = 64
epochs = 1
noise_multiplier = 1.0
max_grad_norm = 50.0

[method]
gamma = 0.5
"""


def _write(tmp_path: Path, text: str, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _runs(store: Path) -> list[Path]:
    return [p for p in store.iterdir() if (p / "ledger.jsonl").exists()] if store.exists() else []


def test_a_valid_study_parses_to_public_fixed_parameters(tmp_path):
    study = load_study(_write(tmp_path, STUDY))
    assert (study.method, study.epsilon, study.delta, study.model, study.hidden) == ("randtune", 20.0, 1e-5, "mlp",
                                                                                      (8,))
    assert study.train.name == "diabetes-train" and study.metric == "rmse" and study.score_range == (0.0, 200.0)
    assert [p.name for p in study.space.parameters][:2] == ["lr", "batch_size"]


@pytest.mark.parametrize("old, new, line, key", [
    ('epsilon = 20.0', 'epsilon = -1.0', 6, "budget.epsilon"),
    ('method = "randtune"', 'method = "bayes"', 3, "study.method"),
    ('lr = { low = 0.01, high = 0.1, log = true }', 'lr = { low = 0.0, high = 0.1, log = true }', 30,
     "space.parameters.lr"),
    ('kind = "mlp"', 'kind = "transformer"', 15, "model.kind"),
    ('metric = "rmse"', 'metric = "accuracy"', 23, "objective.metric"),
    ('range = [0.0, 200.0]', 'range = [200.0, 0.0]', 24, "objective.range"),
    ('optimizer = "adam"', 'optimiser = "adam"', 20, "training.optimiser"),
    ('max_grad_norm = 50.0', '', 29, "space.parameters"),
    ('gamma = 0.5', 'gama = 0.5', 37, "method.gama"),
    ('source = "diabetes-test"', 'source = "diabetes-test"\ntarget = "y"', 13, "data.validation.target"),
])
def test_errors_name_the_line_and_the_key(tmp_path, old, new, line, key):
    assert old in STUDY
    path = _write(tmp_path, STUDY.replace(old, new))
    with pytest.raises(StudyError) as err:
        load_study(path)
    assert str(err.value).startswith(f"{path}:{line}: {key}")


def test_a_syntax_error_names_tomllibs_line(tmp_path):
    with pytest.raises(StudyError, match=r"not valid TOML: .*line 7"):
        load_study(_write(tmp_path, STUDY.replace("delta = 1e-5", "delta = ")))


def test_key_line_finds_dotted_inline_and_enclosing_tables():
    text = 'a = 1\n[x.y]\nb = { c = 2 }\n"d".e = 3\n[z]\n'
    assert key_line(text, ("a",)) == 1
    assert key_line(text, ("x", "y", "b", "c")) == 3
    assert key_line(text, ("x", "y", "d", "e")) == 4
    assert key_line(text, ("x", "y", "missing")) == 2
    assert key_line(text, ("z", "q")) == 5 and key_line(text, ("nowhere",)) is None


def test_cli_refuses_a_bad_study_with_exit_2_before_any_run(tmp_path):
    store = tmp_path / "store"
    path = _write(tmp_path, STUDY.replace("epochs = 1", "epochs = 0"))
    result = CliRunner().invoke(main, ["--store", str(store), "run", "--config", str(path)])
    assert result.exit_code == 2 and f"{path}:" in result.output and "epochs" in result.output
    assert _runs(store) == []
    both = CliRunner().invoke(main, ["--store", str(store), "run", "--config", str(_write(tmp_path, STUDY)),
                                     "--epsilon", "1", "--delta", "1e-5"])
    assert both.exit_code == 2 and "study file" in both.output and _runs(store) == []
    none = CliRunner().invoke(main, ["--store", str(store), "run"])
    assert none.exit_code == 2 and "PLUGIN" in none.output


def test_cli_runs_a_toml_and_a_json_study_and_the_run_verifies(tmp_path):
    store = tmp_path / "store"
    json_path = _write(tmp_path, json.dumps(read_config(_write(tmp_path, STUDY))), "study.json")
    for path in (_write(tmp_path, STUDY), json_path):
        result = CliRunner().invoke(main, ["--store", str(store), "run", "--config", str(path), "--seed", "0",
                                           "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        out = json.loads(result.output.strip().splitlines()[-1])
        assert out["results"]["method"] == "randtune" and "repetitions" not in out["results"]
        verified = CliRunner().invoke(main, ["--store", str(store), "verify", out["run_dir"],
                                             "--allow-not-for-release"])
        assert verified.exit_code == 0, verified.output


def test_a_plugin_configuration_may_be_toml(tmp_path):
    path = _write(tmp_path, "candidates = [{ lr = 2.0, max_grad_norm = 1.0, noise_multiplier = 1.5, epochs = 1, "
                            "batch_size = 40 }]\ndistribution = \"geometric\"\ngamma = 0.5\ntrain_rows = 400\n"
                            "test_rows = 200\nbogus = 1\n", "randtune.toml")
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "s"), "run", "randtune", "--epsilon", "8",
                                       "--delta", "1e-5", "--config", str(path)])
    assert result.exit_code == 2 and "bogus" in result.output  # parsed as TOML, refused by the plugin's check


def factory(n_features: int, n_outputs: int, width: int = 4):
    """A user's own model, named in a study as ``tests.dpaudit.test_study:factory``."""
    from torch import nn

    return nn.Sequential(nn.Linear(n_features, width), nn.Tanh(), nn.Linear(width, n_outputs))


def test_a_study_on_the_users_csv_files_and_model_factory_verifies(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    for name, n in (("train.csv", 300), ("valid.csv", 100)):
        X = rng.normal(size=(n, 3))
        rows = np.column_stack([np.arange(n), X, (X.sum(axis=1) > 0).astype(int)])
        np.savetxt(tmp_path / name, rows, delimiter=",", header="id,a,b,c,label", comments="", fmt="%.6g")
    text = (STUDY.replace('method = "randtune"', 'method = "constant-overhead"')
            .replace('source = "diabetes-train"', 'csv = "train.csv"\ntarget = "label"\nid_column = "id"\n'
                     'classes = 2\nname = "mine"')
            .replace('source = "diabetes-test"', 'csv = "valid.csv"\ntarget = "label"\nid_column = "id"\n'
                     'classes = 2\nname = "mine-valid"')
            .replace('kind = "mlp"\nhidden = [8]', 'kind = "tests.dpaudit.test_study:factory"\noptions = { width = 3 }')
            .replace('loss = "mse"', 'loss = "cross_entropy"').replace('metric = "rmse"', 'metric = "accuracy"')
            .replace('range = [0.0, 200.0]', 'range = [0.0, 1.0]')
            .replace("max_grad_norm = 50.0", "max_grad_norm = 1.0")
            .replace("batch_size = 64", "batch_size = 50").replace("gamma = 0.5", "k = 3\nt_max = 2"))
    store = tmp_path / "store"
    result = CliRunner().invoke(main, ["--store", str(store), "run", "--config", str(_write(tmp_path, text)),
                                       "--seed", "1", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["results"]["method"] == "constant-overhead" and 0.0 <= out["results"]["score"] <= 1.0
    certificate = json.loads((Path(out["run_dir"]) / "certificate.json").read_text())
    assert "mine" in json.dumps(certificate)
    assert CliRunner().invoke(main, ["--store", str(store), "verify", out["run_dir"],
                                     "--allow-not-for-release"]).exit_code == 0
