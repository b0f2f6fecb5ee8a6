"""Honest lifecycle: a run that did not finish (interrupted, refused, failed) is closed with every charge counted,
its certificate says NOT FOR RELEASE and ``dpaudit verify`` fails it with the reason; read-only commands create
nothing.

Before this change an interrupted or refused run closed ``FAILED`` with a certificate "for release" that verified
VALID, and ``dpaudit report X`` in an empty folder created ``./mlruns/mlflow.db``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit import lifecycle
from dpaudit.certificate import build_certificate, release_problems
from dpaudit.cli import main
from dpaudit.errors import BudgetExceeded, InvalidParameter, PluginError
from dpaudit.ledger import read_records
from dpaudit.lifecycle import Terminated, ended_line, exit_status, interrupt_exit_code
from dpaudit.records import ABORTED, FAILED, FINISHED, REFUSED
from dpaudit.registry import Plugin
from dpaudit.session import Session
from dpaudit.signing import load_key
from dpaudit.store import CERTIFICATE, default_key_path
from dpaudit.verify import verify_bundle


def test_exit_status_of_each_way_out():
    assert exit_status(None) == FINISHED
    for interrupted in (KeyboardInterrupt, Terminated, SystemExit):
        assert exit_status(interrupted) == ABORTED
    for refusal in (BudgetExceeded, InvalidParameter, PluginError):
        assert exit_status(refusal) == REFUSED
    for failure in (RuntimeError, ValueError, OSError):
        assert exit_status(failure) == FAILED
    assert interrupt_exit_code(KeyboardInterrupt()) == 130
    assert interrupt_exit_code(Terminated(signal.SIGTERM)) == 143


def test_the_ended_line_names_the_run_and_what_to_run():
    assert ended_line("abc", ABORTED, True).startswith("run aborted: abc; verify with dpaudit verify abc")
    assert "dpaudit recover abc --abort" in ended_line("abc", "", False)
    assert "dpaudit recover abc`" in ended_line("abc", REFUSED, False)


def _secure_session(**kwargs) -> Session:
    """A session with the OS CSPRNG: for release if (and only if) it finishes."""
    return Session(epsilon=1.0, delta=1e-6, mirror=False, **kwargs)


@pytest.mark.parametrize(("raised", "status", "word"), [
    (KeyboardInterrupt, ABORTED, "run aborted"),
    (lambda: BudgetExceeded("over budget"), REFUSED, "run refused"),
    (lambda: RuntimeError("plugin crashed"), FAILED, "run failed"),
])
def test_a_run_that_did_not_finish_is_not_for_release_and_fails_verify(raised, status, word):
    """Attack: leave the session with an exception after two releases. Before the fix the run closed FAILED, its
    certificate said "for release" and verify said VALID (exit 0)."""
    s = _secure_session()
    with pytest.raises(BaseException) as caught, s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.2, label="count")
        s.charge(s.laplace_event(1.0, 0.3, label="never released"), plugin="session", mechanism="laplace")
        raise raised()
    assert not isinstance(caught.value, AssertionError)
    records, _ = read_records(s.ledger_path)
    assert records[-1].body == {"status": status, "charges": 2}
    certificate = json.loads(s.certificate_path.read_text())
    assert certificate["for_release"] is False and word in certificate["release_status"]
    assert 0.45 < certificate["claim"]["epsilon"] <= 0.5 + 1e-9  # both charges counted (the released one: 0.2)
    report = verify_bundle(s.run_dir)
    assert not report.valid and any(r.startswith(f"run-status: {word} (closed {status}") for r in report.reasons)
    allowed = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert allowed.valid and allowed.not_for_release and word in allowed.not_for_release[0]


def test_a_finished_secure_run_is_for_release():
    with _secure_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.2)
    certificate = json.loads(s.certificate_path.read_text())
    assert certificate["for_release"] is True and certificate["release_status"] == "for release"
    report = verify_bundle(s.run_dir)
    assert report.valid and report.not_for_release == []


def test_verify_reads_the_status_from_the_ledger_not_the_certificate(monkeypatch):
    """Attack: a certificate signed by code that called an aborted run "for release" (as before the fix). The
    verdict comes from the signed ledger's close record, so it still fails."""
    monkeypatch.setattr("dpaudit.certificate.release_problems", lambda records: [])  # the broken signer
    with pytest.raises(KeyboardInterrupt), _secure_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.2)
        raise KeyboardInterrupt
    assert json.loads(s.certificate_path.read_text())["for_release"] is True
    report = verify_bundle(s.run_dir)
    assert not report.valid and any(r.startswith("run-status: run aborted") for r in report.reasons)
    # accepting not-for-release runs does not accept a certificate whose signed status contradicts the ledger
    allowed = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert not allowed.valid and any(r.startswith("release-status: the certificate states for_release=True but")
                                     for r in allowed.reasons)


def test_release_problems_names_each_reason(make_session):
    s = make_session()
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.close(status=ABORTED)
    records, _ = read_records(s.ledger_path)
    problems = release_problems(records)
    assert problems[0].startswith("seeded randomness") and problems[1].startswith("run aborted")
    key = load_key(default_key_path(s.run_dir.parent))
    certificate = build_certificate(records, key=key, plugins={}, confidential_log=None)
    assert certificate["release_status"] == "NOT FOR RELEASE: " + "; ".join(problems)


# --- the CLI: interrupted, refused, read-only ------------------------------------------------------------------

_SLOW_CHILD = textwrap.dedent("""
    import sys, time
    from dpaudit import registry
    from dpaudit.cli import main
    from dpaudit.registry import Plugin

    def run(session, config):
        view = session.for_plugin("slow", "1")
        view.laplace(1.0, 1.0, epsilon=0.1, label="count")
        print("charged", session.run_id, file=sys.stderr, flush=True)
        time.sleep(120)
        return {}

    registry.get_plugin = lambda name: Plugin(name="slow", version="1", summary="sleeps", citation="none",
                                              event_kinds=("laplace",), run=run, smoke_config={})
    main(["run", "slow", "--epsilon", "1", "--delta", "1e-6"])
""")


@pytest.mark.slow
@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_dpaudit_run_interrupted_by_a_signal_closes_aborted_and_says_which_run(sent):
    """SIGINT / SIGTERM to `dpaudit run` mid-run (after a release): exit 130 / 143, the run id printed with the
    command to verify it, the run closed ABORTED, and `dpaudit verify` of it exits 1 with "run aborted". Before the
    fix Ctrl-C printed "Aborted!" and the run verified VALID; SIGTERM left an unclosed run."""
    child = subprocess.Popen([sys.executable, "-c", _SLOW_CHILD], stderr=subprocess.PIPE, text=True)
    try:
        line = child.stderr.readline()
        while line and not line.startswith("charged"):
            line = child.stderr.readline()
        assert line.startswith("charged"), "the child died before its release"
        run_id = line.split()[1]
        child.send_signal(sent)
        rest = child.stderr.read()
        code = child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert code == 128 + sent, rest
    assert f"run aborted: {run_id}; verify with dpaudit verify {run_id}" in rest
    assert "Traceback" not in rest
    records, _ = read_records(Path(os.environ["DPAUDIT_HOME"]) / run_id / "ledger.jsonl")
    assert records[-1].body == {"status": ABORTED, "charges": 1}
    result = CliRunner().invoke(main, ["verify", run_id])
    assert result.exit_code == 1 and "run-status: run aborted" in result.output
    allowed = CliRunner().invoke(main, ["verify", run_id, "--allow-not-for-release"])
    assert allowed.exit_code == 0 and "NOT FOR RELEASE (run aborted" in allowed.output


def test_sigterm_becomes_an_interrupt_only_inside_and_is_restored(make_session):
    """Only the CLI's entry points turn SIGTERM into an interrupt; the library (a Session) leaves it alone."""
    before = signal.getsignal(signal.SIGTERM)
    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
        assert signal.getsignal(signal.SIGTERM) is before
    with pytest.raises(Terminated), lifecycle.sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        pytest.fail("SIGTERM did not interrupt")  # the handler runs before this line
    assert signal.getsignal(signal.SIGTERM) is before


def _fake_plugin(monkeypatch, run) -> None:
    plugin = Plugin(name="fake", version="1", summary="test plugin", citation="none", event_kinds=("laplace",),
                    run=run, smoke_config={})
    monkeypatch.setattr("dpaudit.registry.get_plugin", lambda name: plugin)


def _runs(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if (p / "ledger.jsonl").is_file()) if store.is_dir() else []


def test_unknown_plugin_and_unreadable_config_open_no_run(tmp_path):
    store = Path(os.environ["DPAUDIT_HOME"])
    unknown = CliRunner().invoke(main, ["run", "no-such-plugin", "--epsilon", "1", "--delta", "1e-6"])
    assert unknown.exit_code == 2 and "unknown plugin" in unknown.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"epochs": ')
    malformed = CliRunner().invoke(main, ["run", "naive", "--config", str(bad), "--epsilon", "1", "--delta", "1e-6"])
    assert malformed.exit_code == 2
    budget = CliRunner().invoke(main, ["run", "naive", "--epsilon", "-1", "--delta", "1e-6"])
    assert budget.exit_code == 2
    assert _runs(store) == []  # no run folder at all


@pytest.mark.parametrize("refusal", ["config", "budget"])
def test_a_refused_config_or_plan_never_verifies_as_releasable(monkeypatch, refusal):
    """Attack: a config the plugin refuses, or a plan the budget cannot pay for, through `dpaudit run`. Before the
    fix each left a signed "(0, 0)-DP, for release" run that verified VALID."""

    def run(session, config):
        view = session.for_plugin("fake", "1")
        if refusal == "config":
            raise InvalidParameter("unknown config key 'epochz'")
        view.check_affordable([view.laplace_event(1.0, 50.0)])  # refused: budget 1
        return {}

    _fake_plugin(monkeypatch, run)
    result = CliRunner().invoke(main, ["run", "fake", "--epsilon", "1", "--delta", "1e-6"])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output
    runs = _runs(Path(os.environ["DPAUDIT_HOME"]))
    assert len(runs) == 1 and f"run refused: {runs[0].name}" in result.output
    certificate = json.loads((runs[0] / CERTIFICATE).read_text())
    assert certificate["for_release"] is False and "run refused" in certificate["release_status"]
    verdict = CliRunner().invoke(main, ["verify", runs[0].name])
    assert verdict.exit_code == 1 and "run-status: run refused" in verdict.output


def test_a_finished_cli_run_verifies_valid(monkeypatch):
    def run(session, config):
        session.for_plugin("fake", "1").laplace(1.0, 1.0, epsilon=0.1)
        return {"done": True}

    _fake_plugin(monkeypatch, run)
    result = CliRunner().invoke(main, ["run", "fake", "--epsilon", "1", "--delta", "1e-6", "--json"])
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run_id"]
    assert CliRunner().invoke(main, ["verify", run_id]).exit_code == 0


@pytest.mark.parametrize("command", [
    ["report", "X"], ["report", "0" * 32, "--format", "json"], ["verify", "X"], ["verify", "--store", "dpaudit_runs"],
    ["export", "X", "out"], ["log", "head"], ["keys", "list"], ["keys", "export"],
])
def test_read_only_commands_create_no_store(tmp_path, monkeypatch, command):
    """`dpaudit report X` in an empty folder used to create ./mlruns/mlflow.db before failing."""
    cwd = tmp_path / "empty"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("DPAUDIT_HOME")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    result = CliRunner().invoke(main, command)
    assert "Traceback" not in result.output
    assert sorted(p.name for p in cwd.iterdir()) == []


def stalling_model(n_features: int, n_outputs: int) -> object:
    """A study's model factory (``tests.dpaudit.test_lifecycle:stalling_model``) whose first training step says
    "training" on stderr and then stalls, so that the test can SIGKILL the process mid-training."""
    import time

    from torch import nn

    class Stalls(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(n_features, n_outputs)

        def forward(self, x):
            if self.training:
                print("training", file=sys.stderr, flush=True)
                time.sleep(300)
            return self.linear(x).reshape(-1)

    return Stalls()


@pytest.mark.slow
def test_a_study_run_killed_mid_training_is_recovered_aborted_and_fails_verify(tmp_path):
    """SIGKILL (no handler runs) to `dpaudit run --config study.toml` during training, after its plan was charged:
    the run is left unclosed; `dpaudit recover RUN --abort` closes it ABORTED with every charge counted, and
    `dpaudit verify` exits 1 with "run aborted" (0 with --allow-not-for-release, saying NOT FOR RELEASE)."""
    from tests.dpaudit.test_study import STUDY

    study = tmp_path / "study.toml"
    study.write_text(STUDY.replace('kind = "mlp"\nhidden = [8]', 'kind = "tests.dpaudit.test_lifecycle:stalling_model"')
                     .replace("samples = 2", "samples = 1"))
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", "import sys; from dpaudit.cli import main; main(sys.argv[1:])",
                              "run", "--config", str(study), "--seed", "0"],
                             cwd=root, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                             env={**os.environ, "PYTHONPATH": str(root)})
    try:
        line = child.stderr.readline()
        while line and not line.startswith("training"):
            line = child.stderr.readline()
        assert line.startswith("training"), "the child ended before training"
        child.kill()
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    (ledger,) = Path(os.environ["DPAUDIT_HOME"]).glob("*/ledger.jsonl")
    run_id = ledger.parent.name
    records, _ = read_records(ledger)
    charges = sum(r.type == "charge" for r in records)
    assert charges >= 1 and records[-1].type != "close"
    unclosed = CliRunner().invoke(main, ["verify", run_id])
    assert unclosed.exit_code == 1 and "never closed" in unclosed.output
    recovered = CliRunner().invoke(main, ["recover", run_id, "--abort"])
    assert recovered.exit_code == 0, recovered.output
    records, _ = read_records(ledger)
    assert records[-1].body == {"status": ABORTED, "charges": charges}
    result = CliRunner().invoke(main, ["verify", run_id])
    assert result.exit_code == 1 and "run-status: run aborted" in result.output
    allowed = CliRunner().invoke(main, ["verify", run_id, "--allow-not-for-release"])
    assert allowed.exit_code == 0 and "NOT FOR RELEASE" in allowed.output and "run aborted" in allowed.output


def test_ctrl_c_inside_a_users_tune_trainer_closes_the_run_aborted(make_session):
    """KeyboardInterrupt raised by the user's own ``train`` callable, after ``tune`` charged its plan: the
    interrupt reaches the caller, the session closes ABORTED with the charge counted, and verify fails the run."""
    import dpaudit
    from tests.dpaudit.test_tuner import SPACE, X, Y, accuracy

    def interrupted(trial):
        raise KeyboardInterrupt

    session = make_session(epsilon=20.0, delta=1e-5)
    with pytest.raises(KeyboardInterrupt), session:
        dpaudit.tune(session, "randtune", space=SPACE, train=interrupted, score=accuracy, score_range=(0.0, 1.0),
                     dataset=(X, Y), gamma=0.5)
    assert session.close_status == ABORTED
    records, _ = read_records(session.ledger_path)
    assert records[-1].body == {"status": ABORTED, "charges": 1}
    report = verify_bundle(session.run_dir)
    assert not report.valid and any("run aborted" in r for r in report.reasons)
