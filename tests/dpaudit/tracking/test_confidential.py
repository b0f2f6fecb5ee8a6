"""The confidential log: a separate experiment, clearly marked, created only on request."""

from __future__ import annotations

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.tracking import ConfidentialLog, MlflowMirror
from dpaudit.tracking.confidential import CONFIDENTIAL_TAG


def test_the_confidential_experiment_exists_only_on_request(tracking_uri):
    mirror = MlflowMirror(tracking_uri, experiment="conf-off")
    run_id = mirror.start_run("study", {}, {})
    mirror.end_run(run_id)
    assert mirror.client.get_experiment_by_name("conf-off.CONFIDENTIAL") is None


def test_confidential_values_go_to_a_separate_marked_experiment(tracking_uri):
    mirror = MlflowMirror(tracking_uri, experiment="conf-on")
    run_id = mirror.start_run("study", {}, {})
    log = ConfidentialLog(mirror, "conf-on")
    log.log("study", {"true_score": 0.731, "true_value": 12.25}, step=3)
    log.log("study", {"true_score": 0.744}, step=4)
    mirror.end_run(run_id)
    log.close()

    experiment = mirror.client.get_experiment_by_name("conf-on.CONFIDENTIAL")
    assert log.experiment_name == experiment.name and experiment.experiment_id != mirror.experiment_id()
    assert experiment.tags[CONFIDENTIAL_TAG] == "true"
    assert "NOT differentially private" in experiment.tags["mlflow.note.content"]
    assert "outside the release" in experiment.tags["mlflow.note.content"]
    (run,) = mirror.client.search_runs([experiment.experiment_id])
    assert run.data.tags[CONFIDENTIAL_TAG] == "true" and run.info.status == "FINISHED"
    history = mirror.client.get_metric_history(run.info.run_id, "true_score")
    assert [(m.step, m.value) for m in history] == [(3, 0.731), (4, 0.744)]
    assert mirror.client.get_run(run_id).data.metrics == {}


def test_a_second_log_reuses_the_experiment(tracking_uri):
    mirror = MlflowMirror(tracking_uri, experiment="conf-twice")
    assert ConfidentialLog(mirror).experiment_id == ConfidentialLog(mirror, "conf-twice").experiment_id


@pytest.mark.parametrize(("run_name", "values", "step"), [("", {"a": 1.0}, 0), ("r", {}, 0), ("r", {"a": 1.0}, -1),
                                                          ("r", {"a/../b": 1.0}, 0), ("r", {"a": float("nan")}, 0)])
def test_bad_confidential_entries_are_refused(tracking_uri, run_name, values, step):
    log = ConfidentialLog(MlflowMirror(tracking_uri, experiment="conf-bad"))
    with pytest.raises(InvalidParameter):
        log.log(run_name, values, step)
