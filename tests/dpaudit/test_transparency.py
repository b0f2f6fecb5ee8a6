"""The store's transparency log: RFC 6962 tree hashes, signed heads, appends at close, damage detection."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from dpaudit import store as run_store
from dpaudit.errors import InvalidParameter, LedgerError
from dpaudit.signing import load_or_create_key
from dpaudit.transparency import (
    HEAD_FILE,
    LOG_FILE,
    LogEntry,
    append_entry,
    current_head,
    extension_problem,
    head_problems,
    leaf_hash,
    log_dir,
    merkle_root,
    node_hash,
    parse_head_token,
    read_head,
    read_log,
    tree_hash,
)

# The Certificate Transparency reference test vectors (RFC 6962 trees over these 8 leaves, sizes 0-8), as pinned
# by the CT implementations' own test suites.
CT_LEAVES = [b"", b"\x00", b"\x10", b"\x20\x21", b"\x30\x31", b"\x40\x41\x42\x43", bytes(range(0x50, 0x58)),
             bytes(range(0x60, 0x70))]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
STORE_ID = "ab" * 16


@pytest.mark.parametrize("size", range(len(CT_ROOTS)))
def test_tree_hash_matches_the_rfc6962_reference_vectors(size):
    assert merkle_root([leaf_hash(d) for d in CT_LEAVES[:size]]).hex() == CT_ROOTS[size]


def test_leaves_and_nodes_are_domain_separated():
    """Without the 0x00 / 0x01 prefixes a two-leaf root would equal the leaf hash of the two hashes joined."""
    a, b = leaf_hash(b"a"), leaf_hash(b"b")
    assert node_hash(a, b) != hashlib.sha256(a + b).digest() != leaf_hash(a + b)
    assert merkle_root([a, b]) == node_hash(a, b)


def _entry(i: int) -> LogEntry:
    return LogEntry(f"run{i}", f"{i:064x}", f"{i + 1:064x}", i + 4, "f" * 64)


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def key(root):
    return load_or_create_key(run_store.default_key_path(root))


def test_append_signs_a_head_over_the_whole_log(root, key):
    assert read_log(root) == [] and read_head(root) is None
    heads = [append_entry(root, STORE_ID, _entry(i), key) for i in range(5)]
    entries = read_log(root)
    assert entries == [_entry(i) for i in range(5)]
    assert [h.size for h in heads] == [1, 2, 3, 4, 5]
    assert current_head(root) == heads[-1] and heads[-1].signature_ok()
    assert heads[-1].root == tree_hash(entries) and head_problems(heads[-1], entries) == []
    for h in heads:  # every earlier head is a prefix of the log: append-only
        assert extension_problem(entries, h.size, h.root) is None
    assert parse_head_token(heads[2].token) == (3, heads[2].root)


def test_a_run_is_logged_once(root, key):
    append_entry(root, STORE_ID, _entry(0), key)
    with pytest.raises(LedgerError, match="already names run run0"):
        append_entry(root, STORE_ID, replace(_entry(0), certificate_sha256="1" * 64), key)
    assert len(read_log(root)) == 1


def test_removed_or_rewritten_entries_break_an_earlier_head(root, key):
    for i in range(4):
        append_entry(root, STORE_ID, _entry(i), key)
    earlier = current_head(root)
    entries = read_log(root)
    assert "entries removed" in extension_problem(entries[:3], earlier.size, earlier.root)
    swapped = [*entries[:2], replace(entries[2], certificate_sha256="2" * 64), entries[3]]
    assert "rewritten" in extension_problem(swapped, earlier.size, earlier.root)
    assert any("tree hash" in p for p in head_problems(earlier, swapped))


def test_a_forged_head_signature_is_reported(root, key):
    append_entry(root, STORE_ID, _entry(0), key)
    path = log_dir(root) / HEAD_FILE
    head = json.loads(path.read_text())
    head["size"] = 2  # claim a longer log without re-signing
    path.write_text(json.dumps(head))
    problems = head_problems(read_head(root), read_log(root))
    assert any("signature" in p for p in problems) and any("covers 2 entries" in p for p in problems)
    with pytest.raises(LedgerError, match="signature"):
        current_head(root)


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-3], "torn line"),
    (lambda b: b.replace(b'{"certificate_sha256"', b'{ "certificate_sha256"'), "not canonical"),
    (lambda b: b + b'{"run_id":"x"}\n', "exactly"),
])
def test_a_damaged_log_is_refused_not_repaired(root, key, damage, message):
    append_entry(root, STORE_ID, _entry(0), key)
    path = log_dir(root) / LOG_FILE
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(LedgerError, match=message):
        read_log(root)
    with pytest.raises(LedgerError):
        append_entry(root, STORE_ID, _entry(1), key)


@pytest.mark.parametrize("bad", ["3", "x:" + "a" * 64, "3:" + "a" * 63, "-1:" + "a" * 64])
def test_head_token_must_be_size_and_root(bad):
    with pytest.raises(InvalidParameter, match="SIZE:ROOT"):
        parse_head_token(bad)


def test_concurrent_appends_keep_the_log_and_head_consistent(root, key):
    """Appends from 6 threads serialise on the lock: every entry is logged once and the head covers them all."""
    barrier = threading.Barrier(6)

    def work(t: int) -> None:
        barrier.wait()
        for i in range(4):
            append_entry(root, STORE_ID, _entry(10 * t + i), key)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = read_log(root)
    assert sorted(e.run_id for e in entries) == sorted(f"run{10 * t + i}" for t in range(6) for i in range(4))
    assert head_problems(current_head(root), entries) == []


def test_sessions_log_their_certificates_at_close(make_session):
    runs = []
    for i in range(3):
        with make_session(name=f"s{i}") as s:
            s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
        runs.append(s)
    root = runs[0].run_dir.parent
    entries = read_log(root)
    certificates = [json.loads(s.certificate_path.read_text()) for s in runs]
    assert entries == [LogEntry.of(s.run_id, c) for s, c in zip(runs, certificates, strict=True)]
    head = current_head(root)
    assert head.store_id == run_store.read_store_id(root) == certificates[0]["run"]["store_id"]
    assert head.key_fingerprint == certificates[0]["public_key_fingerprint"]


@pytest.mark.parametrize("run_id", ["..", "../x", "a/b", ".", "a\x00b", ""])
def test_a_log_entry_naming_a_path_outside_the_store_is_malformed(run_id):
    """Before: only '/' was refused, so `..` made `verify --store` look at the store's parent folder."""
    entry = {"run_id": run_id, "certificate_sha256": "a" * 64, "ledger_head": "b" * 64, "ledger_records": 3,
             "key_fingerprint": "c" * 64}
    with pytest.raises(LedgerError, match="malformed log entry"):
        LogEntry.from_dict(entry)
