"""Splitting buffered records into log_batch calls: MLflow's limits, whole records, packed summaries, marks."""

from __future__ import annotations

import json

import pytest
from mlflow.entities import Metric

from dpaudit.errors import InvalidParameter
from dpaudit.tracking.batching import Limits, plan_batches
from dpaudit.tracking.entities import LEDGER_TAG_PREFIX, RecordEntities

MARKS = {"records": "mark.records", "public": "mark.public"}


def _item(seq: int, n_metrics: int, summary_chars: int | None = 50) -> tuple[str, RecordEntities]:
    metrics = tuple(Metric(f"m{j}", 1.0, 0, seq) for j in range(n_metrics))
    summary = None if summary_chars is None else json.dumps({"seq": seq, "pad": "x" * summary_chars})
    return "records", RecordEntities(seq, metrics, summary)


def _summaries(batch) -> list[dict]:
    return [s for t in batch.tags if t.key.startswith(LEDGER_TAG_PREFIX) for s in json.loads(t.value)]


@pytest.mark.parametrize(("n_items", "n_metrics", "chars"), [(250, 3, 50), (40, 60, None), (500, 0, 3000),
                                                             (300, 2, 7970), (7, 2, 50)])
def test_batches_respect_mlflow_limits_and_never_split_a_record(n_items, n_metrics, chars):
    items = [_item(i, n_metrics, chars) for i in range(n_items)]
    limits = Limits()
    batches = plan_batches(items, MARKS)
    assert [e for b in batches for _, e in b.items] == [e for _, e in items]
    for batch in batches:
        assert len(batch.metrics) <= limits.metrics
        assert len(batch.tags) <= limits.tags
        assert len(batch.metrics) + len(batch.tags) <= limits.entities
        assert all(len(t.value) <= limits.tag_value for t in batch.tags)
        assert len(batch.metrics) == sum(len(e.metrics) for _, e in batch.items)
        marks = {t.key: t.value for t in batch.tags if t.key.startswith("mark.")}
        assert marks == {"mark.records": str(batch.items[-1][1].ordinal)}
        if chars is not None:        # every record of the call is summarised once, in order, under its first seq
            assert [s["seq"] for s in _summaries(batch)] == [e.ordinal for _, e in batch.items]
            for tag in batch.tags:
                if tag.key.startswith(LEDGER_TAG_PREFIX):
                    assert tag.key == f"{LEDGER_TAG_PREFIX}{json.loads(tag.value)[0]['seq']:08d}"


def test_split_points_at_each_limit():
    # Small summaries share tags (~110 per tag): 988 metrics + 10 summary tags + 2 marks = 1000 entities per call.
    assert [len(b.items) for b in plan_batches([_item(i, 1) for i in range(2000)], MARKS)] == [988, 988, 24]
    # Summaries of ~8000 characters take a tag each: 98 per call, with the 2 marks.
    assert [len(b.items) for b in plan_batches([_item(i, 0, 7970) for i in range(200)], MARKS)] == [98, 98, 4]
    # 60 metrics per record: 16 records fill 960 of the 1000 metrics.
    assert [len(b.items) for b in plan_batches([_item(i, 60, None) for i in range(40)], MARKS)] == [16, 16, 8]
    # A tight total-entity limit binds before the metric limit.
    tight = Limits(metrics=100, tags=100, entities=12)
    assert [len(b.items) for b in plan_batches([_item(i, 4) for i in range(5)], MARKS, tight)] == [2, 2, 1]


def test_each_stream_gets_its_own_mark():
    public = ("public", RecordEntities(0, (Metric("acc", 0.9, 0, 0),)))
    (batch,) = plan_batches([_item(3, 1), _item(5, 1), public], MARKS)
    marks = {t.key: t.value for t in batch.tags if t.key.startswith("mark.")}
    assert marks == {"mark.records": "5", "mark.public": "0"}


def test_a_record_larger_than_one_call_is_refused():
    with pytest.raises(InvalidParameter, match="log_batch"):
        plan_batches([_item(0, 1001, None)], MARKS)
    with pytest.raises(InvalidParameter, match="log_batch"):
        plan_batches([_item(0, 0, 100)], MARKS, Limits(tag_value=50))
