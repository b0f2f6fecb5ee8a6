"""``dpaudit audit mechanism``: the session's own mechanisms audited from the command line; bad options exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpaudit.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_audit_of_a_correct_mechanism_finds_no_leakage_and_leaves_a_valid_run(mechanism, tmp_path):
    result = invoke("--store", str(tmp_path), "audit", "mechanism", mechanism, "--canaries", "500", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert not out["refuted"] and out["epsilon_lb_steinke"] <= 1.0 and out["epsilon_lb_fdp"] <= 1.0
    assert "no detectable leakage" in out["statement"] and out["ceiling_steinke"] > 1.0
    assert 0.99 < out["epsilon_cert"] <= 1.0          # the release's certified ε at δ is the claim audited
    verified = invoke("--store", str(tmp_path), "verify", out["run_id"])   # the audit run is its own certified run
    assert verified.exit_code == 0 and "VALID" in verified.output
    assert "[ok] audit: 1 audit:" in verified.output   # its design and evidence are in the ledger, recomputed


def test_seeded_audit_is_reproducible_and_states_the_family(tmp_path):
    args = ("--store", str(tmp_path), "audit", "mechanism", "gaussian", "--seed", "3", "--family", "gaussian")
    first, second = invoke(*args), invoke(*args)
    assert first.exit_code == second.exit_code == 0
    assert first.output.split(": ", 1)[1] == second.output.split(": ", 1)[1]
    assert "assumes gaussian (mu-GDP)" in first.output


@pytest.mark.parametrize(("args", "message"), [
    (("--canaries", "0"), "canaries must be >= 1"), (("--epsilon", "-1"), "claimed_epsilon"),
    (("--delta", "0"), "delta must lie in (0, 1)"), (("--delta", "1.5"), "delta must lie in (0, 1)"),
    (("--family", "rdp"), "rdp"),
])
def test_bad_options_are_one_line_and_exit_2(args, message, tmp_path):
    result = invoke("--store", str(tmp_path), "audit", "mechanism", "gaussian", *args)
    assert result.exit_code == 2 and message in result.output
    assert not any(tmp_path.glob("*/ledger*"))


def test_a_laplace_mechanism_is_not_audited_against_gaussian_curves(tmp_path):
    """μ-GDP curves turn a correct Laplace mechanism's rejections into a too large ε_lb (exact ε = 1 Laplace at
    m = 10^4 gave f-DP ε_lb 1.17: "CLAIM REFUTED"): the family is refused before any run is opened."""
    result = invoke("--store", str(tmp_path), "audit", "mechanism", "laplace", "--family", "gaussian")
    assert result.exit_code == 2 and "does not belong to the gaussian family" in result.output, result.output
    assert not any(tmp_path.glob("*/ledger*"))


def test_dpsgd_audit_prints_both_bounds_beside_the_certified_epsilon_and_verifies(tmp_path):
    """One full-batch step (q = 1) of a small MLP on digits with 100 white-box canaries: the cheapest run."""
    result = invoke("--store", str(tmp_path), "audit", "dpsgd", "--canaries", "100", "--hidden", "16",
                    "--batch-size", "1461", "--epochs", "1", "--seed", "0", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["n_parameters"] == 1057 and out["sample_rate"] == 1.0 and out["steps"] == 1
    assert 3.5 < out["epsilon_cert"] <= 4.0 and not out["refuted"]
    assert out["fdp_assumes"] == "poisson-subsampled gaussian (q=1, steps=1)" and out["canary_type"] == "dirac"
    assert out["epsilon_last_iterate_heuristic"] > 0 and "last-iterate heuristic" in out["statement"]
    verified = invoke("--store", str(tmp_path), "verify", out["run_id"], "--allow-not-for-release")
    assert verified.exit_code == 0 and "VALID" in verified.output and "[ok] audit:" in verified.output


@pytest.mark.parametrize(("args", "message"), [
    (("--canaries", "0"), "canaries must be >= 1"), (("--hidden", "1", "--canaries", "100"), "distinct coordinates"),
    (("--batch-size", "5000"), "exceeds the 1461 training records"),
    (("--canary-type", "gradient"), "gradient"),
])
def test_dpsgd_bad_options_are_one_line_and_exit_2(args, message, tmp_path):
    result = invoke("--store", str(tmp_path), "audit", "dpsgd", *args)
    assert result.exit_code == 2 and message in result.output, result.output
    for ledger in tmp_path.glob("*/ledger.jsonl"):  # refused inside the session: nothing charged or committed
        assert b"audit_commitment" not in ledger.read_bytes() and b'"type":"charge"' not in ledger.read_bytes()


@pytest.mark.parametrize("delta", ["0", "1.5"])
def test_dpsgd_bad_delta_is_refused_before_the_run_opens_with_the_audit_message(delta, tmp_path):
    """One message from one helper for every audit entry point (the old one said "[0, 1)" for δ = 1.5, from the
    session, and "(0, 1)" for δ = 0, from the audit, inside an opened run)."""
    result = invoke("--store", str(tmp_path), "audit", "dpsgd", "--delta", delta)
    assert result.exit_code == 2 and f"delta must lie in (0, 1), got {float(delta)!r}" in result.output, result.output
    assert not any(tmp_path.glob("*/ledger*"))
