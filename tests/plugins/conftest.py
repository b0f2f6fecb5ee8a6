"""Fixtures for plugin tests: seeded sessions in a throw-away store, MLflow mirror off."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dpaudit import Session
from dpaudit.mechanisms.randomness import SeededRandom


@pytest.fixture
def make_session(tmp_path) -> Callable[..., Session]:
    """Build seeded sessions protecting the Adult training set (override with keyword arguments)."""

    def make(epsilon: float = 10.0, delta: float = 1e-5, *, seed: int = 0, **kwargs) -> Session:
        kwargs.setdefault("mirror", False)
        kwargs.setdefault("store", tmp_path / "runs")
        kwargs.setdefault("protected", ("adult-train",))
        kwargs.setdefault("name", "plugin-test")
        return Session(epsilon=epsilon, delta=delta, rng=SeededRandom(seed), **kwargs)

    return make
