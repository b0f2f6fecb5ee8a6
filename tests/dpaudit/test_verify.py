"""Offline verification: a clean run verifies; every tampering is caught, with every reason listed."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dpaudit import VerificationError
from dpaudit.certificate import unsigned
from dpaudit.events import PrivacyEvent
from dpaudit.ledger import GENESIS_PREV, Record, read_records
from dpaudit.signing import key_fingerprint, load_or_create_key, public_key_pem, sign
from dpaudit.verify import verify_bundle


@pytest.fixture
def bundle(make_session, tmp_path) -> Path:
    with make_session(epsilon=2.0, delta=1e-6, protected=("toy data",)) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2, label="count")
        s.gaussian(2.0, sensitivity=1.0, epsilon=0.3, delta=1e-7, label="sum")
        s.exponential([1.0, 2.0, 3.0], sensitivity=1.0, epsilon=0.1, label="argmax")
    copy = tmp_path / "bundle"
    shutil.copytree(s.run_dir, copy)
    return copy


def _failed(bundle: Path) -> set[str]:
    report = verify_bundle(bundle, allow_not_for_release=True)
    return {c.name for c in report.checks if not c.ok}


def _lines(bundle: Path) -> list[str]:
    return (bundle / "ledger.jsonl").read_text().splitlines(keepends=True)


def _rewrite(bundle: Path, records: list[Record]) -> None:
    """Re-chain and re-hash ``records`` the way a forger with write access would."""
    prev, out = GENESIS_PREV, []
    for i, r in enumerate(records):
        r = replace(r, seq=i, prev=prev, hash="")
        r = replace(r, hash=r.compute_hash())
        prev = r.hash
        out.append(r.to_line())
    (bundle / "ledger.jsonl").write_text("".join(out))


def _resign(bundle: Path, tmp_path: Path, edit=lambda c: None) -> None:
    """Re-sign the certificate with the forger's own key after ``edit``, pointing it at the current ledger."""
    key = load_or_create_key(tmp_path / "forger.pem")
    cert = json.loads((bundle / "certificate.json").read_text())
    records, _ = read_records(bundle / "ledger.jsonl")
    cert["ledger"] = {"head": records[-1].hash, "records": len(records)}
    edit(cert)
    cert["public_key_fingerprint"] = key_fingerprint(public_key_pem(key))
    cert["signature"] = {"algorithm": "Ed25519", "value": sign(key, unsigned(cert))}
    (bundle / "certificate.json").write_text(json.dumps(cert))
    (bundle / "public_key.pem").write_text(public_key_pem(key))


def test_clean_bundle_verifies(bundle):
    report = verify_bundle(bundle, allow_not_for_release=True)
    assert report.valid, report.reasons
    assert report.recheck is not None and report.recheck["ok"]


def test_seeded_run_is_not_for_release(bundle):
    report = verify_bundle(bundle)
    assert not report.valid
    assert report.reasons == ["for-release: seeded randomness: NOT FOR RELEASE"]


def test_edited_record_fails(bundle):
    lines = _lines(bundle)
    lines[2] = lines[2].replace("count", "cnt")
    (bundle / "ledger.jsonl").write_text("".join(lines))
    assert "ledger-chain" in _failed(bundle)


@pytest.mark.parametrize("tamper", ["delete", "reorder", "truncate", "duplicate"])
def test_structural_tampering_fails(bundle, tamper):
    lines = _lines(bundle)
    if tamper == "delete":
        del lines[3]
    elif tamper == "reorder":
        lines[2], lines[3] = lines[3], lines[2]
    elif tamper == "truncate":
        lines = lines[:-2]
    else:
        lines.insert(3, lines[3])
    (bundle / "ledger.jsonl").write_text("".join(lines))
    failed = _failed(bundle)
    assert failed & {"ledger-chain", "ledger-head"}, failed


def test_rechained_ledger_without_resigning_fails_head(bundle):
    records, _ = read_records(bundle / "ledger.jsonl")
    _rewrite(bundle, [r for r in records if r.type != "charge" or r.seq != 3])
    assert "ledger-head" in _failed(bundle) or "signature" in _failed(bundle)


def test_edited_certificate_fails_signature(bundle):
    cert = json.loads((bundle / "certificate.json").read_text())
    cert["claim"]["epsilon"] *= 0.5
    (bundle / "certificate.json").write_text(json.dumps(cert))
    failed = _failed(bundle)
    assert "signature" in failed and "recompose" in failed


def test_forged_lower_claim_is_caught_by_recomposition(bundle, tmp_path):
    """A forger with their own key lowers the claim by 10 % and re-signs: the recomposition still catches it."""
    _resign(bundle, tmp_path, lambda c: c["claim"].__setitem__("epsilon", c["claim"]["epsilon"] * 0.9))
    assert _failed(bundle) == {"recompose"}


def test_undercharged_event_is_caught(bundle, tmp_path):
    """A charge whose recorded noise scale is too small for its ε (re-chained and re-signed) fails."""
    records, _ = read_records(bundle / "ledger.jsonl")
    forged = []
    for r in records:
        if r.type == "charge" and r.body["event"]["kind"] == "laplace":
            event = dict(r.body["event"], scale=r.body["event"]["scale"] / 2)
            r = replace(r, body=dict(r.body, event=event))
        forged.append(r)
    _rewrite(bundle, forged)
    _resign(bundle, tmp_path)
    assert "charges" in _failed(bundle)


def test_wrong_sensitivity_is_caught(make_session, tmp_path):
    """A formula-derived sensitivity edited below its recomputed value is caught."""
    from dpaudit import from_formula

    with make_session(epsilon=1.0, neighbouring="replace_one") as s:
        s.laplace(3.0, sensitivity=from_formula("bounded_sum", "replace_one", lower=0.0, upper=5.0), epsilon=0.2)
    bundle = tmp_path / "b2"
    shutil.copytree(s.run_dir, bundle)
    records, _ = read_records(bundle / "ledger.jsonl")
    forged = []
    for r in records:
        if r.type == "charge":
            event = PrivacyEvent.from_dict(r.body["event"]).to_dict()
            event["sensitivity"] = dict(event["sensitivity"], value=1.0)
            event["scale"] = event["scale"] / 5
            r = replace(r, body=dict(r.body, event=event))
        forged.append(r)
    _rewrite(bundle, forged)
    _resign(bundle, tmp_path)
    assert "charges" in _failed(bundle)


def test_wrong_public_key_fails(bundle, tmp_path):
    other = load_or_create_key(tmp_path / "other.pem")
    (bundle / "public_key.pem").write_text(public_key_pem(other))
    assert "signature" in _failed(bundle)


def test_missing_ledger_is_a_usage_error(bundle):
    (bundle / "ledger.jsonl").unlink()
    with pytest.raises(VerificationError, match="ledger.jsonl"):
        verify_bundle(bundle)


def test_unclosed_session_is_invalid_but_its_chain_is_checked(bundle):
    """A crashed session has no certificate: the ledger chain is still checked and reported."""
    (bundle / "certificate.json").unlink()
    report = verify_bundle(bundle, allow_not_for_release=True)
    assert not report.valid
    assert {c.name: c.ok for c in report.checks} == {"ledger-chain": True, "certificate-present": False}


def test_unknown_event_kind_fails(bundle, tmp_path):
    records, _ = read_records(bundle / "ledger.jsonl")
    forged = [replace(r, body=dict(r.body, event=dict(r.body["event"], kind="mystery"))) if r.type == "charge" else r
              for r in records]
    _rewrite(bundle, forged)
    _resign(bundle, tmp_path)
    assert "events-decode" in _failed(bundle)
