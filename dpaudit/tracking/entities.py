"""Pure mapping from ledger records to the MLflow entities that mirror them.

Every record maps to *deterministic* metrics: key, step (= the record's ``seq``), timestamp (= ``int(time * 1000)``)
and value are functions of the record alone, so re-sending a record re-sends identical metrics. Records other than
releases also get a one-line public summary, which :mod:`dpaudit.tracking.batching` packs into summary tags
(see docs/mlflow.md for why this is idempotent too).

What may reach the main MLflow run is a whitelist; nothing else is copied:

* the record type and hash; from the body: plugin, mechanism, label, the charged event's kind, ε, δ, sensitivity
  value and formula id, and public metadata (session name, budget, neighbouring relation, accountant, names of
  the protected and public data sets, versions, status, ``info`` bodies);
* released (noised) numeric outputs, as metrics ``release.<label>``;
* the budget burn-down, as the metric ``dpaudit.epsilon_spent`` (ε remaining, the budget param minus it, is
  derivable and not logged); in an adaptive session ``dpaudit.filter_odometer_epsilon`` (:func:`spent_key`).

A record that carries a key listed as confidential (e.g. ``true_value``) anywhere in it is **refused**
(:class:`~dpaudit.errors.InvalidParameter`; the check is :func:`dpaudit.public_values.check_public`, which the
session already ran before the ledger append), not stripped: a raw value in the ledger is a broken contract, and
the ledger itself is attached to the run as an artifact, so stripping the mirror's copy would hide the leak rather
than stop it. Raw values belong in :class:`~dpaudit.tracking.ConfidentialLog`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlflow.entities import Metric
from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

from dpaudit import canonical
from dpaudit.errors import InvalidParameter
from dpaudit.public_values import CONFIDENTIAL_KEYS, check_public
from dpaudit.records import CHARGE, CLOSE, OPEN, RECORD_TYPES, RELEASE
from dpaudit.tracking.run_page import check_key

BURN_DOWN_TYPES = frozenset({OPEN, CHARGE, CLOSE})
"""Record types that get a burn-down point: only a charge changes ε spent; open and close give the end points."""

SPENT_KEY = "dpaudit.epsilon_spent"
"""The burn-down of a fixed-parameter session: the budget filter's upper bound on ε (at δ_B) after each charge."""
ODOMETER_KEY = "dpaudit.filter_odometer_epsilon"
"""The burn-down of an adaptive session: its Rényi filter's odometer (the smallest budget the filter would have
needed so far), information only. Such a session certifies its budget, never this running value, so it is not
called ``epsilon_spent``."""
RELEASE_PREFIX = "release."
LEDGER_TAG_PREFIX = "dpaudit.ledger."
RESERVED_PREFIXES = ("dpaudit.", RELEASE_PREFIX)
MAX_RELEASE_METRICS = 100
"""A released output with more numbers than this is not mirrored as metrics (the ledger artifact has it)."""
MAX_SUMMARY_LENGTH = MAX_TAG_VAL_LENGTH - 2
"""A summary fits in one summary tag with the brackets of its JSON array."""

_MAX_LABEL = 200
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
_BODY_FIELDS = ("name", "plugin", "mechanism", "label", "charge_seq", "bound_source", "status", "charges",
                "budget", "neighbouring", "accountant", "protected", "public", "confidential_log",
                "dpaudit_version", "code_version", "info")
_CORE_FIELDS = ("plugin", "mechanism", "label", "charge_seq", "status")


@dataclass(frozen=True)
class RecordEntities:
    """The MLflow entities of one ledger record (or of one call of ``log_public_metrics``).

    Attributes:
        ordinal: the record's ``seq`` (or the public-metrics call's ordinal); the mirror's marks count these.
        metrics: metrics to log, with deterministic key, step and timestamp.
        summary: the record's public summary (canonical JSON, at most :data:`MAX_SUMMARY_LENGTH` characters), or
            None (releases, whose public content is their metric; public metrics).
    """

    ordinal: int
    metrics: tuple[Metric, ...]
    summary: str | None = None


def metric_key_part(text: str) -> str:
    """``text`` made safe as part of an MLflow metric key (letters, digits, ``_ . -``; no leading dot)."""
    safe = _UNSAFE.sub("_", text.strip())[:_MAX_LABEL].lstrip(".")
    return safe or "unlabelled"


def check_metric_key(key: Any) -> str:
    """``key`` if it is usable as an MLflow metric key as it is (no renaming behind the caller's back).

    Raises:
        InvalidParameter: not a string, a character MLflow refuses, a ``..`` or leading ``/``, or too long.
    """
    return check_key("metric name", key)


def finite(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite number (booleans count as 0 / 1).

    Raises:
        InvalidParameter: not a number, NaN or infinite.
    """
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        raise InvalidParameter(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    return v


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float))


def release_values(label: str, output: Any) -> dict[str, float] | None:
    """Metric key → value for a released numeric output; None if it is not numeric or too large to mirror.

    A number gives ``release.<label>``; a flat list gives ``release.<label>.<i>``; a flat mapping gives
    ``release.<label>.<key>``. Booleans count as 0 / 1.

    Raises:
        InvalidParameter: a released number is NaN or infinite.
    """
    base = RELEASE_PREFIX + metric_key_part(label)
    if _is_number(output):
        return {base: finite(base, output)}
    if isinstance(output, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(output)]
    elif isinstance(output, Mapping):
        items = [(metric_key_part(str(k)), v) for k, v in output.items()]
    else:
        return None
    if not items or len(items) > MAX_RELEASE_METRICS or not all(_is_number(v) for _, v in items):
        return None
    return {f"{base}.{k}": finite(f"{base}.{k}", v) for k, v in items}


def _event_summary(event: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": event.get("kind")}
    for name in ("label", "epsilon", "delta"):
        if name in event:
            out[name] = event[name]
    sensitivity = event.get("sensitivity")
    if isinstance(sensitivity, Mapping):
        out["sensitivity"] = sensitivity.get("value")
        out["formula"] = sensitivity.get("formula")
    return out


def record_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """The whitelisted, public summary of a record (see the module docstring for what is kept)."""
    body = record["body"]
    out: dict[str, Any] = {"seq": record["seq"], "type": record["type"], "hash": record.get("hash")}
    out.update({name: body[name] for name in _BODY_FIELDS if name in body})
    if isinstance(body.get("event"), Mapping):
        out["event"] = _event_summary(body["event"])
    return out


def _summary_text(summary: dict[str, Any]) -> str:
    try:
        text = canonical.dumps(summary)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"record summary is not finite JSON: {exc}") from exc
    if len(text) <= MAX_SUMMARY_LENGTH:
        return text
    core = {k: summary[k] for k in ("seq", "type", "hash", "event", *_CORE_FIELDS) if k in summary}
    if isinstance(core.get("label"), str):
        core["label"] = core["label"][:_MAX_LABEL]
    if isinstance(core.get("event"), dict) and isinstance(core["event"].get("label"), str):
        core["event"] = {**core["event"], "label": core["event"]["label"][:_MAX_LABEL]}
    core["omitted"] = "too long for an MLflow tag; see the ledger artifact"
    return canonical.dumps(core)


def _check_record(record: Mapping[str, Any]) -> tuple[int, str, int, Mapping[str, Any]]:
    if not isinstance(record, Mapping):
        raise InvalidParameter(f"a ledger record must be a mapping, got {type(record).__name__}")
    missing = [k for k in ("seq", "type", "time", "body") if k not in record]
    if missing:
        raise InvalidParameter(f"ledger record lacks {missing}")
    seq, rtype, body = record["seq"], record["type"], record["body"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise InvalidParameter(f"record seq must be a whole number >= 0, got {seq!r}")
    if rtype not in RECORD_TYPES:
        raise InvalidParameter(f"record type must be one of {sorted(RECORD_TYPES)}, got {rtype!r}")
    if not isinstance(body, Mapping):
        raise InvalidParameter(f"record body must be a mapping, got {type(body).__name__}")
    timestamp = int(finite("record time", record["time"]) * 1000)
    return seq, rtype, timestamp, body


def spent_key(opened: Mapping[str, Any]) -> str:
    """The burn-down metric's key for a session whose ``open`` record body is ``opened``: :data:`ODOMETER_KEY` for an
    adaptive session (its running value is not a certified ε), :data:`SPENT_KEY` otherwise."""
    return ODOMETER_KEY if opened.get("adaptive") else SPENT_KEY


def burn_down_entities(record: Mapping[str, Any], spent_epsilon: float, key: str = SPENT_KEY) -> RecordEntities:
    """Only the burn-down point of a record (no summary, no release metric): what the session run gets of a charge
    made inside a nested trial run, so that the session's burn-down has a step at every charge.

    Raises:
        InvalidParameter: malformed record, or a non-finite ε.
    """
    seq, _, timestamp, _ = _check_record(record)
    return RecordEntities(seq, (Metric(key, finite(key, spent_epsilon), timestamp, seq),))


def record_entities(record: Mapping[str, Any], spent_epsilon: float | None,
                    keys: frozenset[str] = CONFIDENTIAL_KEYS, key: str = SPENT_KEY) -> RecordEntities:
    """The MLflow entities of one ledger record.

    Args:
        record: a ledger record (``seq``, ``type``, ``time``, ``body``, ``hash``).
        spent_epsilon: ε spent after the record (None: no burn-down point). Used for open/charge/close records.
        keys: confidential keys (lower case).
        key: the burn-down metric's key (:func:`spent_key`).

    Raises:
        InvalidParameter: malformed record, a confidential key in it, or a non-finite number to mirror.
    """
    seq, rtype, timestamp, body = _check_record(record)
    check_public(record, keys, f"ledger record {seq}")
    metrics: list[Metric] = []
    if rtype in BURN_DOWN_TYPES and spent_epsilon is not None:
        metrics.append(Metric(key, finite(key, spent_epsilon), timestamp, seq))
    if rtype == RELEASE and "output" in body:
        label = body.get("label") or ""
        released = release_values(label if isinstance(label, str) else str(label), body["output"])
        for key, value in (released or {}).items():
            metrics.append(Metric(key, value, timestamp, seq))
    if rtype == RELEASE:
        return RecordEntities(seq, tuple(metrics))
    return RecordEntities(seq, tuple(metrics), _summary_text(record_summary(record)))


def public_metric_entities(ordinal: int, metrics: Mapping[str, Any], step: int, timestamp: int,
                           keys: frozenset[str] = CONFIDENTIAL_KEYS) -> RecordEntities:
    """The entities of one ``log_public_metrics`` call (keys kept as given, so they must be valid as they are).

    Raises:
        InvalidParameter: a bad or reserved key, a confidential key, a non-finite value, or a bad step.
    """
    if not isinstance(metrics, Mapping) or not metrics:
        raise InvalidParameter("public metrics must be a non-empty mapping of name -> number")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidParameter(f"step must be a whole number >= 0, got {step!r}")
    check_public(metrics, keys, "public metrics")
    out = []
    for key, value in metrics.items():
        if check_metric_key(key).startswith(RESERVED_PREFIXES):
            raise InvalidParameter(f"public metric name {key!r} uses a prefix reserved by dpaudit {RESERVED_PREFIXES}")
        out.append(Metric(key, finite(key, value), timestamp, step))
    return RecordEntities(ordinal, tuple(out))
