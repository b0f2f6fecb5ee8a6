"""Budget report: grouping by plugin and mechanism, the filter-bound column, assumptions and certificate."""

from __future__ import annotations

import json

from dpaudit import from_formula
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.report import build_report, render


def test_groups_bounds_and_certificate(make_session):
    with make_session(epsilon=5.0, delta=1e-5) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="a")
        s.laplace(2.0, sensitivity=1.0, epsilon=0.2, label="b")
        event = PoissonSubsampledGaussianEvent(
            neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
            sample_rate=0.01, noise_multiplier=1.0, steps=100, label="dpsgd")
        s.charge(event, plugin="test", mechanism="dp-sgd")
    report = build_report(s.run_dir)
    groups = {(g["plugin"], g["mechanism"]): g for g in report["groups"]}
    assert groups[("session", "laplace")]["charges"] == 2
    assert abs(groups[("session", "laplace")]["declared_epsilon"] - 0.3) < 1e-12
    assert groups[("test", "dp-sgd")]["declared_epsilon"] is None and groups[("test", "dp-sgd")]["releases"] == 0
    bounds = [p["epsilon"] for p in report["cumulative_epsilon"]]
    assert bounds == sorted(bounds) and report["certificate"]["claim"]["epsilon"] <= bounds[-1] * (1 + 1e-9)
    assert any(a["id"] == "declared-sensitivity" for a in report["assumptions"])
    assert json.loads(render(s.run_dir, "json"))["events"][0]["label"] == "a"
    html = render(s.run_dir, "html")
    assert html.startswith("<!doctype html>") and "<script" not in html


def test_every_format_names_the_signing_key(make_session):
    """The fingerprint an auditor compares with the one published out of band, open runs included."""
    s = make_session()
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    assert build_report(s.run_dir)["signing_key_fingerprint"] == s.key_fingerprint  # from the open record
    cert = s.close()
    assert cert["public_key_fingerprint"] == s.key_fingerprint
    for fmt in ("text", "markdown", "json", "html"):
        assert s.key_fingerprint in render(s.run_dir, fmt), fmt
