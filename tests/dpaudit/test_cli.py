"""The command line: exit codes, JSON outputs and clear messages for bad input."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import main


@pytest.fixture
def run_dir(make_session) -> Path:
    with make_session(epsilon=1.0, delta=1e-6) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2, label="count")
        s.exponential([1.0, 2.0], sensitivity=1.0, epsilon=0.1, label="pick")
    return s.run_dir


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_account_dpsgd_json_is_an_upper_bound_at_least_as_tight_as_rdp():
    base = ["account", "dpsgd", "--sample-rate", "0.004", "--noise-multiplier", "1.1", "--steps", "10000",
            "--delta", "1e-5", "--json"]
    tight = json.loads(invoke(*base).output)
    rdp = json.loads(invoke(*base, "--accountant", "rdp").output)
    assert tight["upper_bound"] is True
    assert 0 < tight["epsilon"] <= rdp["epsilon"]


@pytest.mark.parametrize("bad", [["--delta", "1.5"], ["--delta", "nan"], ["--sample-rate", "-0.1"],
                                 ["--noise-multiplier", "0"], ["--steps", "0"]])
def test_account_bad_input_exits_2(bad):
    args = {"--sample-rate": "0.01", "--noise-multiplier": "1.0", "--steps": "100", "--delta": "1e-5"}
    args[bad[0]] = bad[1]
    result = CliRunner().invoke(main, ["account", "dpsgd", *[x for kv in args.items() for x in kv]])
    assert result.exit_code == 2
    assert "error:" in result.output


def test_verify_exit_codes(run_dir, tmp_path):
    ok = invoke("verify", str(run_dir), "--allow-not-for-release", "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["valid"] is True
    seeded = invoke("verify", str(run_dir))
    assert seeded.exit_code == 1 and "NOT FOR RELEASE" in seeded.output
    missing = CliRunner().invoke(main, ["verify", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2
    lines = (run_dir / "ledger.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "ledger.jsonl").write_text("".join(lines[:-1]))
    truncated = invoke("verify", str(run_dir), "--allow-not-for-release", "--json")
    assert truncated.exit_code == 1 and json.loads(truncated.output)["reasons"]


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_report_formats(run_dir, fmt):
    result = invoke("report", str(run_dir), "--format", fmt)
    assert result.exit_code == 0
    if fmt == "json":
        data = json.loads(result.output)
        assert {"certificate", "events"} <= set(data) and len(data["events"]) == 2
    else:
        assert "session/laplace" in result.output or "laplace" in result.output


def test_export_then_verify_offline(run_dir, tmp_path):
    out = tmp_path / "evidence"
    assert invoke("export", str(run_dir), str(out)).exit_code == 0
    assert {"ledger.jsonl", "certificate.json", "public_key.pem", "report.md"} <= {p.name for p in out.iterdir()}
    assert invoke("verify", str(out), "--allow-not-for-release").exit_code == 0


def test_plugins_list_json():
    result = invoke("plugins", "list", "--json")
    names = {p["name"] for p in json.loads(result.output)}
    assert "opacus-training" in names


def test_unknown_command_and_run_are_usage_errors(tmp_path):
    assert CliRunner().invoke(main, ["frobnicate"]).exit_code == 2
    result = CliRunner().invoke(main, ["--store", str(tmp_path), "report", "no-such-run"],
                                env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"})
    assert result.exit_code == 2 and "no-such-run" in result.output


def test_unreadable_ledger_is_reported_not_crashed(run_dir):
    """Garbage in the ledger makes verify exit 1 with the broken line named; report fails cleanly with exit 2."""
    with open(run_dir / "ledger.jsonl", "a", encoding="utf-8") as fh:
        fh.write("this is not json\n")
    result = invoke("verify", str(run_dir), "--allow-not-for-release", "--json")
    assert result.exit_code == 1
    assert any("ledger-chain" in r for r in json.loads(result.output)["reasons"])
    (run_dir / "ledger.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    result = CliRunner().invoke(main, ["verify", str(run_dir)])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output


def test_run_plugin_with_smoke_config_certifies(tmp_path):
    result = invoke("--store", str(tmp_path / "runs"), "run", "opacus-training", "--epsilon", "5", "--delta", "1e-5",
                    "--seed", "3", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert 0 < out["claim"]["epsilon"] <= 5
    assert invoke("--store", str(tmp_path / "runs"), "verify", out["run_dir"], "--allow-not-for-release").exit_code == 0


@pytest.mark.parametrize(("content", "message"), [("{not json", "not strict JSON"), ("[1, 2]", "JSON object"),
                                                  ('{"epochz": 1}', "unknown")])
def test_run_plugin_malformed_config_exits_2(tmp_path, content, message):
    config = tmp_path / "config.json"
    config.write_text(content)
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "run", "opacus-training", "--config",
                                       str(config), "--epsilon", "1", "--delta", "1e-5"])
    assert result.exit_code == 2 and message in result.output


def test_run_unknown_plugin_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["run", "no-such-plugin", "--epsilon", "1", "--delta", "1e-5"])
    assert result.exit_code == 2 and "unknown plugin" in result.output


def test_run_plugin_over_budget_exits_1_and_still_certifies_nothing_spent(tmp_path):
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "run", "opacus-training", "--epsilon",
                                       "0.01", "--delta", "1e-5", "--seed", "1"])
    assert result.exit_code == 1 and "budget" in result.output


def test_verify_in_a_fresh_process_knows_plugin_formulas(make_session):
    """A sensitivity formula registered by a plugin is recomputable by `dpaudit verify` in a new process."""
    import subprocess
    import sys

    import dpaudit_plugins.constant_overhead  # noqa: F401  (registers partition_average_utility)
    from dpaudit import from_formula

    with make_session(epsilon=1.0) as s:
        s.laplace(0.7, sensitivity=from_formula("partition_average_utility", "add_remove", k=10), epsilon=0.1)
    dpaudit_cli = Path(sys.executable).with_name("dpaudit")
    done = subprocess.run([str(dpaudit_cli), "verify", str(s.run_dir), "--allow-not-for-release"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 sensitivity recomputed" in done.stdout


# --- key trust, the trust store and the store log -----------------------------------------------------------------


def as_auditor(tmp_path: Path, *args: str):
    """Invoke on another machine: its own (empty) local store, the trust store of the test."""
    return CliRunner().invoke(main, list(args), env={"DPAUDIT_HOME": str(tmp_path / "auditor-store")},
                              catch_exceptions=False)


def test_forged_bundle_is_refused_unless_the_bundle_key_is_accepted(run_dir, tmp_path):
    from tests.dpaudit.test_verify import _forge_with_fresh_key

    bundle = tmp_path / "evidence"
    assert invoke("export", str(run_dir), str(bundle)).exit_code == 0
    fingerprint = _forge_with_fresh_key(bundle, tmp_path)
    refused = invoke("verify", str(bundle), "--allow-not-for-release")
    assert refused.exit_code == 1 and f"untrusted signing key {fingerprint}" in refused.output
    assert "INVALID (1 reason)\n" in refused.output
    as_json = json.loads(invoke("verify", str(bundle), "--allow-not-for-release", "--json").output)
    assert as_json["signing_key"]["fingerprint"] == fingerprint and as_json["signing_key"]["trusted"] is False
    accepted = invoke("verify", str(bundle), "--allow-not-for-release", "--accept-bundle-key")
    assert accepted.exit_code == 0 and "VALID, but the signing key was NOT PINNED" in accepted.output


def test_auditor_workflow_export_fingerprint_trust_verify(run_dir, tmp_path):
    """The owner exports the bundle and the key; the auditor pins the key (out of band), then verifies."""
    bundle = tmp_path / "evidence"
    assert invoke("export", str(run_dir), str(bundle)).exit_code == 0
    exported = json.loads(invoke("keys", "export", "--json").output)
    certificate = json.loads((bundle / "certificate.json").read_text())
    assert exported["fingerprint"] == certificate["public_key_fingerprint"]
    assert exported["fingerprint"] in invoke("report", str(run_dir)).output  # every report shows the key

    untrusted = as_auditor(tmp_path, "verify", str(bundle), "--allow-not-for-release")
    assert untrusted.exit_code == 1 and "(UNTRUSTED)" in untrusted.output
    pem = tmp_path / "owner.pem"
    pem.write_text(exported["public_key"])
    pinned = as_auditor(tmp_path, "verify", str(bundle), "--allow-not-for-release", "--trusted-key", str(pem))
    assert pinned.exit_code == 0 and "(trusted: --trusted-key)" in pinned.output

    trusted = as_auditor(tmp_path, "keys", "trust", exported["fingerprint"], "--name", "owner")
    assert trusted.exit_code == 0
    listed = json.loads(as_auditor(tmp_path, "keys", "list", "--json").output)
    assert [(k["fingerprint"], k["name"]) for k in listed["keys"]] == [(exported["fingerprint"], "owner")]
    verified = as_auditor(tmp_path, "verify", str(bundle), "--allow-not-for-release")
    assert verified.exit_code == 0 and "(trusted: trust store)" in verified.output
    assert as_auditor(tmp_path, "keys", "untrust", exported["fingerprint"]).exit_code == 0
    assert as_auditor(tmp_path, "verify", str(bundle), "--allow-not-for-release").exit_code == 1


@pytest.mark.parametrize("content, mode", [("{not json", 0o600), ('{"format": "x", "keys": []}', 0o600),
                                           ('{"format": "dpaudit-trust-store/1", "keys": []}', 0o666)])
def test_malformed_trust_store_exits_2(run_dir, tmp_path, content, mode):
    import os

    store = tmp_path / "config" / "trusted_keys.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(content)
    os.chmod(store, mode)
    for args in (["verify", str(run_dir), "--allow-not-for-release"], ["keys", "list"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "trust store" in result.output, result.output


def test_store_verification_with_log_head(run_dir, tmp_path):
    store = run_dir.parent
    head = invoke("log", "head").output.splitlines()[0]
    assert head.startswith("1:")
    ok = invoke("verify", "--store", str(store), "--log-head", head)
    assert ok.exit_code == 0 and "[ok] log-extends" in ok.output
    shutil.rmtree(run_dir)
    deleted = invoke("verify", "--store", str(store), "--log-head", head)
    assert deleted.exit_code == 1 and f"logged runs deleted: {run_dir.name}" in deleted.output


@pytest.mark.parametrize("args", [["verify"], ["verify", "x", "--log-head", "1:" + "a" * 64],
                                  ["verify", "--store", ".", "--log-head", "nonsense"],
                                  ["verify", "x", "--trusted-key", "not-a-key"]])
def test_verify_usage_errors_exit_2(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "error:" in result.output


def test_run_plugin_adaptive_claims_the_filter_budget_and_verifies(tmp_path):
    """``--adaptive``: the session admits through the Rényi filter and certifies the budget (docs/accounting.md)."""
    result = invoke("--store", str(tmp_path / "runs"), "run", "opacus-training", "--epsilon", "5", "--delta", "1e-5",
                    "--seed", "3", "--adaptive", "--json")
    assert result.exit_code == 0, result.output
    claim = json.loads(result.output.strip().splitlines()[-1])["claim"]
    assert (claim["epsilon"], claim["delta"], claim["accountant"]) == (5.0, 1e-5, "renyi-filter")
    run_dir = json.loads(result.output.strip().splitlines()[-1])["run_dir"]
    assert invoke("--store", str(tmp_path / "runs"), "verify", run_dir, "--allow-not-for-release").exit_code == 0


# --- a conventional command line (issue 14.4) ---------------------------------------------------------------------

def _commands(group, path=()):
    """Every command path of the click tree, groups included."""
    yield path
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, (*path, name))


def test_every_help_text_has_examples():
    paths = list(_commands(main))
    assert ("account", "ledger") in paths and ("keys", "trust") in paths
    for path in paths:
        result = invoke(*path, "--help")
        assert result.exit_code == 0 and re.search(r"Examples:\n +dpaudit ", result.output), path


def test_version_names_the_package_and_the_code():
    from dpaudit.provenance import code_version, dpaudit_version

    result = invoke("--version")
    assert result.exit_code == 0 and result.output == f"dpaudit {dpaudit_version()} ({code_version()})\n"


def test_export_refuses_to_overwrite_without_force(run_dir, tmp_path):
    out = tmp_path / "evidence"
    out.mkdir()
    (out / "ledger.jsonl").write_text("someone else's evidence\n")
    refused = CliRunner().invoke(main, ["export", str(run_dir), str(out)])
    assert refused.exit_code == 2 and "--force" in refused.output and len(refused.output.splitlines()) == 1
    assert (out / "ledger.jsonl").read_text() == "someone else's evidence\n"
    assert invoke("export", str(run_dir), str(out), "--force").exit_code == 0
    assert invoke("verify", str(out), "--allow-not-for-release").exit_code == 0


def test_ui_fails_loudly_on_a_taken_port_and_starts_on_a_free_one(monkeypatch):
    import socket
    import subprocess

    launched: list = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, env=None: launched.append(cmd) or 0)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["ui", "--port", str(port)])
        assert result.exit_code == 2 and not launched
        assert f"cannot listen on 127.0.0.1:{port}" in result.output and len(result.output.splitlines()) == 1
    free = CliRunner().invoke(main, ["ui", "--port", str(port)])  # released by the with block
    assert free.exit_code == 0 and len(launched) == 1


def test_invalid_verdict_counts_its_reasons_in_good_grammar(run_dir):
    from dpaudit.display import plural

    (run_dir / "report.md").write_text("edited\n")
    reasons = json.loads(invoke("verify", str(run_dir), "--allow-not-for-release", "--json").output)["reasons"]
    result = invoke("verify", str(run_dir), "--allow-not-for-release")
    assert result.exit_code == 1 and f"INVALID ({plural(len(reasons), 'reason')})" in result.output
    assert "1 reasons" not in result.output


HEAVY = ("torch", "opacus", "mlflow")
_PROBE = ("import atexit, sys\n"
          f"atexit.register(lambda: sys.stderr.write('LOADED ' + ' '.join(m for m in {HEAVY!r} if m in sys.modules)"
          " + '\\n'))\n"
          "from dpaudit.cli import main\n"
          "main(sys.argv[1:])\n")


def _loaded_heavy(*args: str) -> list[str]:
    """The heavy modules a fresh ``dpaudit ARGS`` process had imported when it exited (read at exit, not timed)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1, 2), done.stderr  # 2: the argument error of the list
    return done.stderr.strip().splitlines()[-1].split()[1:]


def test_light_commands_do_not_import_torch_opacus_or_mlflow(run_dir, tmp_path):
    """Start-up cost is import cost (seconds for torch + Opacus + MLflow): the commands that only read a ledger or
    compute a bound must not load them. The module list is read at exit, so this is no timing test."""
    for args in (["--help"], ["verify", "--bogus"], ["report", str(run_dir)], ["export", str(run_dir),
                 str(tmp_path / "out")], ["verify", str(run_dir), "--allow-not-for-release"],
                 ["account", "laplace", "--sensitivity", "1", "--epsilon", "0.5"],
                 ["account", "dpsgd", "--sample-rate", "0.01", "--noise-multiplier", "1", "--steps", "100", "--delta",
                  "1e-5"], ["account", "ledger", str(run_dir)]):
        assert _loaded_heavy(*args) == [], args


@pytest.fixture
def demo_shaped_run(make_session) -> Path:
    """The demo's ledger shape: AboveThreshold rounds whose sensitivity is constant-overhead's plugin formula, and a
    DP-SGD charge (the subsampled Gaussian that the verifier cross-checks with Opacus's PRV analysis)."""
    from dpaudit import from_formula
    from dpaudit.events import PoissonSubsampledGaussianEvent
    from dpaudit_plugins.constant_overhead.formulas import FORMULA_ID

    with make_session(epsilon=5.0, delta=1e-5) as s:
        utility = from_formula(FORMULA_ID, "add_remove", k=4)
        s.charge(s.above_threshold_rounds_event(utility, 0.5, max_queries=8, rounds=3), plugin="constant-overhead",
                 mechanism="above_threshold")
        s.charge(PoissonSubsampledGaussianEvent(
            neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
            sample_rate=0.0157, noise_multiplier=1.0, steps=192, label="dpsgd"), plugin="constant-overhead",
            mechanism="dp-sgd")
    return s.run_dir


def test_verify_and_report_of_a_demo_shaped_run_do_not_import_torch_opacus_or_mlflow(demo_shaped_run):
    """The plugin's sensitivity formula comes from its light formulas module, not the plugin package (torch); the
    verifier's PRV cross-check runs Opacus's PRV files without ``opacus/__init__`` (torch)."""
    assert _loaded_heavy("verify", str(demo_shaped_run), "--allow-not-for-release") == []
    assert _loaded_heavy("report", str(demo_shaped_run)) == []
