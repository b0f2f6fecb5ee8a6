"""Where the MLflow mirror writes: the tracking URI and, for the embedded store, the artifact folder.

The default store is embedded and local: a SQLite database ``mlruns/mlflow.db`` under the current directory, with
artifacts under ``mlruns/artifacts``. Any other MLflow tracking URI (a server, another database) works as well.
Precedence: an explicit URI, then the ``MLFLOW_TRACKING_URI`` environment variable, then the default. A local
SQLite store is created once, under a lock, atomically (:mod:`dpaudit.tracking.embedded_store`).
"""

from __future__ import annotations

import os
from pathlib import Path

from dpaudit.errors import InvalidParameter

DEFAULT_STORE_DIR = Path("mlruns")
"""The embedded store's folder, relative to the current directory."""

DATABASE_FILE = "mlflow.db"
ARTIFACTS_DIR = "artifacts"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
_SQLITE_PREFIX = "sqlite:///"


def default_tracking_uri(base: Path | None = None) -> str:
    """The embedded SQLite store's URI: ``sqlite:///<base, resolved>/mlflow.db``.

    Args:
        base: the store folder; ``./mlruns`` when omitted.
    """
    store = (DEFAULT_STORE_DIR if base is None else Path(base)).resolve()
    return f"{_SQLITE_PREFIX}{store.as_posix()}/{DATABASE_FILE}"


def resolve_tracking_uri(explicit: str | None) -> str:
    """The tracking URI to use: ``explicit`` if given, else ``$MLFLOW_TRACKING_URI`` if set, else the default.

    Raises:
        InvalidParameter: ``explicit`` is given but empty or not a string.
    """
    if explicit is not None:
        if not isinstance(explicit, str) or not explicit.strip():
            raise InvalidParameter(f"tracking URI must be a non-empty string, got {explicit!r}")
        return explicit
    from_env = os.environ.get(TRACKING_URI_ENV, "").strip()
    return from_env or default_tracking_uri()


def sqlite_database(tracking_uri: str) -> Path | None:
    """The database file of a local ``sqlite:///`` URI (None for any other kind of store, or an in-memory one)."""
    if not tracking_uri.startswith(_SQLITE_PREFIX):
        return None
    path = tracking_uri[len(_SQLITE_PREFIX):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def prepare_store(tracking_uri: str) -> str | None:
    """Make a local SQLite store ready for MLflow and return its artifact root URI (None for other stores).

    Call it before MLflow opens the store: MLflow would create and migrate a missing database in place, unlocked
    (:mod:`dpaudit.tracking.embedded_store` says why that breaks and what is done instead). The artifact root of a
    local SQLite store is the ``artifacts`` folder next to the database, so that the whole store lives in one
    folder; other stores keep their own default artifact location.

    Raises:
        MirrorError: the local store cannot be made ready (the message says what to run).
    """
    database = sqlite_database(tracking_uri)
    if database is None:
        return None
    database = database.resolve()
    artifacts = database.parent / ARTIFACTS_DIR
    artifacts.mkdir(parents=True, exist_ok=True)
    from dpaudit.tracking.embedded_store import ensure_embedded_store  # it imports mirror, which imports us

    ensure_embedded_store(database, artifacts.as_uri())
    return artifacts.as_uri()
