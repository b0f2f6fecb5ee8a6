"""Budget report: grouping by plugin and mechanism, the filter-bound column, assumptions and certificate."""

from __future__ import annotations

import json

import pytest

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


def _releases(run_dir):
    from dpaudit.ledger import read_records

    records, _ = read_records(run_dir / "ledger.jsonl")
    return [r.body for r in records if r.type == "release"]


def test_each_component_costs_its_charges_composed_alone(demo_like):
    """Each (plugin, mechanism)'s ε is its own charges composed by the run's accountant at the run's δ, rounded up."""
    from dpaudit.accounting import get_accountant
    from dpaudit.certificate import charged_events
    from dpaudit.display import COMPONENT_DIGITS, round_up
    from dpaudit.events import compose
    from dpaudit.ledger import read_records
    from dpaudit.records import ChargeBody

    report = build_report(demo_like.run_dir)
    records, _ = read_records(demo_like.run_dir / "ledger.jsonl")
    owner = {r.seq: (ChargeBody.from_dict(r.body).plugin, ChargeBody.from_dict(r.body).mechanism)
             for r in records if r.type == "charge"}
    accountant = get_accountant(report["certificate"]["claim"]["accountant"])
    assert len(report["groups"]) == 3
    for g in report["groups"]:
        events = [e for seq, e in charged_events(records) if owner[seq] == (g["plugin"], g["mechanism"])]
        exact = accountant.epsilon(compose(events), 1e-5)
        assert g["epsilon_alone"] == round_up(exact, COMPONENT_DIGITS) >= exact and g["note"] is None
    laplace = next(g for g in report["groups"] if g["mechanism"] == "laplace")
    assert abs(laplace["epsilon_alone"] - 0.1) < 1e-3  # pure ε-DP alone: its own ε
    # composition is not a sum: the certified total is below the sum of the parts, and above each part
    total = report["certificate"]["claim"]["epsilon"]
    parts = [g["epsilon_alone"] for g in report["groups"]]
    assert max(parts) < total < sum(parts)


def test_a_component_holding_every_charge_costs_the_certified_claim(make_session):
    with make_session(epsilon=5.0, delta=1e-5) as s:
        s.gaussian(1.0, sensitivity=1.0, epsilon=0.5, delta=1e-6)
        s.gaussian(2.0, sensitivity=1.0, epsilon=0.5, delta=1e-6)
    report = build_report(s.run_dir)
    (group,) = report["groups"]
    from dpaudit.display import COMPONENT_DIGITS, round_up

    assert group["epsilon_alone"] == round_up(s.close()["claim"]["epsilon"], COMPONENT_DIGITS)
    assert group["epsilon_alone"] < 1.0  # two (0.5, 1e-6) Gaussians compose to less than their sum


def test_an_adaptive_session_states_no_component_cost(make_session):
    """Only the Rényi filter's budget is certified when parameters may be adaptive: no per-part ε is claimed."""
    with make_session(epsilon=3.0, delta=1e-6, adaptive=True) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    (group,) = build_report(s.run_dir)["groups"]
    assert group["epsilon_alone"] is None and "adaptive" in group["note"]
    assert "adaptive" in render(s.run_dir, "text")


@pytest.mark.parametrize("mutate", [
    lambda c: c.pop("claim"),
    lambda c: c["claim"].update(epsilon="4.6"),
    lambda c: c["claim"].update(attained_by=None),
    lambda c: c.update(assumptions={"id": "x"}),
    lambda c: c["assumptions"][0].update(conditional="yes"),
    lambda c: c.update(release_status=["for release"]),
    lambda c: c.update(public_key_fingerprint=7),
])
def test_a_malformed_certificate_fails_cleanly_and_verify_says_so(make_session, mutate):
    """verify regenerates the reports from a bundle's certificate before anything vouches for it: a hostile one is
    a clean VerificationError (reported), never a KeyError or TypeError that crashes verify."""
    from dpaudit.errors import VerificationError
    from dpaudit.report.model import load_run, report_from
    from dpaudit.verify import verify_bundle

    with make_session(epsilon=1.0, delta=1e-6) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    records, cert = load_run(s.run_dir)
    mutate(cert)
    with pytest.raises(VerificationError, match="certificate lacks"):
        report_from(records, cert, s.run_dir)
    (s.run_dir / "certificate.json").write_text(json.dumps(cert))
    checks = {c.name: c for c in verify_bundle(s.run_dir, allow_not_for_release=True).checks}
    assert not checks["reports"].ok and "cannot regenerate the reports" in checks["reports"].detail


def test_a_release_without_a_label_shows_its_charges(make_session):
    """A release record whose label is empty is listed under its charge's label; one with its own keeps it."""
    from dataclasses import replace

    from dpaudit.ledger import read_records
    from dpaudit.report.model import report_from

    with make_session(epsilon=5.0, delta=1e-5) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="first count")
        s.laplace(2.0, sensitivity=1.0, epsilon=0.1, label="second count")
    records, _ = read_records(s.ledger_path)
    releases = [i for i, r in enumerate(records) if r.type == "release"]
    records[releases[0]] = replace(records[releases[0]], body={**records[releases[0]].body, "label": ""})
    labels = [rel["label"] for rel in report_from(records, None, "")["released"]]
    assert labels == ["first count", "second count"]
