"""What a ledger record becomes in MLflow: a whitelist of public fields, deterministic entities, no raw values."""

from __future__ import annotations

import json

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.public_values import confidential_key_set
from dpaudit.tracking.entities import (
    MAX_SUMMARY_LENGTH,
    ODOMETER_KEY,
    SPENT_KEY,
    burn_down_entities,
    public_metric_entities,
    record_entities,
    release_values,
    spent_key,
)


def test_entities_are_deterministic_functions_of_the_record(ledger):
    records, spent = ledger(2)
    first = [record_entities(r, s) for r, s in zip(records, spent, strict=True)]
    again = [record_entities(r, s) for r, s in zip(records, spent, strict=True)]
    assert first == again
    charge = first[1]
    assert [(m.key, m.value, m.step, m.timestamp) for m in charge.metrics] == [
        (SPENT_KEY, 0.01, 1, int(records[1]["time"] * 1000))]
    assert json.loads(charge.summary)["seq"] == 1


def test_burn_down_points_only_where_the_budget_can_change(ledger):
    records, spent = ledger(1)
    kinds = {r["type"]: {m.key for m in record_entities(r, s).metrics} for r, s in zip(records, spent, strict=True)}
    assert kinds["open"] == kinds["charge"] == kinds["close"] == {SPENT_KEY}
    assert kinds["release"] == {"release.mean"}


def test_an_adaptive_session_names_its_running_value_the_filter_odometer(ledger):
    records, spent = ledger(1)
    assert spent_key({"adaptive": {"orders": [2, 4]}}) == ODOMETER_KEY and spent_key({"adaptive": None}) == SPENT_KEY
    assert {m.key for m in record_entities(records[1], spent[1], key=ODOMETER_KEY).metrics} == {ODOMETER_KEY}


def test_a_burn_down_point_alone_is_the_records_spent_metric(ledger):
    records, spent = ledger(1)
    point = burn_down_entities(records[1], spent[1])
    assert point.summary is None and point.metrics == record_entities(records[1], spent[1]).metrics
    with pytest.raises(InvalidParameter):
        burn_down_entities(records[1], float("nan"))


def test_releases_have_no_summary_their_metric_is_their_public_content(ledger):
    records, spent = ledger(1)
    assert [record_entities(r, s).summary is None for r, s in zip(records, spent, strict=True)] == [
        False, False, True, False]


def test_summary_keeps_the_whitelist_and_drops_everything_else(ledger):
    records, _ = ledger(1)
    charge = dict(records[1])
    charge["body"] = {**charge["body"], "notes": "free text that is not whitelisted", "scratch": [1, 2, 3]}
    summary = json.loads(record_entities(charge, 0.01).summary)
    assert summary == {"seq": 1, "type": "charge", "hash": charge["hash"], "plugin": "session", "mechanism": "laplace",
                       "bound_source": "pure", "event": {"kind": "laplace", "label": "mean", "epsilon": 0.01,
                                                         "sensitivity": 1.0, "formula": "count"}}


@pytest.mark.parametrize("where", ["body", "nested", "list", "info", "case"])
def test_a_confidential_key_anywhere_in_a_record_is_refused(ledger, where):
    records, _ = ledger(1)
    record = dict(records[2])
    body = dict(record["body"])
    if where == "body":
        body["true_value"] = 10.3
    elif where == "nested":
        body["output"] = {"noisy": 10.0, "diagnostics": {"TRUE_VALUE": 10.3}}
    elif where == "list":
        body["extra"] = [{"raw": 1.0}]
    elif where == "info":
        record["type"], body = "info", {"plugin": "p", "info": {"unnoised_value": 3.0}}
    else:
        body["True_Score"] = 0.7
    record["body"] = body
    with pytest.raises(InvalidParameter, match="confidential key"):
        record_entities(record, None)


def test_extra_confidential_keys_are_refused_too(ledger):
    records, _ = ledger(1)
    record = {**records[2], "body": {**records[2]["body"], "val_loss_exact": 0.1}}
    record_entities(record, None)
    with pytest.raises(InvalidParameter, match="val_loss_exact"):
        record_entities(record, None, confidential_key_set(["Val_Loss_Exact"]))


def test_release_values_of_numbers_vectors_and_mappings():
    assert release_values("best value", 3.5) == {"release.best_value": 3.5}
    assert release_values("v", [1, 2.5]) == {"release.v.0": 1.0, "release.v.1": 2.5}
    assert release_values("svt", {"query": 4, "above": True}) == {"release.svt.query": 4.0, "release.svt.above": 1.0}
    assert release_values("", 1.0) == {"release.unlabelled": 1.0}
    assert release_values("../x", 1.0) == {"release._x": 1.0}
    assert release_values("big", list(range(101))) is None
    assert release_values("text", "a string") is None
    with pytest.raises(InvalidParameter, match="finite"):
        release_values("bad", float("nan"))


def test_an_oversized_summary_keeps_its_core_and_says_what_was_omitted(ledger):
    records, _ = ledger(1)
    info = {**records[2], "type": "info", "body": {"plugin": "p", "label": "x" * 9000, "info": {"k": "y" * 9000}}}
    text = record_entities(info, None).summary
    assert len(text) <= MAX_SUMMARY_LENGTH
    summary = json.loads(text)
    assert summary["plugin"] == "p" and len(summary["label"]) == 200 and "info" not in summary
    assert "ledger artifact" in summary["omitted"]


@pytest.mark.parametrize("record_patch", [{"seq": -1}, {"seq": True}, {"type": "spend"}, {"time": float("inf")},
                                          {"body": []}])
def test_malformed_records_are_refused(ledger, record_patch):
    records, _ = ledger(0)
    with pytest.raises(InvalidParameter):
        record_entities({**records[0], **record_patch}, 0.0)


def test_non_finite_burn_down_is_refused(ledger):
    records, _ = ledger(1)
    with pytest.raises(InvalidParameter, match="finite"):
        record_entities(records[1], float("nan"))


@pytest.mark.parametrize("name", ["release.acc", "dpaudit.acc", "../acc", "a//b", "", "acc!", "true_score"])
def test_public_metric_names_must_be_valid_unreserved_and_not_confidential(name):
    with pytest.raises(InvalidParameter):
        public_metric_entities(0, {name: 0.5}, 0, 0)


def test_public_metrics_keep_their_names():
    entities = public_metric_entities(4, {"test/accuracy": 0.91}, 7, 123)
    assert entities.ordinal == 4
    assert [(m.key, m.value, m.step, m.timestamp) for m in entities.metrics] == [("test/accuracy", 0.91, 7, 123)]
