"""Tracking URI defaults and precedence (explicit argument > MLFLOW_TRACKING_URI > embedded SQLite store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit import Session
from dpaudit.errors import InvalidParameter
from dpaudit.tracking.store import (
    CREDENTIAL_ENV,
    check_credentials,
    default_tracking_uri,
    prepare_store,
    redact_credentials,
    resolve_tracking_uri,
    sqlite_database,
)


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


def _no_credentials(monkeypatch) -> None:
    for names in CREDENTIAL_ENV:
        for name in names:
            monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("env", [{"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p"},
                                 {"MLFLOW_TRACKING_TOKEN": "t"}, {"MLFLOW_TRACKING_AUTH": "plugin"}])
def test_a_server_is_used_with_a_complete_credential_set(monkeypatch, env):
    _no_credentials(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    check_credentials("https://mlflow.team.example")
    check_credentials("sqlite:///local/mlflow.db")  # not a server: nothing to authenticate


@pytest.mark.parametrize("env", [{}, {"MLFLOW_TRACKING_USERNAME": "u"}, {"MLFLOW_TRACKING_PASSWORD": "p"},
                                 {"MLFLOW_TRACKING_TOKEN": " "}])
def test_a_server_without_complete_credentials_is_refused(monkeypatch, env):
    _no_credentials(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InvalidParameter, match="needs credentials"):
        check_credentials("HTTP://127.0.0.1:5000")


def test_credentials_in_the_uri_are_refused_without_echoing_them(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "t")
    with pytest.raises(InvalidParameter, match="holds credentials") as refused:
        check_credentials("https://alice:s3cret@mlflow.team.example")
    assert "s3cret" not in str(refused.value)


def test_a_mirroring_session_refuses_a_server_without_credentials_before_its_ledger(monkeypatch, tmp_path):
    """Open fails before the run folder exists (the live server test checks that no request reached it)."""
    _no_credentials(monkeypatch)
    with pytest.raises(InvalidParameter, match="needs credentials"):
        Session(1.0, 1e-6, store=tmp_path / "runs", tracking_uri="http://127.0.0.1:9")
    assert not list((tmp_path / "runs").glob("*/ledger.jsonl"))
    Session(1.0, 1e-6, store=tmp_path / "runs", tracking_uri="http://127.0.0.1:9", mirror=False).close()


@pytest.mark.parametrize(("text", "shown"), [
    ("http://alice:S3cretPW@127.0.0.1:9/", "http://***@127.0.0.1:9/"),
    ("at postgresql://user:S3cretPW@db:5432/mlflow: refused", "at postgresql://***@db:5432/mlflow: refused"),
    ("'postgresql+psycopg2://u:S3cret/PW@db/m'", "'postgresql+psycopg2://***@db/m'"),  # an unescaped / in it
    ("https://u:S3cret@PW@h/x and http://v:S3cretPW@k", "https://***@h/x and http://***@k"),
    ("http://127.0.0.1:5000/api", "http://127.0.0.1:5000/api"),
    ("sqlite:////tmp/mlruns/mlflow.db", "sqlite:////tmp/mlruns/mlflow.db"),
    ("mail alice@example.org", "mail alice@example.org"),
])
def test_redact_credentials_hides_every_uris_user_information(text, shown):
    assert redact_credentials(text) == shown
    assert "S3cret" not in redact_credentials(text)


def test_a_mirror_error_never_shows_a_uri_password():
    from dpaudit.tracking.mirror import MirrorError

    assert str(MirrorError("cannot write to postgresql://user:S3cretPW@db/mlflow")) == (
        "cannot write to postgresql://***@db/mlflow")
