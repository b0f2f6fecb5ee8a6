"""The MLflow mirror against a real (temporary, SQLite) MLflow store.

Covers nested runs, batching and its limits, idempotent retries after injected failures, the high-water mark on
resync, what may and may not reach the main run, artifacts, and run lookup for ``dpaudit verify``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH

from dpaudit.errors import InvalidParameter, VerificationError
from dpaudit.tracking import SPENT_KEY, MirrorError, MlflowMirror
from dpaudit.tracking.entities import LEDGER_TAG_PREFIX
from dpaudit.tracking.mirror import MARK_TAGS


@pytest.fixture
def mirror(tracking_uri) -> MlflowMirror:
    return MlflowMirror(tracking_uri, experiment="mirror-tests")


class Spy:
    """Wraps a client's ``log_batch``: counts calls and their sizes, and can fail (before or after writing)."""

    def __init__(self, client, monkeypatch, fail: str | None = None) -> None:
        self.real = client.log_batch
        self.calls: list[dict[str, int]] = []
        self.steps: list[list[int]] = []
        self.fail = fail
        monkeypatch.setattr(client, "log_batch", self)

    def __call__(self, run_id, metrics=(), params=(), tags=(), **kwargs):
        if self.fail == "before":
            self.fail = None
            raise ConnectionError("injected: server unreachable")
        self.calls.append({"metrics": len(metrics), "params": len(params), "tags": len(tags)})
        self.steps.append(sorted({m.step for m in metrics if m.key == SPENT_KEY}))
        self.real(run_id, metrics=metrics, params=params, tags=tags, **kwargs)
        if self.fail == "after":
            self.fail = None
            raise ConnectionError("injected: response lost after the write")


def _mirror_all(mirror, run_id, records, spent) -> None:
    for record, s in zip(records, spent, strict=True):
        mirror.record(run_id, record, s)


def _history_lengths(mirror, run_id) -> dict[str, int]:
    keys = mirror.client.get_run(run_id).data.metrics
    return {k: len(mirror.client.get_metric_history(run_id, k)) for k in keys}


def _expected_lengths(n_releases: int, label: str = "mean") -> dict[str, int]:
    return {SPENT_KEY: n_releases + 2, f"release.{label}": n_releases}


def _summarised_seqs(mirror, run_id) -> list[int]:
    """The seq of every record summary stored in the run's summary tags, in tag order (duplicates kept)."""
    tags = mirror.client.get_run(run_id).data.tags
    return [s["seq"] for k in sorted(tags) if k.startswith(LEDGER_TAG_PREFIX) for s in json.loads(tags[k])]


def test_sessions_are_runs_and_trials_are_nested_runs(mirror):
    parent = mirror.start_run("study", params={"budget_epsilon": "1.0"}, tags={"dpaudit.protected": "adult"})
    trial = mirror.start_run("trial-0", params={"lr": "0.1"}, tags={}, parent_run_id=parent)
    run = mirror.client.get_run(trial)
    assert run.data.tags[MLFLOW_PARENT_RUN_ID] == parent
    assert run.info.run_name == "trial-0" and run.data.params == {"lr": "0.1"}
    parent_run = mirror.client.get_run(parent)
    assert parent_run.data.params == {"budget_epsilon": "1.0"} and parent_run.data.tags["dpaudit.protected"] == "adult"
    assert MLFLOW_PARENT_RUN_ID not in parent_run.data.tags
    mirror.end_run(trial)
    mirror.end_run(parent, "FAILED")
    assert mirror.client.get_run(trial).info.status == "FINISHED"
    assert mirror.client.get_run(parent).info.status == "FAILED"


def test_many_params_are_split_at_the_param_limit(mirror, monkeypatch):
    spy = Spy(mirror.client, monkeypatch)
    params = {f"p{i}": str(i) for i in range(2 * MAX_PARAMS_TAGS_PER_BATCH + 5)}
    run_id = mirror.start_run("wide", params=params, tags={})
    assert [c["params"] for c in spy.calls] == [100, 100, 5]
    assert mirror.client.get_run(run_id).data.params == params


def test_records_are_written_in_batches_within_the_limits(tracking_uri, monkeypatch, ledger):
    mirror = MlflowMirror(tracking_uri, experiment="mirror-tests", batch_size=50)
    run_id = mirror.start_run("batched", {}, {})
    spy = Spy(mirror.client, monkeypatch)
    records, spent = ledger(60)                                 # 122 records
    _mirror_all(mirror, run_id, records[:49], spent[:49])
    assert spy.calls == []                                      # nothing written before the buffer is full
    mirror.record(run_id, records[49], spent[49])
    assert len(spy.calls) == 1
    _mirror_all(mirror, run_id, records[50:], spent[50:])
    mirror.flush()
    assert len(spy.calls) == 3                                  # 50 + 50 + 22 on flush
    for call in spy.calls:
        assert call["metrics"] <= MAX_METRICS_PER_BATCH and call["tags"] <= MAX_PARAMS_TAGS_PER_BATCH
    assert _history_lengths(mirror, run_id) == _expected_lengths(60)
    assert mirror.client.get_run(run_id).data.tags[MARK_TAGS["records"]] == str(len(records) - 1)


def test_a_full_buffer_larger_than_one_call_is_split(tracking_uri, monkeypatch, ledger):
    mirror = MlflowMirror(tracking_uri, experiment="mirror-tests")      # default batch size 200
    run_id = mirror.start_run("split", {}, {})
    spy = Spy(mirror.client, monkeypatch)
    records, spent = ledger(100, width=60)                      # 202 records; a release writes 60 metrics
    _mirror_all(mirror, run_id, records, spent)
    mirror.flush()
    # 200 records fill the buffer: 6041 metrics in 7 calls (at most 1000 entities each); the last 2 records on flush.
    assert len(spy.calls) == 8 and sum(c["metrics"] for c in spy.calls[:7]) == 1 + 99 * 61 + 1
    assert spy.calls[-1]["metrics"] == 60 + 1
    for call in spy.calls:
        assert call["metrics"] + call["tags"] <= MAX_METRICS_PER_BATCH and call["tags"] <= MAX_PARAMS_TAGS_PER_BATCH
    assert min(c["metrics"] + c["tags"] for c in spy.calls[:6]) > MAX_METRICS_PER_BATCH - 61   # calls are full
    lengths = _history_lengths(mirror, run_id)
    assert lengths[SPENT_KEY] == 102
    assert {lengths[f"release.mean.{j}"] for j in range(60)} == {100}
    assert _summarised_seqs(mirror, run_id) == [r["seq"] for r in records if r["type"] != "release"]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_retried_flush_after_a_failure_writes_no_duplicates(mirror, monkeypatch, ledger, when):
    run_id = mirror.start_run(f"retry-{when}", {}, {})
    records, spent = ledger(10)
    _mirror_all(mirror, run_id, records, spent)
    spy = Spy(mirror.client, monkeypatch, fail=when)
    with pytest.raises(MirrorError, match="ledger is complete"):
        mirror.flush()
    mirror.flush()
    assert _history_lengths(mirror, run_id) == _expected_lengths(10)
    assert _summarised_seqs(mirror, run_id) == [r["seq"] for r in records if r["type"] != "release"]
    if when == "after":
        # The failed call had been applied: the retry read the stored mark and sent nothing again.
        assert len(spy.calls) == 1
    else:
        assert len(spy.calls) == 1 and spy.steps[0] == [0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21]


def test_a_call_applied_in_part_is_completed_without_duplicates(mirror, monkeypatch, ledger):
    """MLflow's SQL store commits a batch's metrics before its tags: fail in between, then retry."""
    run_id = mirror.start_run("partial", {}, {})
    records, spent = ledger(10)
    _mirror_all(mirror, run_id, records, spent)
    store = mirror.client._tracking_client.store
    real_set_tags = store._set_tags
    state = {"failed": False}

    def set_tags_failing_once(*args, **kwargs):
        if not state["failed"]:
            state["failed"] = True
            raise OSError("injected: disk full while writing tags")
        return real_set_tags(*args, **kwargs)

    monkeypatch.setattr(store, "_set_tags", set_tags_failing_once)
    with pytest.raises(MirrorError):
        mirror.flush()
    assert _history_lengths(mirror, run_id) == _expected_lengths(10)        # metrics landed, the mark did not
    assert MARK_TAGS["records"] not in mirror.client.get_run(run_id).data.tags
    mirror.flush()
    assert _history_lengths(mirror, run_id) == _expected_lengths(10)
    assert mirror.client.get_run(run_id).data.tags[MARK_TAGS["records"]] == str(len(records) - 1)
    assert _summarised_seqs(mirror, run_id) == [r["seq"] for r in records if r["type"] != "release"]


def test_resync_skips_what_the_high_water_mark_covers(tracking_uri, monkeypatch, ledger):
    first = MlflowMirror(tracking_uri, experiment="mirror-tests")
    run_id = first.start_run("resync", {}, {})
    records, spent = ledger(20)                                 # 42 records
    _mirror_all(first, run_id, records[:15], spent[:15])
    first.flush()                                               # then the process dies

    restarted = MlflowMirror(tracking_uri, experiment="mirror-tests")
    spy = Spy(restarted.client, monkeypatch)
    assert restarted.resync(run_id, records, spent) == len(records) - 15
    assert sorted({s for steps in spy.steps for s in steps})[0] == 15
    assert restarted.resync(run_id, records, spent) == 0
    assert len(spy.calls) == 1
    assert _history_lengths(restarted, run_id) == _expected_lengths(20)
    assert _summarised_seqs(restarted, run_id) == [r["seq"] for r in records if r["type"] != "release"]
    # A replayed record below the mark is skipped by record() as well.
    restarted.record(run_id, records[3], spent[3])
    restarted.flush()
    assert len(spy.calls) == 1


def test_resync_checks_its_inputs_before_writing(mirror, ledger):
    run_id = mirror.start_run("resync-bad", {}, {})
    records, spent = ledger(2)
    with pytest.raises(InvalidParameter, match="one spent"):
        mirror.resync(run_id, records, spent[:-1])
    bad = [*records[:-1], {**records[-1], "body": {"true_value": 1.0}}]
    with pytest.raises(InvalidParameter, match="confidential"):
        mirror.resync(run_id, bad, spent)
    assert mirror.client.get_run(run_id).data.metrics == {}


def test_an_unreachable_store_does_not_stop_recording_and_fails_loudly_at_the_end(tracking_uri, monkeypatch, ledger):
    mirror = MlflowMirror(tracking_uri, experiment="mirror-tests", batch_size=5)
    run_id = mirror.start_run("outage", {}, {})
    records, spent = ledger(10)
    monkeypatch.setattr(mirror.client, "log_batch", _raise_connection_error)
    _mirror_all(mirror, run_id, records, spent)     # the automatic flush failed, silently for now
    with pytest.raises(MirrorError, match="resync"):
        mirror.end_run(run_id)
    assert mirror.client.get_run(run_id).info.status == "RUNNING"
    monkeypatch.undo()
    mirror.end_run(run_id)                                      # the buffer was kept: nothing was lost
    assert _history_lengths(mirror, run_id) == _expected_lengths(10)


def _raise_connection_error(*args, **kwargs):
    raise ConnectionError("injected: server unreachable")


def test_no_raw_values_reach_the_main_run(mirror, ledger):
    run_id = mirror.start_run("no-raw", {}, {})
    records, spent = ledger(3)
    _mirror_all(mirror, run_id, records, spent)
    leaking = {**records[4], "seq": 100, "body": {**records[4]["body"], "true_value": 12.25}}
    with pytest.raises(InvalidParameter, match="true_value"):
        mirror.record(run_id, leaking, 0.0)
    with pytest.raises(InvalidParameter, match="true_score"):
        mirror.log_public_metrics(run_id, {"true_score": 0.7}, 0)
    with pytest.raises(InvalidParameter, match="true_utility"):
        mirror.start_run("no-raw-params", params={"true_utility": "0.3"}, tags={})
    mirror.end_run(run_id)
    run = mirror.client.get_run(run_id)
    assert set(run.data.metrics) == {SPENT_KEY, "release.mean"}
    everything = json.dumps([run.data.tags, run.data.params, run.data.metrics])
    assert "true_value" not in everything and "12.25" not in everything
    assert [v for k, v in run.data.tags.items() if k.startswith("dpaudit.ledger.")] != []


def test_public_metrics_are_logged_and_retries_do_not_duplicate_them(mirror, monkeypatch):
    run_id = mirror.start_run("public", {}, {})
    mirror.log_public_metrics(run_id, {"test/accuracy": 0.8}, 0)
    mirror.log_public_metrics(run_id, {"test/accuracy": 0.85}, 1)
    Spy(mirror.client, monkeypatch, fail="after")
    with pytest.raises(MirrorError):
        mirror.flush()
    mirror.log_public_metrics(run_id, {"test/accuracy": 0.9}, 2)
    mirror.end_run(run_id)
    history = mirror.client.get_metric_history(run_id, "test/accuracy")
    assert [(m.step, m.value) for m in history] == [(0, 0.8), (1, 0.85), (2, 0.9)]
    assert mirror.client.get_run(run_id).data.tags[MARK_TAGS["public"]] == "2"


def test_artifacts_are_attached_and_can_be_downloaded(mirror, tmp_path, store_dir):
    run_id = mirror.start_run("artifacts", {}, {})
    files = []
    for name, text in [("ledger.jsonl", "{}\n"), ("certificate.json", "{\"epsilon\": 1.0}")]:
        files.append(tmp_path / name)
        files[-1].write_text(text)
    mirror.log_artifacts(run_id, files)
    mirror.log_artifacts(run_id, [files[0]], artifact_path="evidence")
    mirror.end_run(run_id)
    listed = {a.path for a in mirror.client.list_artifacts(run_id)}
    assert listed == {"ledger.jsonl", "certificate.json", "evidence"}
    artifact_uri = mirror.client.get_run(run_id).info.artifact_uri
    assert artifact_uri.startswith((Path(store_dir) / "artifacts").resolve().as_uri())
    local = mirror.download_artifacts(run_id, tmp_path / "download")
    assert (local / "certificate.json").read_text() == "{\"epsilon\": 1.0}"
    assert (local / "evidence" / "ledger.jsonl").exists()
    with pytest.raises(InvalidParameter, match="missing"):
        mirror.log_artifacts(run_id, [tmp_path / "absent.json"])


def test_find_run_raises_a_verification_error_for_an_unknown_run(mirror, tmp_path):
    with pytest.raises(VerificationError, match="not found"):
        mirror.find_run("0" * 32)
    with pytest.raises(VerificationError):
        mirror.download_artifacts("0" * 32, tmp_path)


@pytest.mark.parametrize(("kwargs", "match"), [({"batch_size": 0}, "batch_size"), ({"experiment": ""}, "experiment"),
                                               ({"tracking_uri": " "}, "tracking URI")])
def test_bad_constructor_arguments_are_refused(tracking_uri, kwargs, match):
    with pytest.raises(InvalidParameter, match=match):
        MlflowMirror(**{"tracking_uri": tracking_uri, **kwargs})


def test_bad_run_arguments_are_refused(mirror):
    with pytest.raises(InvalidParameter, match="run name"):
        mirror.start_run("", {}, {})
    with pytest.raises(InvalidParameter, match="str -> str"):
        mirror.start_run("x", {"lr": 0.1}, {})
    with pytest.raises(InvalidParameter, match="status"):
        mirror.end_run("0" * 32, "DONE")


def test_a_session_run_is_found_by_its_dpaudit_run_id_or_its_mlflow_id(mirror):
    """MLflow makes its own run ids; a dpaudit run is found by its tag, and a run mirrored before sessions made
    their own ids by its MLflow id. When two runs claim one id the mirror writes to the oldest, but what is verified
    (find_run) is refused: anyone who may edit the experiment can plant the older one."""
    tagged = mirror.start_run("tagged", {}, {"dpaudit.run_id": "a" * 32})
    assert mirror.find_run("a" * 32).info.run_id == tagged
    assert mirror.find_run(tagged).info.run_id == tagged
    copy = mirror.start_run("later copy", {}, {"dpaudit.run_id": "a" * 32})
    assert mirror.find_session_run("a" * 32).info.run_id == tagged
    with pytest.raises(VerificationError, match="more than one MLflow run") as refused:
        mirror.find_run("a" * 32)
    assert tagged in str(refused.value) and copy in str(refused.value)
    assert mirror.find_run(copy).info.run_id == copy  # each is still found by its own MLflow id
    assert mirror.find_session_run("b" * 32) is None
    assert mirror.find_session_run("x' OR '1'='1") is None  # never reaches the filter string


def test_find_session_run_creates_no_experiment(tracking_uri):
    reader = MlflowMirror(tracking_uri, experiment="never-created")
    assert reader.find_session_run("c" * 32) is None
    assert reader.client.get_experiment_by_name("never-created") is None


def test_the_experiment_is_tagged_for_the_classic_runs_view_and_linked(mirror, tracking_uri):
    from dpaudit.tracking.mirror import runs_view_url

    mirror.start_run("kind", {}, {})
    experiment = mirror.client.get_experiment_by_name("mirror-tests")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert runs_view_url(tracking_uri, "http://127.0.0.1:5000", "mirror-tests") == (
        f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning")
    assert runs_view_url(tracking_uri, "http://h:1", "absent").endswith("/#/experiments?workflowType=machine_learning")


def test_set_tags_refuses_confidential_keys_and_writes_the_rest(mirror):
    run_id = mirror.start_run("tags", {}, {})
    with pytest.raises(InvalidParameter):
        mirror.set_tags(run_id, {"true_score": "0.9"})
    mirror.set_tags(run_id, {f"t{i}": str(i) for i in range(MAX_PARAMS_TAGS_PER_BATCH + 5)})
    assert mirror.client.get_run(run_id).data.tags["t104"] == "104"


def test_a_burn_down_only_record_sends_the_point_and_nothing_else(mirror, ledger):
    records, spent = ledger(2)
    run_id = mirror.start_run("burn-down-only", {}, {})
    mirror.resync(run_id, records, spent, burn_down_only=frozenset({1, 3}))
    run = mirror.client.get_run(run_id)
    assert [m.step for m in mirror.client.get_metric_history(run_id, SPENT_KEY)] == [0, 1, 3, 5]
    assert 1 not in _summarised_seqs(mirror, run_id) and 0 in _summarised_seqs(mirror, run_id)
    assert run.data.tags[MARK_TAGS["records"]] == "5"
