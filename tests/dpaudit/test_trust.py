"""The trust store and the trust policy: which signing keys a verifier accepts, and why."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from dpaudit.errors import InvalidParameter, TrustStoreError
from dpaudit.signing import load_or_create_key, public_key_fingerprint, public_key_pem
from dpaudit.store import default_key_path
from dpaudit.trust import (
    BY_LOCAL_STORE,
    BY_PINNED,
    BY_TRUST_STORE,
    KeyTrust,
    default_trust_store_path,
    local_store_fingerprint,
    parse_key,
    read_trust_store,
    trust_key,
    untrust_key,
)


@pytest.fixture
def other_key(tmp_path: Path) -> tuple[str, Path]:
    """A key that is not the local store's: its fingerprint and a PEM file of its public half."""
    key = load_or_create_key(tmp_path / "other" / "key.pem")
    pem_file = tmp_path / "other" / "public.pem"
    pem_file.write_text(public_key_pem(key))
    return public_key_fingerprint(key), pem_file


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "trusted_keys.json"


def test_default_path_order(monkeypatch, tmp_path):
    monkeypatch.setenv("DPAUDIT_TRUST_STORE", str(tmp_path / "explicit.json"))
    assert default_trust_store_path() == tmp_path / "explicit.json"
    monkeypatch.delenv("DPAUDIT_TRUST_STORE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_trust_store_path() == tmp_path / "xdg" / "dpaudit" / "trusted_keys.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_trust_store_path() == tmp_path / "home" / ".config" / "dpaudit" / "trusted_keys.json"


def test_parse_key_accepts_fingerprints_and_pem_files(other_key):
    fingerprint, pem_file = other_key
    assert parse_key(fingerprint.upper()) == (fingerprint, None)
    assert parse_key(str(pem_file)) == (fingerprint, pem_file.read_text())


@pytest.mark.parametrize("bad", ["abc", "g" * 64, "0" * 63, "/no/such/file.pem"])
def test_parse_key_refuses_what_names_no_key(bad):
    with pytest.raises(InvalidParameter, match="fingerprint"):
        parse_key(bad)


def test_parse_key_refuses_a_file_that_is_not_a_public_key(tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    with pytest.raises(InvalidParameter, match="not an Ed25519 PEM public key"):
        parse_key(str(garbage))


def test_trust_untrust_round_trip_private_file(store_path, other_key):
    fingerprint, pem_file = other_key
    assert read_trust_store(store_path) == {}
    entry = trust_key(store_path, str(pem_file), name="auditee")
    assert (entry.fingerprint, entry.name, entry.public_key) == (fingerprint, "auditee", pem_file.read_text())
    assert store_path.stat().st_mode & 0o777 == 0o600
    assert read_trust_store(store_path)[fingerprint] == entry
    renamed = trust_key(store_path, fingerprint, name="renamed")  # re-trusting by fingerprint keeps the PEM
    assert renamed.public_key == pem_file.read_text() and renamed.name == "renamed"
    assert [p.name for p in store_path.parent.iterdir() if p.name.endswith(".tmp")] == []
    assert untrust_key(store_path, fingerprint) is True
    assert untrust_key(store_path, fingerprint) is False
    assert read_trust_store(store_path) == {}


@pytest.mark.parametrize("content, message", [
    ("not json", "not strict JSON"),
    ("[]", "JSON object"),
    ('{"format": "other", "keys": []}', "dpaudit-trust-store/1"),
    ('{"format": "dpaudit-trust-store/1", "keys": [{"fingerprint": "abc", "name": "x", "public_key": null}]}',
     "fingerprint"),
    ('{"format": "dpaudit-trust-store/1", "keys": [{"fingerprint": "' + "a" * 64 + '", "name": 3}]}', "name"),
])
def test_malformed_trust_store_is_a_clear_error(store_path, content, message):
    store_path.parent.mkdir(parents=True)
    store_path.write_text(content)
    os.chmod(store_path, 0o600)
    with pytest.raises(TrustStoreError, match=message):
        read_trust_store(store_path)
    with pytest.raises(TrustStoreError):
        KeyTrust(trust_store=store_path).decide("a" * 64)


def test_entry_whose_pem_does_not_match_its_fingerprint_is_refused(store_path, other_key):
    """An attacker who can edit the file must not smuggle in a key under another key's fingerprint."""
    fingerprint, pem_file = other_key
    trust_key(store_path, str(pem_file))
    data = json.loads(store_path.read_text())
    data["keys"][0]["fingerprint"] = "b" * 64
    store_path.write_text(json.dumps(data))
    with pytest.raises(TrustStoreError, match="does not have fingerprint"):
        read_trust_store(store_path)


def test_trust_store_writable_by_others_is_refused(store_path, other_key):
    trust_key(store_path, other_key[0])
    os.chmod(store_path, 0o622)
    with pytest.raises(TrustStoreError, match="writable by group or others"):
        read_trust_store(store_path)


def test_decisions(store_path, other_key, tmp_path):
    root = tmp_path / "store"
    local = public_key_fingerprint(load_or_create_key(default_key_path(root)))
    fingerprint, _ = other_key
    stranger = "c" * 64
    trust_key(store_path, fingerprint, name="auditee")
    policy = KeyTrust(pinned=(stranger,), trust_store=store_path, local_store=root)
    assert policy.decide(stranger).trusted_by == BY_PINNED
    assert policy.decide(local).trusted_by == BY_LOCAL_STORE
    stored = policy.decide(fingerprint)
    assert (stored.trusted_by, stored.name) == (BY_TRUST_STORE, "auditee")
    unknown = policy.decide("d" * 64)
    assert not unknown.trusted and not unknown.acceptable and unknown.trusted_by is None
    accepting = KeyTrust(accept_bundle_key=True).decide("d" * 64)
    assert not accepting.trusted and accepting.accepted_unpinned and accepting.acceptable
    assert not KeyTrust(trust_store=store_path).decide("").trusted  # an unparsable key is never trusted


def test_local_store_key_comes_from_the_private_key_file_only(tmp_path, other_key):
    """A public_key.pem planted in the store (or a run of it) does not make its key the store's."""
    root = tmp_path / "store"
    assert local_store_fingerprint(root) is None  # no key: nothing trusted, nothing created
    assert not default_key_path(root).exists()
    fingerprint, pem_file = other_key
    (root / "run").mkdir(parents=True)
    (root / "run" / "public_key.pem").write_text(pem_file.read_text())
    (root / "keys").mkdir()
    (root / "keys" / "public_key.pem").write_text(pem_file.read_text())
    assert not KeyTrust(local_store=root).decide(fingerprint).trusted
    own = public_key_fingerprint(load_or_create_key(default_key_path(root)))
    assert local_store_fingerprint(root) == own != fingerprint


def test_concurrent_trusts_lose_no_entry(store_path):
    """Read-modify-write under the lock: 8 threads trusting 5 keys each leave all 40 in the store."""
    fingerprints = [[f"{t:02x}{i:02x}".ljust(64, "e") for i in range(5)] for t in range(8)]
    barrier = threading.Barrier(8)

    def work(mine: list[str]) -> None:
        barrier.wait()
        for f in mine:
            trust_key(store_path, f)

    threads = [threading.Thread(target=work, args=(f,)) for f in fingerprints]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(read_trust_store(store_path)) == {f for fs in fingerprints for f in fs}
