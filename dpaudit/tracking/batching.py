"""Split buffered records into ``log_batch`` calls that respect MLflow's limits and carry their own marks.

Each call holds whole records: their metrics, their summaries packed into as few *summary tags* as MLflow's tag
value limit allows (a JSON array per tag, keyed ``dpaudit.ledger.<seq of its first record>``), and the *mark* tag
of each stream it carries (the highest record ``seq``, or public-metrics ordinal, in the call).

MLflow's SQL store writes a call's params, then its metrics, then all its tags in one transaction
(``SqlAlchemyStore.log_batch`` / ``_set_tags``). So a stored mark implies that every metric of the records at or
below it is stored, and a summary tag is stored exactly when the mark of its call is: records above the mark are
re-packed on a retry and never appear in two summary tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mlflow.entities import Metric, RunTag
from mlflow.utils.validation import (
    MAX_ENTITIES_PER_BATCH,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VAL_LENGTH,
)

from dpaudit.errors import InvalidParameter
from dpaudit.tracking.entities import LEDGER_TAG_PREFIX, RecordEntities


@dataclass(frozen=True)
class Limits:
    """Per-call limits of ``MlflowClient.log_batch`` (MLflow REST API, ``LogBatch``) and of one tag value."""

    metrics: int = MAX_METRICS_PER_BATCH
    tags: int = MAX_PARAMS_TAGS_PER_BATCH
    entities: int = MAX_ENTITIES_PER_BATCH
    tag_value: int = MAX_TAG_VAL_LENGTH


@dataclass(frozen=True)
class Batch:
    """One ``log_batch`` call: its metrics, its tags (summary tags, then marks) and the items it completes."""

    metrics: tuple[Metric, ...]
    tags: tuple[RunTag, ...]
    items: tuple[tuple[str, RecordEntities], ...]


@dataclass
class _Call:
    """A call being filled: items, metric count, and summary packs as (first seq, summaries, value length)."""

    limits: Limits
    reserved_tags: int
    items: list[tuple[str, RecordEntities]] = field(default_factory=list)
    n_metrics: int = 0
    packs: list[tuple[int, list[str], int]] = field(default_factory=list)

    def add(self, stream: str, entities: RecordEntities) -> bool:
        """Add the item if the call stays within the limits; False (and no change) otherwise."""
        n_metrics = self.n_metrics + len(entities.metrics)
        summary = entities.summary
        if summary is not None and 2 + len(summary) > self.limits.tag_value:
            return False
        grow = (summary is not None and bool(self.packs)
                and self.packs[-1][2] + 1 + len(summary) <= self.limits.tag_value)
        n_tags = len(self.packs) + (summary is not None and not grow) + self.reserved_tags
        if (n_metrics > self.limits.metrics or n_tags > self.limits.tags
                or n_metrics + n_tags > self.limits.entities):
            return False
        if summary is not None:
            if grow:
                first, summaries, length = self.packs[-1]
                summaries.append(summary)
                self.packs[-1] = (first, summaries, length + 1 + len(summary))
            else:
                self.packs.append((entities.ordinal, [summary], 2 + len(summary)))
        self.items.append((stream, entities))
        self.n_metrics = n_metrics
        return True

    def close(self, mark_tags: dict[str, str]) -> Batch:
        marks: dict[str, int] = {}
        for stream, entities in self.items:
            marks[stream] = max(marks.get(stream, -1), entities.ordinal)
        summary_tags = tuple(RunTag(f"{LEDGER_TAG_PREFIX}{first:08d}", "[" + ",".join(summaries) + "]")
                             for first, summaries, _ in self.packs)
        mark_values = tuple(RunTag(mark_tags[stream], str(mark)) for stream, mark in sorted(marks.items()))
        return Batch(tuple(m for _, e in self.items for m in e.metrics), summary_tags + mark_values,
                     tuple(self.items))


def plan_batches(items: Sequence[tuple[str, RecordEntities]], mark_tags: dict[str, str],
                 limits: Limits = Limits()) -> list[Batch]:
    """Pack ``(stream, entities)`` items, in order, into as few calls as the limits allow.

    Args:
        items: buffered items; within one stream their ordinals increase.
        mark_tags: stream name → key of the tag holding that stream's mark (room is kept for all of them).
        limits: per-call limits.

    Raises:
        InvalidParameter: one item alone (with the marks) exceeds a limit.
    """
    batches: list[Batch] = []
    call = _Call(limits, len(mark_tags))
    for stream, entities in items:
        if call.add(stream, entities):
            continue
        if call.items:
            batches.append(call.close(mark_tags))
            call = _Call(limits, len(mark_tags))
        if not call.add(stream, entities):
            raise InvalidParameter(f"{stream} item {entities.ordinal} with {len(entities.metrics)} metrics does not "
                                   f"fit in one MLflow log_batch call ({limits})")
    if call.items:
        batches.append(call.close(mark_tags))
    return batches
