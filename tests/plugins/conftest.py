"""Fixtures for plugin tests: seeded sessions in a throw-away store, MLflow mirror off."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dpaudit import Session
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
