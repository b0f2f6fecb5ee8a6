"""Smoke runs of experiments/audit_idealised.py and experiments/audit_mechanism.py at toy sizes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from dpaudit.audit import GaussianFamily

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"


def load(name: str, monkeypatch):
    """Import an experiment script as a module (registered, so that its dataclasses resolve their module)."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def test_idealised_row_at_toy_size(monkeypatch, tmp_path):
    idealised = load("audit_idealised", monkeypatch)
    monkeypatch.setattr(idealised, "PILOT", 2)
    monkeypatch.setattr(idealised, "OUT", tmp_path)
    row = idealised.reproduce(0.5, 2000, 2, draws=3)
    assert 0 < row.steinke[0] <= row.theory and 0 < row.fdp[0] <= row.theory
    assert row.spread.draws == 3 and row.spread.fdp_quantiles[0] <= row.spread.fdp_quantiles[2] <= row.theory
    assert row.spread.best > 0 and 0 <= row.spread.tutorial_at_paper <= 1
    assert row.steinke_bonferroni[0] <= row.steinke_uncorrected[0]
    assert 0 < row.order[0] <= row.theory and row.fdp_tutorial_max[0] > 0
    idealised.write([row])
    assert "| 0.5 | 2e+03 | 2 |" in (tmp_path / "audit-idealised.md").read_text()


def test_mechanism_settings_at_toy_size(monkeypatch, tmp_path):
    mechanism = load("audit_mechanism", monkeypatch)
    monkeypatch.setattr(mechanism, "M", 200)
    null = mechanism.null_setting(2)
    assert set(null) >= {"steinke", "fdp_gaussian", "fdp_free", "steinke_uncorrected"}
    assert mechanism.broken_setting(2)["steinke_refuted"] == 1.0
    assert mechanism.session_setting(1)["steinke_refuted"] == 0.0


def test_dpsgd_protocols_at_toy_size(monkeypatch, tmp_path):
    """Toy size, and the Gaussian family in place of the subsampled one (whose PLDs dominate the cost)."""
    protocols = load("audit_dpsgd_protocols", monkeypatch)
    for name, value in (("M", 400), ("PILOT", 1), ("SETTINGS", ((4.0, 0.5),)), ("OUT", tmp_path),
                        ("family", lambda *_: GaussianFamily()), ("OTHER_DESIGNS", ((0.5, 4),)),
                        ("calibrated_sigma", lambda *_: 0.5)):
        monkeypatch.setattr(protocols, name, value)
    protocols.main(["--seeds", "1"])
    table = (tmp_path / "audit-dpsgd-protocols.md").read_text()
    assert all(f"| 4.0 | 0.5 | {name} |" in table for name in protocols.PROTOCOLS)
    assert "| 0.5 | 4 | 4 | 0.500 |" in table and "| 0.5 | 4 | 8 | 0.500 |" in table


def test_dpsgd_protocols_calibrate_sigma_to_the_familys_epsilon(monkeypatch):
    """At q = 1 and one step the family is the Gaussian mechanism: ε = 4.37 at δ = 1e-5 is σ = 1 (Mahloujifar et al.
    2025, Table 1's theoretical column at σ = 1)."""
    protocols = load("audit_dpsgd_protocols", monkeypatch)
    assert protocols.calibrated_sigma(1.0, 1, 4.37) == pytest.approx(1.0, rel=0.01)
