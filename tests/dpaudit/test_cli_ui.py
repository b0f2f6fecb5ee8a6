"""``dpaudit ui``: loopback unless asked, always an explicit ``--host`` for MLflow, a warning when widened."""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from dpaudit import cli
from dpaudit.cli import main


@pytest.fixture
def launched(monkeypatch) -> list[list[str]]:
    """The MLflow command lines ``dpaudit ui`` would run (nothing is started; the port probe is stubbed: whether the
    host and port can be listened on is tested in test_cli.py)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(cli, "_check_listenable", lambda host, port: None)
    monkeypatch.setattr(subprocess, "call", lambda cmd, env=None: calls.append(list(cmd)) or 0)
    return calls


def _host(cmd: list[str]) -> str:
    return cmd[cmd.index("--host") + 1]


def test_ui_binds_to_loopback_by_default_even_if_mlflow_host_is_set(launched, monkeypatch):
    """Attack: ``$MLFLOW_HOST=0.0.0.0`` would make a bare ``mlflow ui`` listen on every interface."""
    monkeypatch.setenv("MLFLOW_HOST", "0.0.0.0")
    result = CliRunner().invoke(main, ["ui"])
    assert result.exit_code == 0, result.output
    (cmd,) = launched
    assert _host(cmd) == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5000"
    assert "warning" not in result.output


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "myhost.example"])
def test_a_wider_bind_is_explicit_and_warned(launched, host):
    result = CliRunner().invoke(main, ["ui", "--host", host, "--port", "5055"])
    assert result.exit_code == 0, result.output
    (cmd,) = launched
    assert _host(cmd) == host
    assert "warning: --host" in result.output and "Confidential values are not in it" in result.output


@pytest.mark.parametrize("host", ["localhost", "127.0.0.2", "::1"])
def test_other_loopback_names_are_not_warned(launched, host):
    result = CliRunner().invoke(main, ["ui", "--host", host])
    assert result.exit_code == 0 and "warning" not in result.output and _host(launched[0]) == host


@pytest.mark.parametrize("args", [["--host", ""], ["--host", "a b"], ["--port", "0"], ["--port", "70000"]])
def test_bad_host_or_port_is_a_usage_error(launched, args):
    result = CliRunner().invoke(main, ["ui", *args])
    assert result.exit_code == 2 and not launched and "Traceback" not in result.output


def test_ui_creates_a_missing_embedded_store_under_its_lock_before_mlflow_starts(launched, tmp_path):
    """`mlflow ui` on a fresh folder would create and migrate the database in place, unlocked (issue 17.2)."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    result = CliRunner().invoke(main, ["--tracking-uri", uri, "ui"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mlruns" / "mlflow.db").is_file()  # made by prepare_store before the launch
    (cmd,) = launched
    assert cmd[cmd.index("--default-artifact-root") + 1].endswith("artifacts")
