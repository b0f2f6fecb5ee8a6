"""Tests of dpaudit.signing (Ed25519 key handling, signatures, fingerprints)."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from dpaudit.errors import LedgerError, VerificationError
from dpaudit.signing import key_fingerprint, load_or_create_key, public_key_pem, sign, verify_signature

DATA = b'{"epsilon":1.0,"ledger_head":"ab","records":3}'


@pytest.fixture
def key_path(tmp_path: Path) -> Path:
    return tmp_path / "keys" / "deeper" / "signing.pem"


def test_key_is_created_private_and_reloaded(key_path: Path) -> None:
    key = load_or_create_key(key_path)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert key_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_pem(load_or_create_key(key_path)) == public_key_pem(key)
    assert [p.name for p in key_path.parent.iterdir()] == ["signing.pem"]  # no temporary file left behind


def test_sign_and_verify(key_path: Path) -> None:
    key = load_or_create_key(key_path)
    pem = public_key_pem(key)
    signature = sign(key, DATA)
    assert verify_signature(pem, DATA, signature)
    assert not verify_signature(pem, DATA.replace(b"1.0", b"2.0"), signature)
    assert not verify_signature(pem, DATA + b" ", signature)


def test_wrong_key_fails(tmp_path: Path) -> None:
    a = load_or_create_key(tmp_path / "a.pem")
    b = load_or_create_key(tmp_path / "b.pem")
    assert not verify_signature(public_key_pem(b), DATA, sign(a, DATA))


@pytest.mark.parametrize("bad", ["", "not base64!!", "AAAA", "=" * 88, "QUJD" * 22, 12345])
def test_bad_signatures_return_false(key_path: Path, bad: object) -> None:
    pem = public_key_pem(load_or_create_key(key_path))
    assert verify_signature(pem, DATA, bad) is False  # type: ignore[arg-type]


def test_flipped_signature_bit_fails(key_path: Path) -> None:
    key = load_or_create_key(key_path)
    raw = bytearray(base64.b64decode(sign(key, DATA)))
    raw[10] ^= 1
    assert not verify_signature(public_key_pem(key), DATA, base64.b64encode(bytes(raw)).decode())


@pytest.mark.parametrize("bad_pem", ["", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "é"])
def test_unparsable_public_key_raises(bad_pem: str) -> None:
    with pytest.raises(VerificationError):
        verify_signature(bad_pem, DATA, "AAAA")
    with pytest.raises(VerificationError):
        key_fingerprint(bad_pem)


def test_non_ed25519_public_key_raises() -> None:
    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    with pytest.raises(VerificationError, match="not Ed25519"):
        verify_signature(ec_pem, DATA, "AAAA")


def test_fingerprint(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "a.pem")
    pem = public_key_pem(key)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key_fingerprint(pem) == hashlib.sha256(raw).hexdigest()
    assert key_fingerprint(pem) != key_fingerprint(public_key_pem(load_or_create_key(tmp_path / "b.pem")))


def test_key_readable_by_others_is_refused(key_path: Path) -> None:
    load_or_create_key(key_path)
    os.chmod(key_path, 0o644)
    with pytest.raises(LedgerError, match="chmod 600"):
        load_or_create_key(key_path)


def test_garbage_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    path.write_bytes(b"not a key")
    path.chmod(0o600)
    with pytest.raises(LedgerError, match="not an unencrypted PEM"):
        load_or_create_key(path)


def test_non_ed25519_private_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(pem)
    path.chmod(0o600)
    with pytest.raises(LedgerError, match="not Ed25519"):
        load_or_create_key(path)


def test_load_key_never_creates_and_fingerprints_the_private_key(key_path: Path) -> None:
    from dpaudit.signing import load_key, public_key_fingerprint

    assert load_key(key_path) is None and not key_path.exists()
    key = load_or_create_key(key_path)
    assert public_key_fingerprint(load_key(key_path)) == key_fingerprint(public_key_pem(key))


def test_racing_creators_share_one_key(key_path: Path) -> None:
    """Eight threads creating the same key at once all end up with the key that landed on disk."""
    import threading

    barrier, found = threading.Barrier(8), []

    def create() -> None:
        barrier.wait()
        found.append(public_key_pem(load_or_create_key(key_path)))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 1 and found[0] == public_key_pem(load_or_create_key(key_path))
    assert [p.name for p in key_path.parent.iterdir()] == [key_path.name]  # no temporary file left behind
