"""What the MLflow run page says, as pure functions of the open record and the certificate."""

from __future__ import annotations

import math

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.tracking.run_page import (
    NOT_VERIFIED,
    certificate_tags,
    check_key,
    checked_verdict,
    close_verdict,
    hyperparameters,
    session_run,
)

CERTIFICATE = {
    "run": {"id": "f" * 32}, "claim": {"epsilon": 4.603181234, "delta": 1e-5, "accountant": "tightest",
                                     "attained_by": "pld"},
    "neighbouring": "add_remove", "protected_datasets": ["adult-train"], "mechanisms": {"p/laplace": 2, "p/dpsgd": 1},
    "assumptions": [{"id": "declared-sensitivity", "conditional": True}, {"id": "bounded", "conditional": False}],
    "for_release": True, "release_status": "for release", "public_key_fingerprint": "ab" * 32,
}


def test_the_tags_state_the_certified_claim_not_the_filter_bound():
    tags = certificate_tags(CERTIFICATE, NOT_VERIFIED, "dpaudit.epsilon_spent")
    # rounded up, never to nearest (4.603181234 -> 4.60319): the tag is an upper bound like the claim
    assert tags["dpaudit.certified_epsilon"] == "4.60319" and tags["dpaudit.certified_delta"] == "1e-05"
    assert tags["dpaudit.accountant"] == "tightest (attained by pld)"
    assert tags["dpaudit.verdict"] == NOT_VERIFIED and tags["dpaudit.for_release"] == "True"
    note = tags["mlflow.note.content"]
    assert "(ε = 4.60319, δ = 1e-05)-differential privacy" in note and "add/remove neighbours of adult-train" in note
    assert "3 charges" in note and "not a sum" in note
    assert "Conditional on 1 assumption: declared-sensitivity" in note and "bounded" not in note
    assert f"dpaudit verify {'f' * 32}" in note and "dpaudit.epsilon_spent is the budget filter's" in note
    assert "\n" not in note  # one paragraph


def test_an_unconditional_claim_says_so():
    cert = {**CERTIFICATE, "assumptions": [{"id": "bounded", "conditional": False}]}
    assert "Unconditional" in certificate_tags(cert, "VALID", "k")["mlflow.note.content"]


@pytest.mark.parametrize(("for_release", "status", "verdict"), [
    (True, "for release", NOT_VERIFIED),
    (False, "NOT FOR RELEASE: run aborted", "INVALID: NOT FOR RELEASE: run aborted"),
    (None, "?", "INVALID: ?"),
])
def test_the_close_verdict_never_claims_more_than_the_certificate(for_release, status, verdict):
    assert close_verdict({"for_release": for_release, "release_status": status}) == verdict


def test_the_checked_verdict_lists_the_failed_checks():
    assert checked_verdict(True, []) == "VALID"
    assert checked_verdict(False, ["signature: bad", "chain: broken"]) == "INVALID: signature: bad; chain: broken"


def test_the_session_run_comes_from_the_open_record():
    opened = {"name": "study", "budget": {"epsilon": 5, "delta": 1e-5}, "neighbouring": "add_remove",
              "protected": ["a", "b"], "accountant": {"name": "tightest"}, "randomness": {"for_release": True},
              "signing_key_fingerprint": "cd" * 32}
    name, params, tags = session_run("e" * 32, opened)
    assert name == "study"
    assert params == {"budget_epsilon": "5.0", "budget_delta": "1e-05", "neighbouring": "add_remove",
                      "accountant": "tightest"}
    assert tags == {"dpaudit.run_id": "e" * 32, "dpaudit.protected": "a, b", "dpaudit.for_release": "True",
                    "dpaudit.key_fingerprint": "cd" * 32}


def test_hyperparameters_become_text_params():
    assert hyperparameters({"lr": 0.1, "epochs": 3, "opt": "sgd", "nesterov": False, "momentum": None}) == {
        "lr": "0.1", "epochs": "3", "opt": "sgd", "nesterov": "False", "momentum": "None"}
    assert hyperparameters(None) == {}


@pytest.mark.parametrize("params", [{"lr": math.inf}, {"lr": [0.1]}, {"": 1}, {"../x": 1}, {"x" * 251: 1},
                                    {"raw": 1}, {"lr": "x" * 6001}, "lr=0.1"])
def test_bad_hyperparameters_are_refused(params):
    with pytest.raises(InvalidParameter):
        hyperparameters(params)


@pytest.mark.parametrize("key", ["a", "train/loss", "val acc", "_x-1.2"])
def test_valid_keys_pass(key):
    assert check_key("metric name", key) == key
