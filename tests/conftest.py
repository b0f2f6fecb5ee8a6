"""Fixtures shared by every test: an isolated run store and MLflow store, and seeded sessions."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dpaudit import Session
from dpaudit.mechanisms.randomness import SeededRandom


@pytest.fixture(autouse=True)
def isolated_stores(tmp_path, monkeypatch):
    """No test writes into the repository's ./dpaudit_runs or ./mlruns."""
    monkeypatch.setenv("DPAUDIT_HOME", str(tmp_path / "dpaudit_home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


@pytest.fixture
def make_session(tmp_path) -> Callable[..., Session]:
    """Build seeded sessions in a temporary store (MLflow mirror off unless asked)."""

    def make(epsilon: float = 1.0, delta: float = 1e-6, *, seed: int = 0, **kwargs) -> Session:
        kwargs.setdefault("mirror", False)
        kwargs.setdefault("store", tmp_path / "runs")
        return Session(epsilon=epsilon, delta=delta, rng=SeededRandom(seed), **kwargs)

    return make
