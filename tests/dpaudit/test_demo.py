"""``dpaudit demo`` (constant-overhead selection + DP-SGD on Adult), run small: a 3-candidate grid, k = 4, 2000
training records, 1 epoch. The full demo is measured by hand (docs/plugins/constant-overhead.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dpaudit import demo
from dpaudit.data import load_adult
from dpaudit.demo import BUDGET, DEMO_CANDIDATES, demo_config, run_demo
from dpaudit.registry import DATASET_SIZE_PUBLIC
from dpaudit.testing import mentions_number

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

SMALL = {"candidates": [dict(c) for c in DEMO_CANDIDATES[2:5]], "k": 4, "t_max": 3, "fallback": 0,
         "train_rows": 2000, "test_rows": 1000}


def test_demo_config_is_the_documented_one():
    config = demo_config()
    assert 6 <= len(config["candidates"]) <= 8 and config["k"] == 10
    assert {c["epochs"] for c in demo_config(epochs=1)["candidates"]} == {1}


def test_small_seeded_demo_verifies_and_reports(tmp_path):
    lines: list[str] = []
    summary = run_demo(store=tmp_path / "runs", seed=0, epochs=1, overrides=SMALL, echo=lines.append)
    json.dumps(summary)
    assert summary["verified"] and summary["epsilon"] <= BUDGET[0]
    assert summary["charged_iterations"] == 3 and 1 <= summary["realised_iterations"] <= 3
    assert summary["selected"]["epochs"] == 1 and 0.5 < summary["test_accuracy"] <= 1.0
    text = "\n".join(lines)
    assert "selected: lr=" in text and "verification: VALID" in text and "NOT FOR RELEASE" in text
    certificate = json.loads(Path(summary["certificate"]).read_text())
    assert certificate["protected_datasets"] == ["adult-train"] and len(certificate["public_datasets"]) == 2


def _published(summary, lines, client) -> list:
    """What the demo published: stdout, the ledger's info records, the MLflow run's params, tags and non-release
    metrics, and its summary."""
    records = [json.loads(line) for line in Path(summary["ledger"]).read_text().splitlines()]
    run = client.get_run(summary["run_id"]).data
    metrics = {k: v for k, v in run.metrics.items() if not k.startswith("release.")}  # noisy: may hit n by chance
    return [lines, [r["body"] for r in records if r["type"] == "info"], run.params, run.tags, metrics, summary]


def test_the_public_size_is_stated_in_the_certificate_and_not_paid_for(tmp_path):
    """The demo's size is public (DP-SGD's q = B/n): the certificate lists `dataset-size-public`, nothing buys a
    noisy count (an earlier demo charged a Laplace count for a size it also treated as public), and the size it
    prints is the one the DP-SGD charge used."""
    lines: list[str] = []
    summary = run_demo(store=tmp_path / "runs", seed=1, epochs=1, overrides=SMALL, echo=lines.append)
    certificate = json.loads(Path(summary["certificate"]).read_text())
    assert DATASET_SIZE_PUBLIC in {a["id"] for a in certificate["assumptions"]}
    records = [json.loads(line) for line in Path(summary["ledger"]).read_text().splitlines()]
    assert {r["body"]["event"]["kind"] for r in records if r["type"] == "charge"} <= {
        "poisson_subsampled_gaussian", "self_composed", "composed", "above_threshold_rounds", "above_threshold"}
    trained = [r["body"]["info"]["dataset_size"] for r in records
               if r["type"] == "info" and "dataset_size" in r["body"]["info"]]
    assert trained == [summary["dataset_size"]] == [2000]
    assert f"training-set size n = 2000: public under the assumption {DATASET_SIZE_PUBLIC}" in "\n".join(lines)


def test_a_private_size_is_never_published(tmp_path, monkeypatch):
    """Attack: the selection step does not make the size public (no `dataset-size-public` in the certificate), so
    the demo must treat n as private: the exact size (all 32 561 training records, `rows` left unset so the access
    record names no number) must be nowhere in stdout, the ledger's info records, the MLflow run or the summary.
    Only a noisy count is released."""
    from mlflow.tracking import MlflowClient

    from dpaudit.registry import Plugin
    from dpaudit.sensitivity import from_formula

    def run(session, config):
        view = session.for_plugin("count-only", "1")
        rows = len(view.data("adult-train"))
        noisy = view.laplace(float(rows), from_formula("count", "add_remove"), epsilon=0.5, label="count")
        return {"selected": dict(DEMO_CANDIDATES[0]), "fallback_used": True, "realised_iterations": 0,
                "charged_iterations": 0, "test_accuracy": 0.75, "noisy_count": noisy}

    fake = Plugin(name="count-only", version="1", summary="a noisy count", citation="none", event_kinds=("laplace",),
                  run=run, smoke_config={}, protected=("adult-train",))
    monkeypatch.setattr(demo, "get_plugin", lambda name: fake)
    lines: list[str] = []
    summary = run_demo(store=tmp_path / "runs", seed=2, overrides={"train_rows": None}, echo=lines.append)
    n = len(load_adult().y_train)
    assert n == 32561 and summary["dataset_size"] is None
    certificate = json.loads(Path(summary["certificate"]).read_text())
    assert DATASET_SIZE_PUBLIC not in {a["id"] for a in certificate["assumptions"]}
    published = _published(summary, lines, MlflowClient(os.environ["MLFLOW_TRACKING_URI"]))
    assert not [p for p in published if mentions_number(p, n)]
