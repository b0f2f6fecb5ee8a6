"""Fixtures for plugin tests: seeded sessions in a throw-away store, MLflow mirror off; a closed run's ledger in a
form two runs of the same plan can be compared in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dpaudit import Session
from dpaudit.ledger import read_records
from dpaudit.tuning import TUNING_PUBLIC


@pytest.fixture
def make_session(make_session) -> Callable[..., Session]:
    """The shared seeded-session factory, protecting the Adult training set and listing the two public halves of
    its test split (override with keyword arguments)."""

    def make(epsilon: float = 10.0, delta: float = 1e-5, **kwargs) -> Session:
        kwargs.setdefault("protected", ("adult-train",))
        kwargs.setdefault("public", TUNING_PUBLIC)
        kwargs.setdefault("name", "plugin-test")
        return make_session(epsilon, delta, **kwargs)

    return make


def _untimed(value: Any) -> Any:
    """``value`` without its clock readings (keys ending in ``_at``)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not k.endswith("_at")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


@pytest.fixture
def ledger_content() -> Callable[[Path], list[tuple[str, Any]]]:
    """Reads a ledger (asserting it has no problems) into its records' (type, body) pairs without what differs
    between two runs of the same plan: the open record (run id, name, clock, code version), record times, clock
    readings (keys ending in ``_at``) and hashes. Used to compare a sequential run with a parallel one."""

    def read(ledger_path: Path) -> list[tuple[str, Any]]:
        records, problems = read_records(ledger_path)
        assert not problems
        return [(r.type, _untimed(r.body)) for r in records if r.type != "open"]

    return read
