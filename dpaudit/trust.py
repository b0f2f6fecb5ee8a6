"""Which signing keys a verifier trusts: pinned fingerprints, a trust store, and the local store's own key.

A valid Ed25519 signature proves only that the holder of *some* key signed a certificate; a forger signs with a
fresh key and ships its ``public_key.pem``. So ``dpaudit verify`` accepts a signature only from a key the verifier
trusts, named by its fingerprint (:func:`dpaudit.signing.key_fingerprint`: SHA-256 of the 32 raw public-key
bytes) and obtained out of band. A key is trusted when it is

1. pinned for this verification (``--trusted-key FINGERPRINT|PEMFILE``);
2. the local run store's own key, derived from the PRIVATE key file ``<store>/keys/signing_key.pem`` (never from
   a ``public_key.pem`` that travels with a bundle), so runs made on this machine verify without set-up;
3. listed in the trust store, a JSON file OUTSIDE every run store (the adversary may control the bundle and the
   store folder): ``--trust-store``, else ``$DPAUDIT_TRUST_STORE``, else ``$XDG_CONFIG_HOME/dpaudit/
   trusted_keys.json`` (``~/.config`` when unset). It is written atomically with mode ``0o600`` under a lock, and
   a trust store that group or others can write is refused, as ``ssh`` refuses such key files.

See docs/auditor-guide.md for the auditor's workflow.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.errors import DPAuditError, InvalidParameter, TrustStoreError
from dpaudit.files import atomic_replace
from dpaudit.signing import key_fingerprint, load_key, public_key_fingerprint

TRUST_STORE_FORMAT = "dpaudit-trust-store/1"
TRUST_STORE_ENV = "DPAUDIT_TRUST_STORE"

BY_PINNED = "--trusted-key"
BY_LOCAL_STORE = "local store key"
BY_TRUST_STORE = "trust store"



def default_trust_store_path() -> Path:
    """``$DPAUDIT_TRUST_STORE``, else ``$XDG_CONFIG_HOME/dpaudit/trusted_keys.json`` (``~/.config`` if unset)."""
    explicit = os.environ.get(TRUST_STORE_ENV)
    if explicit:
        return Path(explicit)
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "dpaudit" / "trusted_keys.json"


@dataclass(frozen=True)
class TrustedKey:
    """One trust-store entry: the key's fingerprint, a name for people, and its PEM when it was given."""

    fingerprint: str
    name: str
    public_key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "name": self.name, "public_key": self.public_key}


def parse_key(spec: str) -> tuple[str, str | None]:
    """(fingerprint, PEM or None) of a key named by its 64-hex-digit fingerprint or by a PEM public-key file.

    Raises:
        InvalidParameter: ``spec`` is neither a fingerprint nor a readable Ed25519 PEM public-key file.
    """
    text = spec.strip().lower()
    if canonical.SHA256_HEX.fullmatch(text):
        return text, None
    path = Path(spec)
    if not path.is_file():
        raise InvalidParameter(f"{spec!r} is neither a 64-hex-digit SHA-256 key fingerprint nor a PEM public-key "
                               "file")
    try:
        pem = path.read_text(encoding="ascii")
        return key_fingerprint(pem), pem
    except (OSError, UnicodeDecodeError, DPAuditError) as exc:
        raise InvalidParameter(f"{spec}: not an Ed25519 PEM public key: {exc}") from exc


def read_trust_store(path: Path) -> dict[str, TrustedKey]:
    """The trusted keys in the trust store at ``path`` by fingerprint; an absent file is an empty store.

    Raises:
        TrustStoreError: the file is unreadable, malformed, or writable by group or others.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise TrustStoreError(f"cannot read trust store {path}: {exc}") from exc
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise TrustStoreError(f"trust store {path} is writable by group or others (mode {oct(mode & 0o777)}); "
                              "anyone who can write it decides which keys you trust: chmod 600")
    try:
        data = canonical.read_object(path, TrustStoreError)
    except TrustStoreError as exc:
        raise TrustStoreError(f"malformed trust store: {exc}") from exc
    entries = data.get("keys")
    if data.get("format") != TRUST_STORE_FORMAT or not isinstance(entries, list):
        raise TrustStoreError(f"trust store {path} is not a {TRUST_STORE_FORMAT} object with a 'keys' list")
    found: dict[str, TrustedKey] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TrustStoreError(f"trust store {path}: entry {i} is not an object")
        fingerprint, name, pem = entry.get("fingerprint"), entry.get("name"), entry.get("public_key")
        if not isinstance(fingerprint, str) or not canonical.SHA256_HEX.fullmatch(fingerprint):
            raise TrustStoreError(f"trust store {path}: entry {i} has no 64-hex-digit lower-case fingerprint")
        if not isinstance(name, str) or not (pem is None or isinstance(pem, str)):
            raise TrustStoreError(f"trust store {path}: entry {i} needs a string name and a PEM string or null")
        if pem is not None and _checked_fingerprint(pem) != fingerprint:
            raise TrustStoreError(f"trust store {path}: entry {i}'s public key does not have fingerprint "
                                  f"{fingerprint}")
        found[fingerprint] = TrustedKey(fingerprint, name, pem)
    return found


def _checked_fingerprint(pem: str) -> str | None:
    try:
        return key_fingerprint(pem)
    except DPAuditError:
        return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (serialises read-modify-write of the trust store)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_trust_store(path: Path, keys: Sequence[TrustedKey]) -> None:
    body = {"format": TRUST_STORE_FORMAT, "keys": [k.to_dict() for k in keys]}
    try:
        atomic_replace(path, (canonical.dumps(body) + "\n").encode("utf-8"), 0o600)
    except OSError as exc:
        raise TrustStoreError(f"cannot write trust store {path}: {exc}") from exc


def trust_key(path: Path, spec: str, name: str | None = None) -> TrustedKey:
    """Add (or rename) the key named by ``spec`` (fingerprint or PEM file) in the trust store at ``path``.

    Raises:
        InvalidParameter: ``spec`` names no key.
        TrustStoreError: the trust store is malformed or cannot be written.
    """
    fingerprint, pem = parse_key(spec)
    path = Path(path)
    with _locked(path):
        keys = read_trust_store(path)
        old = keys.get(fingerprint)
        entry = TrustedKey(fingerprint, name if name is not None else (old.name if old else fingerprint[:16]),
                           pem if pem is not None else (old.public_key if old else None))
        keys[fingerprint] = entry
        _write_trust_store(path, list(keys.values()))
    return entry


def untrust_key(path: Path, fingerprint: str) -> bool:
    """Remove ``fingerprint`` from the trust store at ``path``; returns whether it was there.

    Raises:
        TrustStoreError: the trust store is malformed or cannot be written.
    """
    path = Path(path)
    fingerprint = fingerprint.strip().lower()
    with _locked(path):
        keys = read_trust_store(path)
        if keys.pop(fingerprint, None) is None:
            return False
        _write_trust_store(path, list(keys.values()))
    return True


def local_store_fingerprint(root: Path) -> str | None:
    """Fingerprint of the store's own key, derived from its PRIVATE key file; None if the store has no key.

    Raises:
        LedgerError: the key file exists but is unusable (wrong mode, not Ed25519).
    """
    key = load_key(run_store.default_key_path(Path(root)))
    return None if key is None else public_key_fingerprint(key)


@dataclass(frozen=True)
class TrustDecision:
    """Whether a signing key is trusted, and why.

    Attributes:
        fingerprint: the key's fingerprint ("" when the bundle's key could not be parsed).
        trusted: the key is pinned, the local store's key, or in the trust store.
        trusted_by: :data:`BY_PINNED`, :data:`BY_LOCAL_STORE`, :data:`BY_TRUST_STORE` or None.
        name: the trust store's name for the key, if any.
        accepted_unpinned: not trusted, but accepted because the verifier asked to take the bundle's key.
    """

    fingerprint: str
    trusted: bool
    trusted_by: str | None = None
    name: str | None = None
    accepted_unpinned: bool = False

    @property
    def acceptable(self) -> bool:
        return self.trusted or self.accepted_unpinned

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "trusted": self.trusted, "trusted_by": self.trusted_by,
                "name": self.name, "accepted_unpinned": self.accepted_unpinned}


@dataclass(frozen=True)
class KeyTrust:
    """A verifier's trust policy for signing keys.

    Attributes:
        pinned: fingerprints pinned for this verification.
        trust_store: the trust store file consulted (None: none).
        local_store: the run store whose own key is trusted (None: none).
        accept_bundle_key: accept an untrusted key, saying plainly that it was not pinned.
    """

    pinned: tuple[str, ...] = ()
    trust_store: Path | None = None
    local_store: Path | None = None
    accept_bundle_key: bool = False

    @classmethod
    def default(cls, store: Path | str | None = None, *, trusted_keys: Sequence[str] = (),
                trust_store: Path | str | None = None, accept_bundle_key: bool = False) -> KeyTrust:
        """The command line's policy: ``trusted_keys`` pinned, the trust store at ``trust_store`` (default
        :func:`default_trust_store_path`), and the key of the local store ``store`` (default
        :func:`dpaudit.store.store_root`).

        Raises:
            InvalidParameter: a pinned key is neither a fingerprint nor a PEM public-key file.
        """
        return cls(pinned=tuple(parse_key(k)[0] for k in trusted_keys),
                   trust_store=Path(trust_store) if trust_store is not None else default_trust_store_path(),
                   local_store=run_store.store_root(store), accept_bundle_key=accept_bundle_key)

    def decide(self, fingerprint: str) -> TrustDecision:
        """Whether the key with ``fingerprint`` is trusted under this policy.

        Raises:
            TrustStoreError: the trust store is malformed.
            LedgerError: the local store's key file is unusable.
        """
        stored = read_trust_store(self.trust_store) if self.trust_store is not None else {}  # malformed: raise
        local = local_store_fingerprint(self.local_store) if self.local_store is not None else None
        if fingerprint and fingerprint in self.pinned:
            return TrustDecision(fingerprint, True, BY_PINNED)
        if fingerprint and fingerprint == local:
            return TrustDecision(fingerprint, True, BY_LOCAL_STORE, name=str(self.local_store))
        if fingerprint and fingerprint in stored:
            return TrustDecision(fingerprint, True, BY_TRUST_STORE, name=stored[fingerprint].name)
        return TrustDecision(fingerprint, False, accepted_unpinned=self.accept_bundle_key)
