"""`verify --store`: a whole store against its transparency log; runs deleted, swapped, slipped in, log rewritten."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dpaudit import transparency
from dpaudit.errors import VerificationError
from dpaudit.signing import load_or_create_key
from dpaudit.store import default_key_path
from dpaudit.trust import KeyTrust
from dpaudit.verify_store import verify_store


@pytest.fixture
def runs(make_session) -> list[Path]:
    folders = []
    for i in range(3):
        with make_session(name=f"run{i}") as s:
            s.laplace(1.0, sensitivity=1.0, epsilon=0.1 * (i + 1))
        folders.append(s.run_dir)
    return folders


def _failed(root: Path, **kwargs) -> dict[str, str]:
    return {c.name: c.detail for c in verify_store(root, **kwargs).checks if not c.ok}


def test_honest_store_verifies(runs):
    root = runs[0].parent
    head = transparency.current_head(root)
    report = verify_store(root, log_head=(head.size, head.root))
    assert report.valid, report.reasons
    assert [c.name for c in report.checks] == ["store-id", "log-head", "log-key", "logged-runs-present",
                                               "closed-runs-logged", "log-extends"]


def test_a_whole_run_deleted_is_named(runs):
    """Attack: delete a costly run's folder; every remaining run still verifies on its own."""
    shutil.rmtree(runs[1])
    failed = _failed(runs[0].parent)
    assert set(failed) == {"logged-runs-present"} and runs[1].name in failed["logged-runs-present"]


def test_a_run_swapped_for_another_runs_files_is_named(runs):
    for f in runs[2].iterdir():
        shutil.copy2(f, runs[0] / f.name)
    failed = _failed(runs[0].parent)
    assert set(failed) == {"logged-runs-present"}
    assert "swapped or replayed" in failed["logged-runs-present"] and runs[0].name in failed["logged-runs-present"]


def test_a_run_slipped_into_the_store_is_named(runs, tmp_path):
    """A closed run the log never saw (e.g. a forged or imported folder) is reported."""
    stranger = runs[0].parent / ("f" * 32)
    shutil.copytree(runs[0], stranger)
    failed = _failed(runs[0].parent)
    assert set(failed) == {"closed-runs-logged"} and stranger.name in failed["closed-runs-logged"]


def test_an_insider_rewriting_the_log_is_caught_by_the_earlier_head(runs, make_session):
    """Attack by the key holder: delete a run AND its log entry, re-sign the head with the store key. The store is
    then self-consistent; only the head recorded out of band before exposes it, even once new runs have grown
    the log back to its old size."""
    root = runs[0].parent
    earlier = transparency.current_head(root)
    shutil.rmtree(runs[1])
    kept = [e for e in transparency.read_log(root) if e.run_id != runs[1].name]
    (root / "transparency" / "log.jsonl").write_bytes(b"".join(e.leaf_data() + b"\n" for e in kept))
    head = transparency.TreeHead.signed(earlier.store_id, kept, load_or_create_key(default_key_path(root)))
    (root / "transparency" / "head.json").write_text(json.dumps(head.to_dict()))
    assert verify_store(root).valid  # without the earlier head, nothing is left to compare with
    failed = _failed(root, log_head=(earlier.size, earlier.root))
    assert set(failed) == {"log-extends"} and "entries removed" in failed["log-extends"]
    with make_session(name="later") as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    assert len(transparency.read_log(root)) == earlier.size
    failed = _failed(root, log_head=(earlier.size, earlier.root))
    assert set(failed) == {"log-extends"} and "rewritten" in failed["log-extends"]


def test_a_log_head_signed_by_an_untrusted_key_fails(runs, tmp_path):
    root = runs[0].parent
    entries = transparency.read_log(root)
    head = transparency.TreeHead.signed(transparency.current_head(root).store_id, entries,
                                        load_or_create_key(tmp_path / "outsider.pem"))
    (root / "transparency" / "head.json").write_text(json.dumps(head.to_dict()))
    failed = _failed(root, trust=KeyTrust.default(root))
    assert set(failed) == {"log-key"} and "untrusted" in failed["log-key"]
    accepted = verify_store(root, trust=KeyTrust.default(root, accept_bundle_key=True))
    assert accepted.valid


def test_a_log_edited_without_resigning_fails(runs):
    root = runs[0].parent
    path = root / "transparency" / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:1] + lines[2:]))
    failed = _failed(root)
    assert "log-head" in failed and "covers 3 entries, the log holds 2" in failed["log-head"]


def test_a_store_without_a_store_id_fails(runs):
    (runs[0].parent / "store.json").unlink()
    failed = _failed(runs[0].parent)
    assert "store-id" in failed and "log-head" in failed  # the head names a store id the store no longer has


def test_not_a_folder_is_a_usage_error(tmp_path):
    with pytest.raises(VerificationError, match="not a folder"):
        verify_store(tmp_path / "nowhere")
