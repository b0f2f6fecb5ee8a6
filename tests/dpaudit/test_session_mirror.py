"""Session with the MLflow mirror on: burn-down metric, nested trials, artifacts, recovery after an outage."""

from __future__ import annotations

import threading

import pytest
from mlflow.tracking import MlflowClient

from dpaudit.tracking import resolve_tracking_uri


@pytest.fixture
def client() -> MlflowClient:
    return MlflowClient(resolve_tracking_uri(None))


def _metric(client, run_id, key):
    return [m.value for m in client.get_metric_history(run_id, key)]


def test_burn_down_trials_and_artifacts(make_session, client):
    s = make_session(epsilon=1.0, mirror=True, name="mirrored")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="a")
    with s.trial("trial-0"):
        s.laplace(2.0, sensitivity=1.0, epsilon=0.2, label="b")
    trial_run = s._tracking.mirrored_to[max(s._tracking.mirrored_to)]
    s.close()
    spent = _metric(client, s.run_id, "dpaudit.epsilon_spent")
    assert spent == sorted(spent) and 0.1 in [pytest.approx(v, abs=1e-9) for v in spent]
    assert spent[-1] == pytest.approx(0.3, abs=1e-9)  # the close point: the session's total, trial included
    assert _metric(client, trial_run, "dpaudit.epsilon_spent")[-1] == pytest.approx(0.3, abs=1e-9)
    assert client.get_run(trial_run).data.tags["mlflow.parentRunId"] == s.run_id
    artifacts = {a.path for a in client.list_artifacts(s.run_id)}
    assert {"ledger.jsonl", "certificate.json", "report.md", "public_key.pem"} <= artifacts
    assert client.get_run(s.run_id).info.status == "FINISHED"


def test_outage_is_resynced_per_run_on_close(make_session, client, monkeypatch):
    """An MLflow failure mid-run loses nothing: at close each run (session, trial) is caught up with its records."""
    s = make_session(epsilon=1.0, mirror=True, name="outage")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="before")
    real = s._tracking.mirror.record
    monkeypatch.setattr(s._tracking.mirror, "record",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("MLflow down")))
    with s.trial("trial-0"):
        s.laplace(2.0, sensitivity=1.0, epsilon=0.2, label="during")
    trial_run = s._tracking.mirrored_to[max(s._tracking.mirrored_to)]
    monkeypatch.setattr(s._tracking.mirror, "record", real)
    s.close()
    assert _metric(client, trial_run, "release.during")
    assert not _metric(client, s.run_id, "release.during")
    assert _metric(client, s.run_id, "release.before")


def test_a_slow_mirror_does_not_hold_the_budget_lock(make_session, client, monkeypatch):
    """Records are sent to MLflow after the session's lock is released, in ledger order.

    One thread's mirror call is stuck (a slow ``log_batch``) until the main thread has charged and released. Were
    the send made under the budget lock (as before), the main thread's charge would wait for the lock, the stuck
    call would give up after its deadlock guard, and the first assertion would fail.
    """
    s = make_session(epsilon=1.0, mirror=True, name="slow")
    real = s._tracking.mirror.record
    entered, other_done = threading.Event(), threading.Event()
    sent: list[int] = []
    waited: list[bool] = []

    def slow_record(run, record, spent):
        if record["type"] == "release" and record["body"]["label"] == "slow":
            entered.set()
            waited.append(other_done.wait(timeout=20))  # a guard against a deadlock, not a timing assertion
        sent.append(record["seq"])
        real(run, record, spent)

    monkeypatch.setattr(s._tracking.mirror, "record", slow_record)
    slow = threading.Thread(target=s.laplace, args=(1.0,), kwargs={"sensitivity": 1.0, "epsilon": 0.1,
                                                                  "label": "slow"})
    slow.start()
    assert entered.wait(timeout=20)
    s.laplace(2.0, sensitivity=1.0, epsilon=0.2, label="fast")  # charged and released while the send is stuck
    other_done.set()
    slow.join()
    assert waited == [True]
    s.close()
    assert sent == list(range(1, len(s._tracking.mirrored_to)))  # every record after open, in ledger order
    assert _metric(client, s.run_id, "release.slow") and _metric(client, s.run_id, "release.fast")
    assert _metric(client, s.run_id, "dpaudit.epsilon_spent")[-1] == pytest.approx(0.3, abs=1e-9)


def test_confidential_log_is_separate_and_named(make_session, client):
    s = make_session(mirror=True, confidential=True, name="conf")
    s.log_confidential({"true_validation_score": 0.93})
    cert = s.close()
    assert cert["confidential_log"]["location"] == "confidential/log.sqlite"
    main_run = client.get_run(s.run_id)
    assert "true_validation_score" not in main_run.data.metrics
    assert not any(e.name.endswith("CONFIDENTIAL") for e in client.search_experiments())


def test_verify_by_mlflow_run_id_downloads_the_bundle(make_session, tmp_path):
    """`dpaudit verify RUN_ID` with no local run folder fetches the artifacts from MLflow and verifies them."""
    from dpaudit.runs import resolve_run
    from dpaudit.verify import verify_bundle

    s = make_session(mirror=True, name="remote")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.close()
    folder = resolve_run(s.run_id, store=tmp_path / "elsewhere")
    assert folder != s.run_dir
    assert verify_bundle(folder, allow_not_for_release=True).valid


def test_run_is_tagged_with_the_signing_key_fingerprint(make_session, client):
    """Tagged when the run starts, so the MLflow UI names the key before any certificate exists."""
    s = make_session(mirror=True, name="tagged")
    assert client.get_run(s.run_id).data.tags["dpaudit.key_fingerprint"] == s.key_fingerprint
    assert s.close()["public_key_fingerprint"] == s.key_fingerprint
