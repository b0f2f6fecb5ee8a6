"""Smoke tests of the DPareto experiment scripts (experiments/dpareto_svt.py, dpareto_adult.py) in ``--smoke`` mode:
each runs end to end, every session it opens verifies (the scripts raise otherwise), and it writes its table, report
and plot. The full runs regenerate docs/experiments/dpareto-*."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

from dpaudit_plugins.dpareto import search

ROOT = Path(__file__).resolve().parents[3]


def _script(name: str):
    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location(f"_dpareto_experiment_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_svt_experiment_smoke(tmp_path):
    fractions = _script("dpareto_svt").main(["--smoke", "--out", str(tmp_path)])
    assert set(fractions) == {"bo-hvpoi", "random"} and all(len(v) == 2 for v in fractions.values())
    assert all(0 < f <= 1.05 for v in fractions.values() for f in v)
    rows = list(csv.DictReader((tmp_path / "dpareto-svt.csv").open()))
    assert len(rows) == 4 and all(r["verified"] == "True" for r in rows)
    assert "fraction of exact hypervolume" in (tmp_path / "dpareto-svt.md").read_text()


def test_adult_experiment_smoke(tmp_path, monkeypatch):
    script, results = _script("dpareto_adult"), tmp_path / "runs.jsonl"
    real = search.propose
    # every BO proposal reported as a fallback: the row counts the run's bo-fallback trials (here its one BO trial)
    monkeypatch.setattr(search, "propose", lambda *args, **kwargs: (real(*args, **kwargs)[0], True))
    rows = script.main(["--smoke", "--out", str(tmp_path), "--results", str(results)])
    assert [r["method"] for r in rows] == ["bo-hvpoi", "random"]
    assert [r["fallbacks"] for r in rows] == [1, 0]
    assert all(r["verified"] and r["evaluations"] == 3 for r in rows)
    report = (tmp_path / "dpareto-adult.md").read_text()
    assert "Table 2" in report and "0.158" in report
    lines = results.read_text().splitlines()
    assert len(lines) == 2
    # resume: the finished runs are not run again (nothing appended), and the report is rewritten from the file
    assert script.main(["--smoke", "--out", str(tmp_path), "--results", str(results)]) == rows
    (tmp_path / "dpareto-adult.md").unlink()
    assert script.main(["--smoke", "--out", str(tmp_path), "--results", str(results), "--report-only"]) == rows
    assert results.read_text().splitlines() == lines and (tmp_path / "dpareto-adult.md").exists()
    # a run of another budget in the same file is left out of the report, and the report says so
    other = json.loads(lines[0])
    other["key"] = other["key"].replace('"n_iterations": 1', '"n_iterations": 99')
    assert other["key"] != json.loads(lines[0])["key"]
    results.write_text("\n".join([*lines, json.dumps(other)]) + "\n")
    assert script.main(["--smoke", "--out", str(tmp_path), "--results", str(results), "--report-only"]) == rows
    assert "holds 1 more runs of other budgets" in (tmp_path / "dpareto-adult.md").read_text()
    # a run recorded before the fallback count and the noise dtype were kept is reported as such
    older = json.loads(lines[0])
    del older["row"]["fallbacks"], older["row"]["noise"]
    results.write_text("\n".join([json.dumps(older), *lines[1:]]) + "\n")
    script.main(["--smoke", "--out", str(tmp_path), "--results", str(results), "--report-only"])
    report = (tmp_path / "dpareto-adult.md").read_text()
    assert "not recorded" in report and "1 of these 2 runs predate" in report
    assert "fallbacks" in (tmp_path / "dpareto-adult.csv").read_text().splitlines()[0]
