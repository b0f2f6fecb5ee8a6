"""in-toto export: a DSSE-enveloped Statement v1 of the certificate, signed with the run's key; verify checks it and
every flipped byte of the envelope file (payload, signature, keyid, payloadType, the JSON around them) is INVALID."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit import VerificationError, canonical
from dpaudit.cli import main
from dpaudit.intoto import (
    ENVELOPE_FILE,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    _strict_b64,
    envelope_bytes,
    envelope_problems,
    pae,
    subjects,
)
from dpaudit.ledger import Record, read_records
from dpaudit.signing import key_fingerprint, load_or_create_key, public_key_pem, sign, verify_signature
from dpaudit.store import default_key_path, store_root
from dpaudit.verify import verify_bundle
from tests.dpaudit.test_verify import _resign


@pytest.fixture
def exported(make_session, tmp_path) -> Path:
    """An exported bundle with its envelope: one scalar release and one released array in a sidecar file."""
    with make_session(epsilon=2.0, delta=1e-6, protected=("toy data",)) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2, label="count")
        s.laplace(np.zeros(4096), sensitivity=1.0, epsilon=0.5, label="histogram")
    out = tmp_path / "evidence"
    result = CliRunner().invoke(main, ["export", s.run_id, str(out), "--format", "in-toto"])
    assert result.exit_code == 0, result.output
    assert str(out / ENVELOPE_FILE) in result.output
    return out


def _parts(bundle: Path):
    records, _ = read_records(bundle / "ledger.jsonl")
    cert = canonical.read_object(bundle / "certificate.json", ValueError)
    return records, cert, (bundle / "public_key.pem").read_text()


def _in_toto(bundle: Path, **kwargs):
    report = verify_bundle(bundle, allow_not_for_release=True, **kwargs)
    return report, [c for c in report.checks if c.name == "in-toto"]


def test_pae_matches_the_dsse_spec_example():
    # DSSE protocol.md: PAE("http://example.com/HelloWorld", "hello world")
    assert pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert pae("t\u00e9", b"") == "DSSEv1 3 t\u00e9 0 ".encode()  # lengths count bytes, not characters


def test_exported_envelope_is_a_signed_statement_of_the_certificate(exported):
    envelope = json.loads((exported / ENVELOPE_FILE).read_text())
    records, cert, pem = _parts(exported)
    assert envelope["payloadType"] == PAYLOAD_TYPE
    [signature] = envelope["signatures"]
    assert signature["keyid"] == key_fingerprint(pem) == cert["public_key_fingerprint"]
    payload = base64.b64decode(envelope["payload"])
    # the signature is over PAE(payloadType, payload), checked here with the key alone
    assert verify_signature(pem, pae(PAYLOAD_TYPE, payload), signature["sig"])
    assert not verify_signature(pem, payload, signature["sig"])
    statement = json.loads(payload)
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == PREDICATE_TYPE
    assert statement["predicate"] == cert
    head, array = statement["subject"]
    assert head["digest"] == {"sha256": records[-1].hash} and head["annotations"] == {"records": len(records)}
    assert re.fullmatch(r"outputs/[0-9a-f]{64}\.npy", array["name"])
    assert array["digest"]["sha256"] == array["name"][8:72]
    report, [check] = _in_toto(exported)
    assert report.valid and check.ok, report.reasons


def test_subjects_name_trained_models_by_their_digest():
    digest = "ab" * 32
    records = [Record(0, "open", 0.0, "0" * 64, {}, "1" * 64),
               Record(1, "release", 0.0, "1" * 64, {"charge_seq": 0, "plugin": "p", "mechanism": "dp_sgd",
                                                    "label": "", "output": {"model_sha256": digest}}, "2" * 64)]
    assert subjects(records)[1:] == [{"name": "model:p/dp_sgd@1", "digest": {"sha256": digest}}]
    assert subjects(records)[0]["digest"] == {"sha256": "2" * 64}


def test_every_flipped_byte_of_the_envelope_is_invalid(exported):
    records, cert, pem = _parts(exported)
    data = (exported / ENVELOPE_FILE).read_bytes()
    assert envelope_problems(data, pem, records, cert) == []
    regions = {name: data.index(json.dumps(value).encode()) for name, value in json.loads(data).items()
               if name != "signatures"}
    regions["keyid"] = data.index(b'"keyid"')
    regions["sig"] = data.index(b'"sig"')
    assert len(regions) == 4  # payload, payloadType, keyid, sig: each is swept below with everything else
    missed = []
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        if not envelope_problems(bytes(flipped), pem, records, cert):
            missed.append(i)
    assert missed == []


def test_a_payload_byte_changed_under_valid_base64_fails_the_signature(exported):
    records, cert, pem = _parts(exported)
    envelope = json.loads((exported / ENVELOPE_FILE).read_text())
    payload = bytearray(base64.b64decode(envelope["payload"]))
    for i in (0, len(payload) // 2, len(payload) - 1):
        changed = bytearray(payload)
        changed[i] ^= 0x20
        forged = {**envelope, "payload": base64.b64encode(bytes(changed)).decode()}
        problems = envelope_problems(canonical.encode(forged) + b"\n", pem, records, cert)
        assert any("signature does not verify" in p for p in problems), i


def test_non_canonical_base64_with_the_same_bytes_is_refused():
    """The last base64 character before '=' carries unused bits: a lenient decoder (the broken variant) reads a changed
    file as the same payload, so the check insists on the one canonical spelling."""
    assert base64.b64decode("QR==", validate=True) == base64.b64decode("QQ==") == b"A"
    assert _strict_b64("QQ==", "payload") == b"A"
    for spelling in ("QR==", "QQ", "Q Q==", "QQ==\n", 7):
        with pytest.raises(VerificationError, match="not canonical standard base64"):
            _strict_b64(spelling, "payload")


def test_an_insider_resigned_envelope_of_another_certificate_is_invalid(exported, tmp_path):
    """The key holder can sign any statement; it must still be the statement of the verified certificate."""
    records, cert, pem = _parts(exported)
    key = load_or_create_key(default_key_path(store_root()))
    forged_cert = {**cert, "claim": {**cert["claim"], "epsilon": cert["claim"]["epsilon"] / 2}}
    problems = envelope_problems(envelope_bytes(records, forged_cert, key), pem, records, cert)
    assert problems and "predicate" in problems[0]
    statement = json.loads(base64.b64decode(json.loads((exported / ENVELOPE_FILE).read_text())["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    payload = canonical.encode(statement)
    forged = {"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE,
              "signatures": [{"keyid": key_fingerprint(pem), "sig": sign(key, pae(PAYLOAD_TYPE, payload))}]}
    problems = envelope_problems(canonical.encode(forged) + b"\n", pem, records, cert)
    assert problems and "subject" in problems[0]


def test_an_outsider_key_cannot_sign_the_envelope(exported, tmp_path):
    records, cert, pem = _parts(exported)
    outsider = load_or_create_key(tmp_path / "outsider.pem")
    payload = base64.b64decode(json.loads((exported / ENVELOPE_FILE).read_text())["payload"])
    forged = {"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE,
              "signatures": [{"keyid": key_fingerprint(public_key_pem(outsider)),
                              "sig": sign(outsider, pae(PAYLOAD_TYPE, payload))}]}
    problems = envelope_problems(canonical.encode(forged) + b"\n", pem, records, cert)
    assert any("keyid" in p for p in problems) and any("signature" in p for p in problems)
    with pytest.raises(Exception, match="did not sign this run's certificate"):
        envelope_bytes(records, cert, outsider)


def test_verify_cli_checks_an_envelope_file_and_fails_on_a_flip(exported, tmp_path):
    elsewhere = tmp_path / "statement.intoto.json"
    shutil.move(exported / ENVELOPE_FILE, elsewhere)
    ok = CliRunner().invoke(main, ["verify", str(exported), "--allow-not-for-release", "--in-toto", str(elsewhere)])
    assert ok.exit_code == 0 and "[ok] in-toto" in ok.output, ok.output
    data = bytearray(elsewhere.read_bytes())
    data[data.index(b'"sig":"') + 10] ^= 0x01
    elsewhere.write_bytes(bytes(data))
    bad = CliRunner().invoke(main, ["verify", str(exported), "--allow-not-for-release", "--in-toto", str(elsewhere)])
    assert bad.exit_code == 1 and "[FAIL] in-toto" in bad.output and "INVALID" in bad.output


def test_a_bundle_envelope_that_no_longer_matches_the_certificate_is_invalid(exported, tmp_path):
    """An insider re-signs an edited certificate but leaves the old envelope in the bundle: the envelope check fails
    (the bundle's own envelope is checked whenever present)."""
    _resign(exported, tmp_path, lambda c: c.update(release_status="edited"))
    report, [check] = _in_toto(exported)
    assert not check.ok and not report.valid


def test_export_refuses_a_key_that_did_not_sign_the_run(make_session, tmp_path):
    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    load_or_create_key(tmp_path / "other.pem")
    result = CliRunner().invoke(main, ["export", s.run_id, str(tmp_path / "ev"), "--format", "in-toto",
                                       "--signing-key", str(tmp_path / "other.pem")])
    assert result.exit_code != 0 and "did not sign this run's certificate" in result.output
    assert not (tmp_path / "ev").exists()  # refused before the bundle is written: no half-exported folder


def test_a_signing_key_without_in_toto_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["export", "some-run", str(tmp_path / "ev"), "--signing-key", "k.pem"])
    assert result.exit_code == 2 and "--format in-toto" in result.output


def test_a_garbage_public_key_makes_the_envelope_check_fail_not_crash(exported):
    """A bundle whose public_key.pem is not a key: verify says INVALID with reasons (it used to exit 2 on the
    VerificationError key_fingerprint raised outside the envelope check's try)."""
    (exported / "public_key.pem").write_text("not a key\n")
    report, [check] = _in_toto(exported)
    assert not report.valid and not check.ok and "public key" in check.detail
    result = CliRunner().invoke(main, ["verify", str(exported), "--allow-not-for-release"])
    assert result.exit_code == 1 and "INVALID" in result.output, result.output


def test_export_force_removes_an_earlier_exports_envelope(exported, make_session):
    """``export --force`` of another run into a folder holding an earlier in-toto export: the stale envelope,
    which would not verify against the new bundle, is removed."""
    with make_session(protected=("toy data",)) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    result = CliRunner().invoke(main, ["export", s.run_id, str(exported), "--force"])
    assert result.exit_code == 0, result.output
    assert not (exported / ENVELOPE_FILE).exists()
    assert verify_bundle(exported, allow_not_for_release=True).valid
