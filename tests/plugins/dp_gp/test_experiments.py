"""Smoke test of the dp-gp experiment scripts (experiments/dp_gp_kung.py, dp_gp_spatial.py) in their ``--quick``
mode: both run end to end in one subprocess (one BLAS thread, imports paid once), every session they open verifies,
they write their tables and reports, and the !Kung study attaches them to the sessions' MLflow runs. The full runs
regenerate docs/experiments/."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from dpaudit.tracking.mirror import MlflowMirror
from dpaudit.tracking.session_mirror import EXPERIMENT

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import dp_gp_kung, dp_gp_spatial
common = ["--quick", "--draws", "20", "--store", sys.argv[3]]
dp_gp_kung.main([*common, "--out", sys.argv[2] + "/kung", "--tracking-uri", sys.argv[4]])
dp_gp_spatial.main([*common, "--out", sys.argv[2] + "/spatial", "--no-mlflow"])
"""


def test_the_kung_study_and_the_spatial_task_run_verify_and_report(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    (tmp_path / "mlruns").mkdir()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "DPAUDIT_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "experiments"), str(tmp_path / "out"),
                           str(tmp_path / "store"), uri], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    rows = list(csv.DictReader((tmp_path / "out" / "kung" / "dp-gp-kung.csv").open()))
    assert [r["paper"] for r in rows][:3] == ["6.8", "12.2", "28.53"]
    assert rows[2]["paper_constant"] == "28.53"  # the paper's standard-method scale, reproduced from its constants
    report = (tmp_path / "out" / "kung" / "dp-gp-kung.md").read_text()
    run_ids = [line.split("`")[1] for line in report.splitlines() if line.startswith("| kung ")]
    assert len(run_ids) == 4  # cloaking, standard, selection + cloaking, one binning width
    mirror = MlflowMirror(uri, experiment=EXPERIMENT)
    artifacts = {a.path for a in mirror.client.list_artifacts(mirror.find_run(run_ids[0]).info.run_id, "experiment")}
    assert {"experiment/dp-gp-kung.md", "experiment/dp-gp-kung.csv"} <= artifacts

    assert "cloaking plan" in done.stdout
    rows = list(csv.DictReader((tmp_path / "out" / "spatial" / "dp-gp-spatial.csv").open()))
    assert len(rows) == 1 and float(rows[0]["epsilon"]) == 1.0
    assert "| ames cloaking eps=1 |" in (tmp_path / "out" / "spatial" / "dp-gp-spatial.md").read_text()
