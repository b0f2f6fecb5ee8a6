"""Tracking URI defaults and precedence (explicit argument > MLFLOW_TRACKING_URI > embedded SQLite store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.tracking.store import default_tracking_uri, prepare_store, resolve_tracking_uri, sqlite_database


def test_default_store_is_sqlite_under_mlruns_of_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_tracking_uri() == f"sqlite:///{Path('mlruns').resolve()}/mlflow.db"
    assert default_tracking_uri(tmp_path / "elsewhere") == f"sqlite:///{(tmp_path / 'elsewhere').resolve()}/mlflow.db"


def test_precedence_explicit_then_environment_then_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(None) == default_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert resolve_tracking_uri(None) == "http://tracking.example:5000"
    assert resolve_tracking_uri("sqlite:////tmp/explicit.db") == "sqlite:////tmp/explicit.db"


@pytest.mark.parametrize("bad", ["", "   ", 3])
def test_an_empty_explicit_uri_is_refused(bad):
    with pytest.raises(InvalidParameter, match="tracking URI"):
        resolve_tracking_uri(bad)


def test_local_store_keeps_artifacts_next_to_the_database(tmp_path):
    uri = default_tracking_uri(tmp_path / "mlruns")
    assert sqlite_database(uri) == (tmp_path / "mlruns" / "mlflow.db").resolve()
    assert prepare_store(uri) == (tmp_path / "mlruns" / "artifacts").resolve().as_uri()
    assert (tmp_path / "mlruns" / "artifacts").is_dir()
    assert prepare_store("http://tracking.example:5000") is None
    assert sqlite_database("sqlite:///:memory:") is None
