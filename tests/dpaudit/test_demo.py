"""``dpaudit demo`` (constant-overhead selection + DP-SGD on Adult), run small: a 3-candidate grid, k = 4, 2000
training records, 1 epoch. The full demo is measured by hand (docs/plugins/constant-overhead.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpaudit.demo import BUDGET, DEMO_CANDIDATES, demo_config, run_demo

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
