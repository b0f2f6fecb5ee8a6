"""The certificate as an in-toto attestation: a Statement v1 in a DSSE envelope, signed with the run's Ed25519 key.

``dpaudit export RUN DIR --format in-toto`` writes :data:`ENVELOPE_FILE` beside the evidence bundle, for supply-chain
tools that read in-toto / SLSA attestations:

* the payload is an in-toto Statement v1 (https://github.com/in-toto/attestation, ``spec/v1/statement.md``):
  ``_type`` :data:`STATEMENT_TYPE`; ``subject`` the run's ledger head (its SHA-256 hash chains every record), then
  every trained model (``model_sha256`` of a release) and every released array file (:mod:`dpaudit.sidecar`), in
  ledger order (:func:`subjects`); ``predicateType`` :data:`PREDICATE_TYPE`; ``predicate`` the signed certificate,
  unchanged. The payload is canonical JSON (:mod:`dpaudit.canonical`).
* the envelope is DSSE v1 (https://github.com/secure-systems-lab/dsse, ``envelope.md`` and ``protocol.md``):
  ``payloadType`` :data:`PAYLOAD_TYPE`, ``payload`` the standard base64 of the payload, one signature: Ed25519 over
  ``PAE(payloadType, payload)`` (:func:`pae`) with the key that signs the certificate, ``keyid`` its fingerprint
  (:func:`dpaudit.signing.key_fingerprint`).

:func:`envelope_problems` is ``dpaudit verify``'s side: the file must be exactly the canonical encoding of its
envelope (so no byte can change without changing a field), the signature must verify under the bundle's (trusted)
key, and the statement must be the one rebuilt from the verified ledger and certificate. Every flipped byte of the
file is therefore reported (tests/dpaudit/test_intoto.py flips each one).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit.errors import DPAuditError, InvalidParameter, VerificationError
from dpaudit.files import atomic_replace
from dpaudit.ledger import Record
from dpaudit.prov import closed_run
from dpaudit.records import RELEASE, ReleaseBody
from dpaudit.signing import key_fingerprint, load_key, public_key_fingerprint, sign, verify_signature

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "urn:dpaudit:predicate:certificate:v1"
"""The predicate is a dpaudit certificate (its own ``format`` field names its version)."""
ENVELOPE_FILE = "certificate.intoto.json"
"""The envelope's file name in an exported bundle."""
MAX_ENVELOPE_BYTES = canonical.MAX_OBJECT_BYTES * 2
"""The largest envelope file read (a base64 certificate plus subjects)."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, each LEN the
    byte length in ASCII decimal (DSSE ``protocol.md``)."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def subjects(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The statement's subjects: the ledger head, then each trained model and released array file in ledger order.

    Raises:
        LedgerError: a release body that does not decode.
    """
    out = [{"name": "ledger.jsonl#head", "digest": {"sha256": records[-1].hash},
            "annotations": {"records": len(records)}}]
    for r in records:
        if r.type != RELEASE:
            continue
        body = ReleaseBody.from_dict(r.body)
        value = body.output
        if isinstance(value, Mapping) and isinstance(value.get("model_sha256"), str):
            out.append({"name": f"model:{body.plugin}/{body.mechanism}@{r.seq}",
                        "digest": {"sha256": value["model_sha256"]}})
        if body.output_file is not None:
            out.append({"name": body.output_file.path, "digest": {"sha256": body.output_file.sha256}})
    return out


def statement(records: Sequence[Record], certificate: Mapping[str, Any]) -> dict[str, Any]:
    """The in-toto Statement v1 of a run: its subjects (:func:`subjects`) and the certificate as predicate."""
    return {"_type": STATEMENT_TYPE, "subject": subjects(records), "predicateType": PREDICATE_TYPE,
            "predicate": dict(certificate)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def envelope_bytes(records: Sequence[Record], certificate: Mapping[str, Any], key) -> bytes:
    """The DSSE envelope file of the run's statement, signed with ``key`` (the run's signing key).

    Raises:
        VerificationError: ``key`` is not the key that signed the certificate.
    """
    keyid = public_key_fingerprint(key)
    if keyid != certificate.get("public_key_fingerprint"):
        raise VerificationError(f"the key {keyid[:16]}… did not sign this run's certificate (signed by "
                                f"{str(certificate.get('public_key_fingerprint'))[:16]}…): pass the run's key")
    payload = canonical.encode(statement(records, certificate))
    signature = sign(key, pae(PAYLOAD_TYPE, payload))
    return canonical.encode({"payload": _b64(payload), "payloadType": PAYLOAD_TYPE,
                             "signatures": [{"keyid": keyid, "sig": signature}]}) + b"\n"


def _strict_b64(text: Any, what: str) -> bytes:
    """Standard base64 in its one canonical spelling (no other padding bits, no whitespace).

    Raises:
        VerificationError: anything else.
    """
    try:
        data = base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        data = None
    if data is None or _b64(data) != text:
        raise VerificationError(f"the envelope's {what} is not canonical standard base64")
    return data


def envelope_problems(data: bytes, public_pem: str, records: Sequence[Record],
                      certificate: Mapping[str, Any]) -> list[str]:
    """What is wrong with the envelope file ``data`` of the run (empty when nothing is).

    Args:
        data: the file's bytes.
        public_pem: the run's public key (the caller has checked it is trusted and signed the certificate).
        records: the run's (verified) ledger.
        certificate: the run's (verified) certificate.
    """
    try:
        envelope = canonical.loads_object(data.decode("utf-8"), "in-toto envelope", VerificationError)
        if canonical.encode(envelope) + b"\n" != data:
            raise VerificationError("the envelope file is not the canonical JSON of its envelope (edited?)")
        if sorted(envelope) != ["payload", "payloadType", "signatures"]:
            raise VerificationError(f"the envelope has fields {sorted(envelope)}, not payload, payloadType, "
                                    "signatures")
        signatures = envelope["signatures"]
        if not (isinstance(signatures, list) and len(signatures) == 1 and isinstance(signatures[0], dict)
                and sorted(signatures[0]) == ["keyid", "sig"]):
            raise VerificationError("the envelope must carry exactly one signature {keyid, sig}")
        payload = _strict_b64(envelope["payload"], "payload")
        signature = signatures[0]["sig"]
        _strict_b64(signature, "signature")
    except (VerificationError, UnicodeDecodeError) as exc:
        return [str(exc)]
    problems = []
    payload_type, keyid = envelope["payloadType"], signatures[0]["keyid"]
    if payload_type != PAYLOAD_TYPE:
        problems.append(f"payloadType {str(payload_type)[:60]!r}, not {PAYLOAD_TYPE!r}")
    try:
        fingerprint = key_fingerprint(public_pem)
        signed = isinstance(payload_type, str) and verify_signature(public_pem, pae(payload_type, payload), signature)
    except VerificationError as exc:  # a garbage public key: the envelope cannot be checked, which is a problem
        return [*problems, f"the run's public key cannot check the envelope: {exc}"]
    if keyid != fingerprint:
        problems.append(f"keyid {str(keyid)[:16]}… is not the run's key {fingerprint[:16]}…")
    if not signed:
        problems.append("the DSSE signature does not verify under the run's key (payload or type edited?)")
    if problems:  # an unsigned payload says nothing worth comparing
        return problems
    try:
        expected = statement(records, certificate)
    except DPAuditError as exc:
        return [*problems, f"no statement can be rebuilt from the ledger: {exc}"]
    if payload != canonical.encode(expected):
        try:
            found = canonical.loads_object(payload.decode("utf-8"), "in-toto statement", VerificationError)
        except (VerificationError, UnicodeDecodeError) as exc:
            return [*problems, str(exc)]
        wrong = [name for name in ("_type", "subject", "predicateType", "predicate")
                 if found.get(name) != expected[name]]
        problems.append("the statement's " + (", ".join(wrong) if wrong else "encoding") + " differ(s) from the run's "
                        "(the predicate must be the verified certificate, the subjects its ledger head and outputs)")
    return problems


def envelope_of_run(run_dir: Path, key_path: Path) -> bytes:
    """The envelope of the closed run in ``run_dir``, signed with the key at ``key_path`` (nothing is written, so
    ``dpaudit export`` checks the key before it writes the bundle).

    Args:
        run_dir: the run folder (ledger and certificate).
        key_path: the run's private signing key.

    Raises:
        VerificationError: no certificate or ledger, or the key did not sign the certificate.
        InvalidParameter: no key at ``key_path``.
        LedgerError: the ledger or key is unreadable.
    """
    key = load_key(Path(key_path))
    if key is None:
        raise InvalidParameter(f"no signing key at {key_path}: give the key that signed the run (--signing-key)")
    records, certificate = closed_run(run_dir)
    return envelope_bytes(records, certificate, key)


def write_envelope(directory: Path, envelope: bytes) -> Path:
    """Write ``envelope`` (:func:`envelope_of_run`) as ``directory/``:data:`ENVELOPE_FILE`, atomically."""
    target = Path(directory) / ENVELOPE_FILE
    atomic_replace(target, envelope)
    return target
