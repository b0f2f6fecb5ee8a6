"""Fixtures for plugin tests: seeded sessions in a throw-away store, MLflow mirror off."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dpaudit import Session


@pytest.fixture
def make_session(make_session) -> Callable[..., Session]:
    """The shared seeded-session factory, protecting the Adult training set (override with keyword arguments)."""

    def make(epsilon: float = 10.0, delta: float = 1e-5, **kwargs) -> Session:
        kwargs.setdefault("protected", ("adult-train",))
        kwargs.setdefault("name", "plugin-test")
        return make_session(epsilon, delta, **kwargs)

    return make
