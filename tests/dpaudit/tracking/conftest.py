"""Fixtures for the MLflow mirror tests: one quiet SQLite store shared by them (creating one costs seconds)."""

from __future__ import annotations

import logging
import os

import pytest

# Before MLflow is imported: no telemetry (the test machine has no network) and no INFO chatter from migrations.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
logging.getLogger("alembic").setLevel(logging.WARNING)


def pytest_collection_modifyitems(items):
    """MLflow's own SQLAlchemy deprecation warning is not ours to fix; keep the test output about dpaudit."""
    for item in items:
        if "tracking" in item.nodeid:
            item.add_marker(pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning"))


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory):
    """A fresh store folder shared by the tracking tests; each test makes its own runs, so they do not interact."""
    return tmp_path_factory.mktemp("mlruns")


@pytest.fixture(scope="session")
def tracking_uri(store_dir) -> str:
    from dpaudit.tracking import default_tracking_uri

    return default_tracking_uri(store_dir)


@pytest.fixture
def ledger():
    """Factory of ledger-shaped records as a Session writes them: open, (charge, release) × n, close.

    Returns (records, spent): each charge costs 0.01 of a budget of 1.0. Outputs are numbers, or vectors of
    ``width`` numbers.
    """

    def make(n_releases: int, label: str = "mean", t0: float = 1.7e9, width: int = 0):
        records, spent = [], []

        def add(rtype: str, body: dict, eps: float) -> None:
            seq = len(records)
            records.append({"seq": seq, "type": rtype, "time": t0 + 0.5 * seq, "prev": "0" * 64, "body": body,
                            "hash": f"{seq:064x}"})
            spent.append(eps)

        add("open", {"name": "study", "budget": {"epsilon": 1.0, "delta": 1e-6}, "neighbouring": "add_remove"}, 0.0)
        eps = 0.0
        for i in range(n_releases):
            eps = round(eps + 0.01, 10)
            event = {"kind": "laplace", "label": label, "epsilon": 0.01, "scale": 100.0, "grid": 0.01,
                     "dimension": 1, "neighbouring": "add_remove", "assumptions": [],
                     "sensitivity": {"value": 1.0, "norm": "l1", "formula": "count", "inputs": {},
                                     "source": "", "assumptions": []}}
            add("charge", {"event": event, "plugin": "session", "mechanism": "laplace", "epsilon_spent": eps,
                           "bound_source": "pure"}, eps)
            add("release", {"charge_seq": len(records) - 1, "plugin": "session", "mechanism": "laplace",
                            "label": label, "output": [10.0 + i] * width if width else 10.0 + i}, eps)
        add("close", {"status": "FINISHED", "charges": n_releases}, eps)
        return records, spent

    return make
