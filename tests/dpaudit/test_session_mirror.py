"""Session with the MLflow mirror on: a lazy connection, the run page, burn-down, trials, outages, `mirror sync`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from dpaudit import Session
from dpaudit.cli import main
from dpaudit.errors import InvalidParameter
from dpaudit.tracking import resolve_tracking_uri
from dpaudit.tracking.store import sqlite_database

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning")  # MLflow's own


@pytest.fixture
def client() -> MlflowClient:
    return MlflowClient(resolve_tracking_uri(None))


def _metric(client, run_id, key):
    return [m.value for m in client.get_metric_history(run_id, key)]


def _steps(client, run_id, key):
    return [m.step for m in client.get_metric_history(run_id, key)]


def _session_run(client, run_id):
    """The MLflow run tagged with the dpaudit run id (MLflow makes its own run ids)."""
    experiment = client.get_experiment_by_name("dpaudit")
    found = client.search_runs([experiment.experiment_id], f"tags.`dpaudit.run_id` = '{run_id}'")
    assert len(found) == 1, [r.info.run_id for r in found]
    return found[0]


def test_opening_a_mirrored_session_imports_no_mlflow_and_the_run_appears_by_tag(tmp_path):
    """Session open makes the run id itself (32 lowercase hex) and leaves MLflow to the mirror's worker thread.
    Before the change the id came from MLflow, so opening imported MLflow and created the store (seconds)."""
    code = ("import sys; from dpaudit import Session; "
            f"s = Session(1.0, 1e-6, store={str(tmp_path / 'runs')!r}); "
            "print(s.run_id, 'mlflow' in sys.modules, flush=True); "
            "s.laplace(1.0, 1.0, 0.1, label='x'); s.close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    run_id, imported = out.stdout.split()
    assert re.fullmatch(r"[0-9a-f]{32}", run_id) and imported == "False"
    reader = MlflowClient(resolve_tracking_uri(None))
    run = _session_run(reader, run_id)
    assert run.info.status == "FINISHED" and run.info.run_id != run_id
    assert _metric(reader, run.info.run_id, "release.x")


def test_the_run_page_states_the_certified_claim(make_session, client):
    """Issue 14: the certified (ε, δ), accountant, release status and verdict are run tags and the description,
    next to the filter's burn-down (which is not the claim); the experiment opens in the classic runs view."""
    s = make_session(epsilon=1.0, mirror=True, name="truth", protected=("patients",))
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="a")
    s.gaussian(2.0, sensitivity=1.0, epsilon=0.3, delta=1e-7, label="b")
    cert = s.close()
    run = _session_run(client, s.run_id)
    tags = run.data.tags
    assert float(tags["dpaudit.certified_epsilon"]) == pytest.approx(cert["claim"]["epsilon"], rel=1e-5)
    assert float(tags["dpaudit.certified_delta"]) == pytest.approx(cert["claim"]["delta"], rel=1e-2)
    assert tags["dpaudit.accountant"].startswith(cert["claim"]["accountant"])
    assert tags["dpaudit.verdict"].startswith("INVALID: NOT FOR RELEASE: seeded randomness")  # make_session seeds
    assert tags["dpaudit.for_release"] == "False"
    note = tags["mlflow.note.content"]
    assert f"ε = {float(tags['dpaudit.certified_epsilon']):.6g}" in note and "patients" in note
    assert f"dpaudit verify {s.run_id}" in note
    assert client.get_experiment_by_name("dpaudit").tags["mlflow.experimentKind"] == "custom_model_development"


def test_an_unseeded_run_is_signed_not_yet_verified_at_close(tmp_path, client):
    s = Session(1.0, 1e-6, name="secure", store=tmp_path / "runs")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.close()
    tags = _session_run(client, s.run_id).data.tags
    assert tags["dpaudit.verdict"] == "signed, not yet verified" and tags["dpaudit.for_release"] == "True"


def test_burn_down_trials_with_hyperparameters_and_artifacts(make_session, client):
    """Issue 14: a trial's charge is a step of the session's burn-down too (before: the session run had no point
    between its own charges), and the trial's nested run carries its hyperparameters as params."""
    s = make_session(epsilon=1.0, mirror=True, name="mirrored")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="a")
    with s.trial("trial-0", params={"lr": 0.05, "C": 1.0, "optimizer": "sgd"}):
        trial_charge = s.charge(s.laplace_event(1.0, 0.2, label="b"), plugin="session", mechanism="laplace")
        s.record_release(trial_charge, 2.0)
    s.laplace(3.0, sensitivity=1.0, epsilon=0.1, label="c")
    s.close()
    session_run = _session_run(client, s.run_id)
    trial_run = client.get_run(s._tracking.mlflow_run_id(f"{s.run_id}/trial-0"))
    spent = _metric(client, session_run.info.run_id, "dpaudit.epsilon_spent")
    assert trial_charge.seq in _steps(client, session_run.info.run_id, "dpaudit.epsilon_spent")
    assert spent == sorted(spent) and spent[-1] == pytest.approx(0.4, abs=1e-9)
    assert _metric(client, trial_run.info.run_id, "dpaudit.epsilon_spent") == [pytest.approx(0.3, abs=1e-9)]
    assert _metric(client, trial_run.info.run_id, "release.b") and not _metric(client, session_run.info.run_id,
                                                                               "release.b")
    assert trial_run.data.params == {"lr": "0.05", "C": "1.0", "optimizer": "sgd"}
    assert trial_run.data.tags["mlflow.parentRunId"] == session_run.info.run_id
    assert trial_run.info.status == "FINISHED" and session_run.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(session_run.info.run_id)}
    assert {"ledger.jsonl", "certificate.json", "report.md", "public_key.pem"} <= artifacts


@pytest.mark.parametrize("params", [{"true_score": 0.9}, {"lr": float("nan")}, {"lr": {"nested": 1}},
                                    {"bad key!": 1}, ["lr", 0.1]])
@pytest.mark.parametrize("mirror", [False, True])
def test_bad_trial_params_are_refused_before_anything_is_mirrored(make_session, params, mirror):
    s = make_session(mirror=mirror)
    with pytest.raises(InvalidParameter), s.trial("t", params=params):
        pass
    assert s._tracking.mirrored_to == {0: s.run_id} if mirror else not s._tracking.mirrored_to
    s.close()


def test_an_adaptive_session_logs_the_filter_odometer_not_an_epsilon_spent(make_session, client):
    """In an adaptive session the running value is the Rényi filter's odometer, never a certified ε: named so."""
    s = make_session(epsilon=1.0, mirror=True, name="adaptive", adaptive=True)
    s.gaussian(1.0, sensitivity=1.0, epsilon=0.2, delta=1e-8)
    s.close()
    run = _session_run(client, s.run_id)
    assert "dpaudit.epsilon_spent" not in run.data.metrics
    assert _metric(client, run.info.run_id, "dpaudit.filter_odometer_epsilon")[-1] > 0
    assert "dpaudit.filter_odometer_epsilon" in run.data.tags["mlflow.note.content"]


def test_outage_is_resynced_per_run_on_close(make_session, client, monkeypatch):
    """An MLflow failure mid-run loses nothing: at close each run (session, trial) is caught up with its records."""
    s = make_session(epsilon=1.0, mirror=True, name="outage")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="before")
    assert s._tracking.wait()
    s._tracking.retry_delays = ()  # the failure below is final at once (no back-off)
    real = s._tracking.mirror.record
    monkeypatch.setattr(s._tracking.mirror, "record",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("MLflow down")))
    with s.trial("trial-0"):
        s.laplace(2.0, sensitivity=1.0, epsilon=0.2, label="during")
    assert s._tracking.wait() and isinstance(s._tracking.error, RuntimeError)
    monkeypatch.setattr(s._tracking.mirror, "record", real)
    s.close()
    session_run = _session_run(client, s.run_id).info.run_id
    trial_run = s._tracking.mlflow_run_id(f"{s.run_id}/trial-0")
    assert _metric(client, trial_run, "release.during")
    assert not _metric(client, session_run, "release.during")
    assert _metric(client, session_run, "release.before")
    assert _metric(client, session_run, "dpaudit.epsilon_spent")[-1] == pytest.approx(0.3, abs=1e-9)


def test_a_slow_mirror_does_not_hold_the_budget_lock(make_session, client, monkeypatch):
    """Records are sent to MLflow by the mirror's worker, never by a thread that charges, in ledger order.

    The worker's send of one release is stuck until the main thread has charged and released again. Were sends
    made under the budget lock, or by the charging thread, the second release would wait for the first send and
    the stuck call would give up after its deadlock guard (the first assertion would fail)."""
    s = make_session(epsilon=1.0, mirror=True, name="slow")
    assert s._tracking.wait()
    real = s._tracking.mirror.record
    entered, other_done = threading.Event(), threading.Event()
    sent: list[int] = []
    waited: list[bool] = []

    def slow_record(run, record, spent, **kwargs):
        if record["type"] == "release" and record["body"]["label"] == "slow":
            entered.set()
            waited.append(other_done.wait(timeout=20))  # a guard against a deadlock, not a timing assertion
        sent.append(record["seq"])
        real(run, record, spent, **kwargs)

    monkeypatch.setattr(s._tracking.mirror, "record", slow_record)
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="slow")
    assert entered.wait(timeout=20)
    s.laplace(2.0, sensitivity=1.0, epsilon=0.2, label="fast")  # charged and released while the send is stuck
    other_done.set()
    s.close()
    assert waited == [True]
    assert sent == list(range(1, len(s._tracking.mirrored_to)))  # every record after open, in ledger order
    run = _session_run(client, s.run_id).info.run_id
    assert _metric(client, run, "release.slow") and _metric(client, run, "release.fast")


def test_an_unreachable_store_never_reaches_the_audited_path(tmp_path, capsys):
    """The store cannot be made: open, charges and close succeed, close names the command that completes the
    mirror. Before the change the session could not even open."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    s = Session(1.0, 1e-6, store=tmp_path / "runs", tracking_uri=f"sqlite:///{blocker}/mlruns/mlflow.db")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    cert = s.close()
    assert cert["claim"]["epsilon"] > 0
    assert f"dpaudit mirror sync {s.run_id}" in capsys.readouterr().err


def test_mirror_sync_rebuilds_a_run_in_an_empty_store_idempotently(tmp_path, client):
    """Issue 17: the embedded store is deleted after a run; `dpaudit mirror sync RUN` finds no run tagged with the
    id, creates it from the ledger with its params, tags, metrics, artifacts and the verdict of `dpaudit verify`;
    a second sync creates no run and adds nothing. Before the change sync looked the run up by MLflow id and
    failed with "not found"."""
    s = Session(1.0, 1e-6, name="rebuilt", protected=("patients",))  # the local store, whose key verify trusts
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="count")
    s.gaussian(2.0, sensitivity=1.0, epsilon=0.3, delta=1e-7, label="sum")
    s.close()
    before = _session_run(client, s.run_id)
    database = sqlite_database(resolve_tracking_uri(None))
    shutil.rmtree(database.parent / "artifacts")  # the whole store: database, its lock and sidecars, artifacts
    for path in database.parent.glob(f"{database.name}*"):
        path.unlink()

    result = CliRunner().invoke(main, ["mirror", "sync", s.run_id])
    assert result.exit_code == 0, result.output
    reader = MlflowClient(resolve_tracking_uri(None))
    run = _session_run(reader, s.run_id)
    assert run.info.run_id != before.info.run_id and run.info.status == "FINISHED"
    assert run.data.params == before.data.params
    assert run.data.metrics == before.data.metrics
    for key in ("dpaudit.certified_epsilon", "dpaudit.certified_delta", "dpaudit.accountant",
                "dpaudit.key_fingerprint", "dpaudit.protected", "dpaudit.mirrored_seq"):
        assert run.data.tags[key] == before.data.tags[key], key
    assert run.data.tags["dpaudit.verdict"] == "VALID"
    assert "Verdict: VALID" in run.data.tags["mlflow.note.content"]
    assert {"ledger.jsonl", "certificate.json"} <= {a.path for a in reader.list_artifacts(run.info.run_id)}
    history = {k: len(reader.get_metric_history(run.info.run_id, k)) for k in run.data.metrics}

    again = CliRunner().invoke(main, ["mirror", "sync", s.run_id])
    assert again.exit_code == 0 and "mirrored 0 new records" in again.output
    assert _session_run(reader, s.run_id).info.run_id == run.info.run_id  # one run, not two
    assert {k: len(reader.get_metric_history(run.info.run_id, k)) for k in run.data.metrics} == history
    assert _session_run(reader, s.run_id).data.tags == run.data.tags


def test_confidential_log_is_separate_and_named(make_session, client):
    s = make_session(mirror=True, confidential=True, name="conf")
    s.log_confidential({"true_validation_score": 0.93})
    cert = s.close()
    assert cert["confidential_log"]["location"] == "confidential/log.sqlite"
    main_run = _session_run(client, s.run_id)
    assert "true_validation_score" not in main_run.data.metrics
    assert not any(e.name.endswith("CONFIDENTIAL") for e in client.search_experiments())


def test_verify_by_run_id_downloads_the_bundle_from_mlflow(make_session, tmp_path, client):
    """`dpaudit verify RUN_ID` with no local run folder finds the MLflow run by its dpaudit run id (or by its MLflow
    run id) and verifies the downloaded artifacts."""
    from dpaudit.runs import resolve_run
    from dpaudit.verify import verify_bundle

    s = make_session(mirror=True, name="remote")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.close()
    for run in (s.run_id, _session_run(client, s.run_id).info.run_id):
        folder = resolve_run(run, store=tmp_path / "elsewhere")
        assert folder != s.run_dir
        assert verify_bundle(folder, allow_not_for_release=True).valid


def test_run_is_tagged_with_the_signing_key_fingerprint(make_session, client):
    """Tagged when the run is created (from the open record), before any certificate exists."""
    s = make_session(mirror=True, name="tagged")
    assert s._tracking.wait()
    assert client.get_run(s._tracking.mlflow_run_id()).data.tags["dpaudit.key_fingerprint"] == s.key_fingerprint
    assert s.close()["public_key_fingerprint"] == s.key_fingerprint


def test_the_param_length_limit_is_mlflows():
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    from dpaudit.tracking.run_page import MAX_PARAM_LENGTH

    assert MAX_PARAM_LENGTH == MAX_PARAM_VAL_LENGTH


def test_a_public_artifact_is_attached_and_its_digest_ledgered(make_session, client, tmp_path):
    """A plugin's public file (e.g. dpareto's front plot) reaches the session's MLflow run under plugins/<plugin>/
    byte for byte; the ledger holds its name, size and SHA-256, never the bytes; a path-like name is refused."""
    import hashlib

    from dpaudit.ledger import read_records

    data = b"\x89PNG not really, but bytes"
    s = make_session(mirror=True, name="artifact")
    view = s.for_plugin("plotter", "1.0")
    view.log_public_artifact("front.png", data)
    for bad in ("../front.png", "a/b.png", "", ".hidden"):
        with pytest.raises(InvalidParameter, match="plain file name"):
            view.log_public_artifact(bad, data)
    with pytest.raises(InvalidParameter, match="bytes"):
        view.log_public_artifact("x.txt", "text")
    s.close()
    run_id = _session_run(client, s.run_id).info.run_id
    assert [a.path for a in client.list_artifacts(run_id, "plugins/plotter")] == ["plugins/plotter/front.png"]
    path = client.download_artifacts(run_id, "plugins/plotter/front.png", str(tmp_path))
    with open(path, "rb") as attached:
        assert attached.read() == data
    records, _ = read_records(s.ledger_path)
    infos = [r.body["info"]["public_artifact"] for r in records if "public_artifact" in r.body.get("info", {})]
    assert infos == [{"name": "front.png", "bytes": len(data), "artifact_path": "plugins/plotter",
                      "sha256": hashlib.sha256(data).hexdigest()}]


def test_a_resumed_session_catches_its_mirror_up_then_mirrors_live(make_session, client, monkeypatch):
    """A process dies while MLflow is down: its last release never reached the mirror. ``Session.resume(...,
    mirror=True)`` first catches the same MLflow run (found by its tag, not a second run) up with every record
    before the restart, then mirrors the resumed session's own records; close ends the run with its claim. Before
    the change a resumed session mirrored nothing (``dpaudit mirror sync`` was the only way)."""
    from dpaudit.mechanisms.randomness import SeededRandom

    s = make_session(epsilon=1.0, mirror=True, name="dies")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="before")
    assert s._tracking.wait()
    s._tracking.retry_delays = ()
    monkeypatch.setattr(s._tracking.mirror, "record", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("down")))
    s.laplace(2.0, sensitivity=1.0, epsilon=0.2, label="lost")
    assert s._tracking.wait() and s._tracking.error is not None  # the process dies here, its run never closed
    run = _session_run(client, s.run_id).info.run_id
    assert not _metric(client, run, "release.lost")

    resumed = Session.resume(s.run_id, rng=SeededRandom(1), mirror=True)
    resumed.laplace(3.0, sensitivity=1.0, epsilon=0.3, label="after")
    assert resumed._tracking.wait() and resumed._tracking.error is None  # "after" went by the live path
    assert _metric(client, run, "release.lost")  # the catch-up writes at once (live records are batched)
    resumed.close()
    assert _metric(client, run, "release.after")
    again = _session_run(client, s.run_id)  # still exactly one run with the tag
    assert again.info.run_id == run and again.info.status == "FINISHED"
    assert _metric(client, run, "dpaudit.epsilon_spent")[-1] == pytest.approx(0.6, abs=1e-9)
    assert float(again.data.tags["dpaudit.certified_epsilon"]) == pytest.approx(0.6, abs=1e-3)


def test_a_resumed_session_mirrors_nothing_unless_asked(make_session, client):
    from dpaudit.mechanisms.randomness import SeededRandom

    s = make_session(epsilon=1.0, name="quiet")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="before")
    resumed = Session.resume(s.run_id, rng=SeededRandom(1))
    resumed.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="after")
    resumed.close()
    experiment = client.get_experiment_by_name("dpaudit")
    assert experiment is None or not client.search_runs([experiment.experiment_id],
                                                        f"tags.`dpaudit.run_id` = '{s.run_id}'")
