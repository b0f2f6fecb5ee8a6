"""NIST SP 800-226 fields: derived from the ledger, signed, rechecked by verify (a forged field is INVALID), weak
guarantees warned about, and the privacy statement in every report format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit import InvalidParameter
from dpaudit.accounting.charges import tally
from dpaudit.accounting.rdp import ORDERS, composed_rdp, rdp_to_epsilon
from dpaudit.certificate import charged_events
from dpaudit.cli import main
from dpaudit.events import compose
from dpaudit.ledger import read_records
from dpaudit.nist_fields import (
    FIELD,
    NATIVE_ORDERS,
    NOT_DECLARED,
    NOT_STATED,
    data_size,
    guarantee_warnings,
    warning_size,
)
from dpaudit.report import render
from dpaudit.verify import verify_bundle
from tests.dpaudit.test_verify import _resign


def _run(make_session, tmp_path: Path, epsilon: float = 0.2, **options) -> Path:
    with make_session(epsilon=max(2.0, epsilon + 1), delta=1e-6, protected=("toy data",), **options) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=epsilon, label="count")
        s.gaussian(2.0, sensitivity=1.0, epsilon=0.3, delta=1e-7, label="sum")
    copy = tmp_path / "bundle"
    shutil.copytree(s.run_dir, copy)
    return copy


@pytest.fixture
def bundle(make_session, tmp_path) -> Path:
    return _run(make_session, tmp_path, other_releases="the 2024 tables of the same survey",
                data_custody="held by the survey office, access logged")


def _cert(bundle: Path) -> dict:
    return json.loads((bundle / "certificate.json").read_text())


def _check(bundle: Path, name: str = "nist-fields"):
    report = verify_bundle(bundle, allow_not_for_release=True)
    return report, next(c for c in report.checks if c.name == name)


def test_fields_come_from_the_ledger_and_the_session_options(bundle):
    fields = _cert(bundle)[FIELD]
    assert fields["other_releases"] == "the 2024 tables of the same survey"
    assert fields["data_custody"] == "held by the survey office, access logged"
    assert fields["neighbouring_relation"] == "add_remove"
    assert fields["unit_of_privacy"]["unit"] == "record"
    assert fields["query_model"] == {**fields["query_model"], "charges": 2, "releases": 2, "adaptive_parameters": False}
    assert fields["randomness"]["source"]["kind"] == "seeded" and fields["randomness"]["floating_point_noise"] == []
    assert fields["tuning"]["recorded"] is False
    assert fields["data_size"] is None
    report, check = _check(bundle)
    assert report.valid and check.ok, report.reasons
    assert report.warnings == []


def test_defaults_say_none_declared_and_not_stated(make_session, tmp_path):
    fields = _cert(_run(make_session, tmp_path))[FIELD]
    assert (fields["other_releases"], fields["data_custody"]) == (NOT_DECLARED, NOT_STATED)


def test_native_rdp_curve_is_an_upper_bound_of_the_composition(bundle):
    records, _ = read_records(bundle / "ledger.jsonl")
    cert = _cert(bundle)
    native = cert[FIELD]["native_guarantee"]
    assert native["kind"] == "rdp" and native["orders"] == list(NATIVE_ORDERS)
    assert set(NATIVE_ORDERS) <= set(ORDERS)
    _, counts = tally(compose([e for _, e in charged_events(records)]))
    curve, _ = composed_rdp(counts)
    exact = [curve[ORDERS.index(a)] for a in NATIVE_ORDERS]
    assert all(s >= e for s, e in zip(native["rdp_epsilon"], exact, strict=True))
    # the stated curve converts to an (ε, δ) no tighter than the certified claim (which may be tighter: pld)
    stated_eps, _ = rdp_to_epsilon(np.array(NATIVE_ORDERS), np.array(native["rdp_epsilon"]), np.inf,
                                   cert["claim"]["delta"])
    assert stated_eps >= cert["claim"]["epsilon"] * (1 - 1e-9)


def _lower_first_rdp(c):
    c[FIELD]["native_guarantee"]["rdp_epsilon"][0] *= 0.9


FORGERIES = {name: edit for name, edit in zip(
    ["other-releases", "custody", "relation", "unit", "trust", "query", "tuning", "randomness", "size", "rdp-lower",
     "attained-by", "orders-dropped", "extra-field", "not-object"], [
    lambda c: c[FIELD].update(other_releases=NOT_DECLARED),
    lambda c: c[FIELD].update(data_custody="public"),
    lambda c: c[FIELD].update(neighbouring_relation="replace_one"),
    lambda c: c[FIELD]["unit_of_privacy"].update(unit="user"),
    lambda c: c[FIELD].update(trust_model="local"),
    lambda c: c[FIELD]["query_model"].update(charges=1),
    lambda c: c[FIELD]["tuning"].update(recorded=True),
    lambda c: c[FIELD]["randomness"]["source"].update(kind="secure"),
    lambda c: c[FIELD].update(data_size=10**9),
    _lower_first_rdp,
    lambda c: c[FIELD]["native_guarantee"].update(claim_attained_by="rdp"),
    lambda c: c[FIELD]["native_guarantee"].pop("orders"),
    lambda c: c[FIELD].update(extra="field"),
    lambda c: c.update({FIELD: "not an object"}),
], strict=True)}


def test_a_forged_field_signed_by_the_insider_key_is_invalid(bundle, tmp_path):
    for name, edit in FORGERIES.items():  # one session for all forgeries (a session costs more than a verify)
        forged = tmp_path / name
        shutil.copytree(bundle, forged)
        _resign(forged, tmp_path, edit)
        report, check = _check(forged)
        assert not check.ok and not report.valid, name


def test_a_higher_rdp_value_is_still_an_upper_bound(bundle, tmp_path):
    _resign(bundle, tmp_path, lambda c: c[FIELD]["native_guarantee"]["rdp_epsilon"].__setitem__(0, 5.0))
    report, check = _check(bundle)
    assert check.ok and report.valid, report.reasons


def test_an_old_certificate_without_the_fields_verifies_as_not_stated(bundle, tmp_path):
    _resign(bundle, tmp_path, lambda c: c.pop(FIELD))
    report, check = _check(bundle)
    assert report.valid and check.ok and NOT_STATED in check.detail
    assert "Not stated: the certificate was made before" in render(bundle, "text")


def test_every_report_format_carries_the_privacy_statement(bundle):
    for fmt in ("text", "markdown", "json", "html"):
        check_statement(render(bundle, fmt), fmt)


def check_statement(text: str, fmt: str) -> None:
    for phrase in ("What does the guarantee cover, and what not?", "Does NOT cover",
                   "the 2024 tables of the same survey", "held by the survey office",
                   "Rényi DP of the composed charges", "Trust model: central"):
        assert phrase in text, (fmt, phrase)


def test_warnings_on_a_weak_guarantee_are_not_failures(make_session, tmp_path):
    bundle = _run(make_session, tmp_path, epsilon=10.5)
    report, check = _check(bundle)
    assert report.valid and check.ok
    assert len(report.warnings) == 1 and "weak guarantee" in report.warnings[0]
    result = CliRunner().invoke(main, ["verify", str(bundle), "--allow-not-for-release"])
    assert result.exit_code == 0 and "WARNING: epsilon = " in result.output and "VALID" in result.output


def test_warning_thresholds():
    assert guarantee_warnings({"epsilon": 9.99, "delta": 1e-6}, None) == []
    assert len(guarantee_warnings({"epsilon": 10.0, "delta": 1e-6}, None)) == 1
    assert guarantee_warnings({"epsilon": 1.0, "delta": 1e-6}, 1000) == []  # δ = 1/n² exactly
    [warning] = guarantee_warnings({"epsilon": 1.0, "delta": 1.01e-6}, 1000)
    assert "1/n^2" in warning and "n = 1000" in warning
    assert guarantee_warnings({"epsilon": 1.0, "delta": 0.5}, None) == []  # size unknown: nothing to compare


def test_data_size_is_the_smallest_declared_dataset_size():
    class Leaf:  # a leaf declares its data size as SampledWithoutReplacementGaussianEvent does
        def __init__(self, size):
            if size is not None:
                self.dataset_size = size

    class Event:
        def __init__(self, *sizes):
            self.sizes = sizes

        def leaves(self):
            return [(Leaf(s), 1) for s in self.sizes]

    assert data_size([Event(None)]) is None
    assert data_size([Event(5000, None), Event(300)]) == 300


def test_declarations_are_checked_before_anything_is_written(make_session, tmp_path):
    for bad in ("", "   ", 3, "x" * 2001):
        with pytest.raises(InvalidParameter, match="other_releases"):
            make_session(other_releases=bad)
    with pytest.raises(InvalidParameter, match="data_custody"):
        make_session(data_custody="")
    assert not list((tmp_path / "dpaudit_home").glob("*/ledger.jsonl"))


def test_an_adaptive_session_states_its_filter_as_native_guarantee(make_session, tmp_path):
    with make_session(epsilon=2.0, delta=1e-6, adaptive=True) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2)
    cert = _cert(s.run_dir)
    assert cert[FIELD]["native_guarantee"]["kind"] == "renyi_filter"
    assert cert[FIELD]["query_model"]["adaptive_parameters"] is True
    report, check = _check(s.run_dir)
    assert check.ok, check.detail


def test_tuning_recorded_in_the_ledger_is_stated(make_session, tmp_path):
    with make_session(epsilon=2.0, delta=1e-6) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2)
        s.record_info("session", {"selected": {"lr": 0.1}})
    tuning = _cert(s.run_dir)[FIELD]["tuning"]
    assert tuning["recorded"] is True and tuning["selected_by"] == ["session"]
    assert _check(s.run_dir)[1].ok


def test_the_delta_warning_reads_the_data_size_a_training_run_records(make_session):
    """A Poisson DP-SGD charge declares no data size; its run's info record does (tuning.training.record_run):
    δ = 1e-3 > 1/100² is warned about (the old check only knew without-replacement charges' sizes)."""
    with make_session(epsilon=2.0, delta=1e-3) as s:
        s.gaussian(4.0, sensitivity=1.0, epsilon=0.5, delta=1e-3)
        s.record_info("session", {"charge_seq": 1, "dataset_size": 100})
    records, _ = read_records(s.ledger_path)
    assert warning_size(records, [e for _, e in charged_events(records)]) == 100
    report, check = _check(s.run_dir)
    assert check.ok and report.valid
    assert any("n = 100" in w and "1/n^2" in w for w in report.warnings), report.warnings


def test_data_size_reads_each_event_object_once_and_every_distinct_one():
    """``data_size`` looks at each event object once (10⁵ equal charges share one): an event repeated, and another
    equal to it in all but its data size (a distinct object), still give the smaller size, wherever it stands."""
    from dpaudit.events import SampledWithoutReplacementGaussianEvent
    from dpaudit.sensitivity import declared

    def wor(n: int) -> SampledWithoutReplacementGaussianEvent:
        return SampledWithoutReplacementGaussianEvent(neighbouring="replace_one", sensitivity=declared(2.0, "l2", "t"),
                                                      batch_size=10, dataset_size=n, noise_multiplier=1.0, steps=5)

    big, small = wor(1000), wor(100)
    assert data_size([big] * 5 + [small] + [big] * 5) == 100
    assert data_size([small, *([big] * 3)]) == 100 and data_size([big, big]) == 1000 and data_size([]) is None
