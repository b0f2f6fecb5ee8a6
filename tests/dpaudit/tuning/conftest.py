"""Seeded sessions for the tuning kit's tests: a budget a DP-SGD run fits in, the Adult training set protected."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dpaudit import Session


@pytest.fixture
def make_session(make_session) -> Callable[..., Session]:
    """The shared seeded-session factory with ε = 10 and ``adult-train`` protected (override with keywords)."""

    def make(epsilon: float = 10.0, delta: float = 1e-5, **kwargs) -> Session:
        kwargs.setdefault("protected", ("adult-train",))
        return make_session(epsilon, delta, **kwargs)

    return make
