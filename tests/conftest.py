"""Fixtures shared by every test: an isolated run store and MLflow store, and seeded sessions."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dpaudit import Session
from dpaudit.mechanisms.randomness import SeededRandom


@pytest.fixture(autouse=True)
def isolated_stores(tmp_path, monkeypatch):
    """No test writes into the repository's ./dpaudit_runs or ./mlruns, or reads the user's trust store."""
    monkeypatch.setenv("DPAUDIT_HOME", str(tmp_path / "dpaudit_home"))
    monkeypatch.setenv("DPAUDIT_TRUST_STORE", str(tmp_path / "config" / "trusted_keys.json"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


@pytest.fixture
def make_session() -> Callable[..., Session]:
    """Build seeded sessions in the test's local store, ``$DPAUDIT_HOME`` (MLflow mirror off unless asked).

    The local store's own key is the one ``verify_bundle`` trusts by default, as on a user's machine.
    """

    def make(epsilon: float = 1.0, delta: float = 1e-6, *, seed: int = 0, **kwargs) -> Session:
        kwargs.setdefault("mirror", False)
        return Session(epsilon=epsilon, delta=delta, rng=SeededRandom(seed), **kwargs)

    return make
