"""The command line: exit codes, JSON outputs and clear messages for bad input."""

from __future__ import annotations

import json
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
    assert "1 sensitivities recomputed" in done.stdout


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
    assert "INVALID (1 reasons)" in refused.output
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
