"""Ed25519 signatures over certificates (RFC 8032, via ``cryptography``).

What is signed is the canonical JSON of a certificate, which carries the ledger's head hash and record count, so
one signature covers the whole hash chain. A signature proves that the holder of the private key produced the
certificate and that nothing it covers changed afterwards; it proves nothing against the key holder. See
docs/ledger.md for key handling.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dpaudit.errors import LedgerError, VerificationError
from dpaudit.files import create_once


def load_or_create_key(path: Path) -> Ed25519PrivateKey:
    """Load the Ed25519 private key at ``path``, creating it (and its parent directories) if it does not exist.

    A new key is written as unencrypted PKCS#8 PEM with mode ``0o600``; the file appears atomically (written
    aside, then hard-linked into place, :func:`dpaudit.files.create_once`), so two processes racing to create it
    end up sharing one key.

    Raises:
        LedgerError: the file is not an Ed25519 PKCS#8 PEM key, is readable or writable by group or others, or
            cannot be read or written.
    """
    path = Path(path)
    key = load_key(path)
    if key is not None:
        return key
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        created = create_once(path, pem, 0o600)
    except OSError as err:
        raise LedgerError(f"cannot create signing key {path}: {err}") from err
    if not created:  # another process created it first: use theirs
        return _load_key(path)
    return key


def load_key(path: Path) -> Ed25519PrivateKey | None:
    """The Ed25519 private key at ``path``, or None if there is no file there (nothing is created).

    Raises:
        LedgerError: the file exists but is unusable (see :func:`load_or_create_key`).
    """
    try:
        return _load_key(Path(path))
    except FileNotFoundError:
        return None


def _load_key(path: Path) -> Ed25519PrivateKey:
    """Raises FileNotFoundError when absent, LedgerError when present but unusable."""
    try:
        mode = path.stat().st_mode
        pem = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise LedgerError(f"cannot read signing key {path}: {err}") from err
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise LedgerError(f"signing key {path} is accessible by group or others (mode {oct(mode & 0o777)}); chmod 600")
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as err:
        raise LedgerError(f"signing key {path} is not an unencrypted PEM private key: {err}") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise LedgerError(f"signing key {path} is a {key.__class__.__name__}, not Ed25519")
    return key


def public_key_pem(key: Ed25519PrivateKey) -> str:
    """The public half of ``key`` as SubjectPublicKeyInfo PEM text."""
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def sign(key: Ed25519PrivateKey, data: bytes) -> str:
    """Ed25519 signature of ``data``, standard base64 (88 characters)."""
    return base64.b64encode(key.sign(data)).decode("ascii")


def _load_public(public_pem: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(public_pem.encode("ascii"))
    except (ValueError, TypeError, UnicodeEncodeError, UnsupportedAlgorithm, AttributeError) as err:
        raise VerificationError(f"public key is not PEM SubjectPublicKeyInfo: {err}") from err
    if not isinstance(key, Ed25519PublicKey):
        raise VerificationError(f"public key is a {key.__class__.__name__}, not Ed25519")
    return key


def verify_signature(public_pem: str, data: bytes, signature_b64: str) -> bool:
    """Whether ``signature_b64`` is a valid Ed25519 signature of ``data`` under ``public_pem``.

    Returns False for any bad signature (wrong key, altered data, not base64, wrong length); never raises for one.

    Raises:
        VerificationError: ``public_pem`` is not a parsable Ed25519 public key.
    """
    key = _load_public(public_pem)
    try:
        signature = base64.b64decode(signature_b64, validate=True)
        key.verify(signature, data)
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        return False
    return True


def key_fingerprint(public_pem: str) -> str:
    """Hex SHA-256 of the 32 raw public-key bytes: a short, encoding-independent name for the key.

    Raises:
        VerificationError: ``public_pem`` is not a parsable Ed25519 public key.
    """
    raw = _load_public(public_pem).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_key_fingerprint(key: Ed25519PrivateKey) -> str:
    """:func:`key_fingerprint` of the public half of the private ``key``."""
    return key_fingerprint(public_key_pem(key))
