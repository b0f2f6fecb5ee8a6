"""The confidential log: its own 0600 file in the run folder, never in the MLflow store that `dpaudit ui` serves."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import pytest

from dpaudit import DPAuditError
from dpaudit.errors import ConfidentialStoreError, InvalidParameter
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.runs import export_bundle
from dpaudit.selection import commit_repetitions
from dpaudit.tracking.confidential import (
    DESCRIPTION,
    LOCATION,
    ConfidentialLog,
    ConfidentialValue,
)
from dpaudit.tracking.store import sqlite_database

SECRET_KEY = "true_validation_score_q7z"
SECRET = 0.7316492817352091  # distinctive: its text and its IEEE-754 bytes occur nowhere by chance


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _holds_secret(path: Path) -> bool:
    data = path.read_bytes()
    needles = (SECRET_KEY.encode(), repr(SECRET).encode(), struct.pack(">d", SECRET), struct.pack("<d", SECRET))
    return any(n in data for n in needles)


def test_a_confidential_value_is_nowhere_in_the_tracking_store_and_its_file_is_0600(make_session, tmp_path):
    """Attack: read the MLflow database (and its artifacts) that `dpaudit ui` or a team server serves, byte by
    byte, for a value logged confidentially. Before this change the value was a metric in that database."""
    database = sqlite_database(os.environ["MLFLOW_TRACKING_URI"])
    s = make_session(mirror=True, confidential=True, name="conf")
    s.log_confidential({SECRET_KEY: SECRET, "true_loss": 1.25}, step=3)
    certificate = s.close()

    served = [database, *_files_under(database.parent / "artifacts"), *database.parent.glob("mlflow.db*")]
    assert database.is_file() and not [p for p in served if p.is_file() and _holds_secret(p)]
    log = s.run_dir / LOCATION
    assert _holds_secret(log) and _mode(log) == 0o600 and _mode(log.parent) == 0o700
    assert not [p for p in log.parent.iterdir() if _mode(p) & 0o077]  # no journal left readable by others
    assert certificate["confidential_log"]["location"] == LOCATION
    assert "NOT differentially private" in certificate["confidential_log"]["statement"]
    values = ConfidentialLog(s.run_dir).read()
    assert [(v.run_name, v.key, v.step, v.value) for v in values] == [("conf", SECRET_KEY, 3, SECRET),
                                                                       ("conf", "true_loss", 3, 1.25)]
    assert all(isinstance(v, ConfidentialValue) for v in values)
    exported = export_bundle(s.run_dir, tmp_path / "bundle")
    assert not [p for p in exported if _holds_secret(p)] and not (tmp_path / "bundle" / "confidential").exists()


def test_the_log_says_what_it_is_and_works_without_the_mirror(make_session):
    s = make_session(confidential=True)
    s.log_confidential({"true_score": 0.5})
    s.close()
    import sqlite3

    with sqlite3.connect(s.run_dir / LOCATION) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'description'").fetchone() == (DESCRIPTION,)


def test_no_confidential_file_unless_asked(make_session):
    s = make_session()
    with pytest.raises(DPAuditError, match="confidential logging is off"):
        s.log_confidential({"x": 1.0})
    s.close()
    assert not (s.run_dir / LOCATION).exists()


def test_a_permissive_umask_still_gives_0600(tmp_path):
    """Attack: umask 000 (files 0666 by default, as SQLite would create them)."""
    old = os.umask(0)
    try:
        log = ConfidentialLog(tmp_path)
        log.log("r", {"true_score": 1.0}, step=0)
    finally:
        os.umask(old)
    assert _mode(log.path) == 0o600 and _mode(log.path.parent) == 0o700


def test_a_world_readable_log_is_refused(tmp_path):
    """Attack: someone pre-creates the log readable by everyone; nothing is written into it."""
    folder = tmp_path / "confidential"
    folder.mkdir()
    (folder / "log.sqlite").write_bytes(b"")
    os.chmod(folder / "log.sqlite", 0o644)
    with pytest.raises(ConfidentialStoreError, match="readable by others"):
        ConfidentialLog(tmp_path)
    assert (folder / "log.sqlite").read_bytes() == b""


def test_a_symlinked_confidential_folder_is_refused(tmp_path):
    """Attack: ``confidential`` points to a shared, public folder."""
    public = tmp_path / "public"
    public.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "confidential").symlink_to(public)
    with pytest.raises(ConfidentialStoreError, match="not a folder"):
        ConfidentialLog(run)
    assert list(public.iterdir()) == []


def test_the_repetitions_opening_is_private_too(tmp_path):
    commit_repetitions(tmp_path, 4, 7, SeededRandom(0), 0.0)
    opening = tmp_path / "confidential" / "repetitions-4.json"
    assert _mode(opening) == 0o600 and _mode(opening.parent) == 0o700
    with pytest.raises(ConfidentialStoreError):  # an opening is written once, never replaced
        commit_repetitions(tmp_path, 4, 9, SeededRandom(1), 0.0)


@pytest.mark.parametrize(("run_name", "values", "step"), [
    ("", {"a": 1.0}, 0), ("r", {}, 0), ("r", {"a": 1.0}, -1), ("r", {"a": 1.0}, True), ("r", {"": 1.0}, 0),
    ("r", {"a": float("nan")}, 0), ("r", {"a": float("inf")}, 0), ("r", {"a": "1"}, 0), ("r", {"a": None}, 0),
    ("r", "ab", 0), ("r", [("a", 1.0)], 0), (None, {"a": 1.0}, 0)])
def test_bad_confidential_entries_are_refused_and_nothing_is_written(tmp_path, run_name, values, step):
    log = ConfidentialLog(tmp_path)
    with pytest.raises(InvalidParameter):
        log.log(run_name, values, step)
    assert log.read() == []
