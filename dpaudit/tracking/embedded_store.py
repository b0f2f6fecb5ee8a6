"""The embedded SQLite store of the MLflow mirror: created once, atomically, and checked before use.

MLflow's ``SqlAlchemyStore`` creates and migrates a missing database in place, with no lock between processes
(``mlflow/store/tracking/sqlalchemy_store.py``: ``_all_tables_exist`` then ``_initialize_tables``). Several
processes opening their first session in a fresh folder then run the migrations against one file at the same
time, and a process killed while migrating leaves a database that no later session can open. Here:

* **once, under a lock**: a process that does not find a ready store takes an exclusive ``fcntl.flock`` on
  ``<database>.lock`` beside the database and looks again; only one process at a time creates, the others find
  the store ready when they get the lock (the lock is released by the kernel when its holder dies);
* **atomically**: the store is created and migrated in a temporary file in the same folder (MLflow's own
  ``SqlAlchemyStore``, so the schema, its alembic version and the default experiment are MLflow's), closed,
  ``fsync``-ed, then ``os.replace``-d into place: the database is absent or complete, never half-made; the
  temporary files of a creator that was killed are removed by the next one, under the lock;
* **checked**: a store is ready when its alembic version is this MLflow's head revision and the default
  experiment exists (two reads, no lock). Anything else is looked at under the lock: a database that is not
  readable SQLite, fails ``PRAGMA quick_check``, or holds no runs (a creation cut short by an older dpaudit or by
  MLflow itself) is moved aside (``<database>.broken-<UTC time>``, never deleted) and rebuilt empty; the ledger is
  the source of truth and ``dpaudit mirror sync RUN`` copies a run into the new store. A readable store that holds
  runs under another schema revision (an older MLflow, or a migration cut short) is left untouched and refused,
  with the two commands that fix it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path

from dpaudit.files import fsync_dir
from dpaudit.tracking.mirror import MirrorError

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
BROKEN_SUFFIX = ".broken-"
_CREATING = ".creating-"
_SIDECARS = ("-journal", "-wal", "-shm")
_BUSY_TIMEOUT_S = 20.0  # as MLflow's own sessions (PRAGMA busy_timeout = 20000)


class StoreHealth(Enum):
    """What a database file is, as far as the mirror is concerned."""

    MISSING = "missing"
    READY = "ready"
    INCOMPLETE = "incomplete"
    DAMAGED = "damaged"
    OUTDATED = "outdated"


@dataclass(frozen=True)
class StoreState:
    """The health of a database file and why (``detail`` names what was found, for messages)."""

    health: StoreHealth
    detail: str


@lru_cache(maxsize=1)
def schema_head() -> str:
    """The alembic head revision of the installed MLflow's tracking schema."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def inspect_database(database: Path, head: str, thorough: bool = False) -> StoreState:
    """The health of ``database`` against schema revision ``head``.

    The quick look (``thorough=False``) reads the alembic version and the default experiment: READY, MISSING, or
    INCOMPLETE for anything else. The thorough one, for a database that is not ready, also runs
    ``PRAGMA quick_check`` and counts the runs, to tell INCOMPLETE (nothing of value), DAMAGED (not readable) and
    OUTDATED (holds runs under another revision) apart.

    Raises:
        MirrorError: the database stayed locked by another process for longer than the busy timeout.
    """
    if not database.exists():
        return StoreState(StoreHealth.MISSING, "no database file")
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=rw", uri=True, timeout=_BUSY_TIMEOUT_S)) as db:
            return _classify(db, head, thorough)
    except sqlite3.DatabaseError as exc:
        if "locked" in str(exc):
            raise MirrorError(f"the MLflow store {database} is locked by another process: {exc}") from exc
        return StoreState(StoreHealth.DAMAGED, f"not a readable SQLite database ({exc})")


def _classify(db: sqlite3.Connection, head: str, thorough: bool) -> StoreState:
    revision = _scalar(db, "SELECT version_num FROM alembic_version")
    has_default = _scalar(db, "SELECT 1 FROM experiments WHERE experiment_id = 0") is not None
    if revision == head and has_default:
        return StoreState(StoreHealth.READY, f"schema {head}")
    found = f"schema {revision or 'unversioned'}{'' if has_default else ', no default experiment'}"
    if not thorough:
        return StoreState(StoreHealth.INCOMPLETE, found)
    check = db.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        return StoreState(StoreHealth.DAMAGED, f"PRAGMA quick_check: {check[0] if check else 'no answer'}")
    runs = _scalar(db, "SELECT COUNT(*) FROM runs") or 0
    if runs:
        return StoreState(StoreHealth.OUTDATED, f"{found}, {runs} run(s)")
    return StoreState(StoreHealth.INCOMPLETE, f"{found}, no runs")


def _scalar(db: sqlite3.Connection, query: str) -> object:
    """The first column of the first row of ``query``; None when there is none or the table does not exist."""
    try:
        row = db.execute(query).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc) or "no such column" in str(exc):
            return None
        raise
    return None if row is None else row[0]


@contextmanager
def _locked(database: Path) -> Iterator[None]:
    """Hold the exclusive lock ``<database>.lock`` (never deleted: removing a lock file races with its users)."""
    fd = os.open(database.with_name(database.name + LOCK_SUFFIX), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_embedded_store(database: Path, artifact_root: str) -> None:
    """Make ``database`` a ready MLflow tracking store, creating or rebuilding it if needed (module docstring).

    Args:
        database: the SQLite file; its folder must exist.
        artifact_root: URI of the store's artifact folder (the default experiment's artifact location).

    Raises:
        MirrorError: the store holds runs under another schema revision (the message says what to run), stayed
            locked past the busy timeout, or could not be created.
    """
    head = schema_head()
    if inspect_database(database, head).health is StoreHealth.READY:
        return
    with _locked(database):
        state = inspect_database(database, head, thorough=True)
        if state.health is StoreHealth.READY:
            return
        if state.health is StoreHealth.OUTDATED:
            uri = f"sqlite:///{database}"
            raise MirrorError(
                f"the MLflow store {database} ({state.detail}) does not have this MLflow's schema {head}. "
                f"Back it up and run `mlflow db upgrade {uri}`; or move it aside, and the next session creates a "
                f"new store: then run `dpaudit mirror sync RUN` for each run to copy it from its ledger.")
        _remove_creations(database)
        _dispose_engines(database)  # also when missing: a store deleted under this process, being rebuilt
        aside = _move_aside(database)  # when missing, a journal left without its database: never apply it to ours
        _create(database, artifact_root, head)
        if state.health is not StoreHealth.MISSING:
            logger.warning("the MLflow store %s was %s (%s): moved it to %s and created a new one; the ledgers are "
                           "complete, `dpaudit mirror sync RUN` copies a run into the new store",
                           database, state.health.value, state.detail, aside)


def _remove_creations(database: Path) -> None:
    """Remove the temporary files of creators that died (called under the lock: no creator is alive)."""
    for leftover in database.parent.glob(f".{database.name}{_CREATING}*"):
        leftover.unlink(missing_ok=True)


def _dispose_engines(database: Path) -> None:
    """Close this process's cached MLflow engines on ``database``: their pooled connections would go on reading the
    file moved aside or deleted (MLflow keeps one engine per URI for the life of the process)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for engine in list(SqlAlchemyStore._engine_map.values()):
        name = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
        if name and name != ":memory:" and Path(name).resolve() == database:
            engine.dispose()


def _move_aside(database: Path) -> Path:
    """Rename ``database`` and its SQLite sidecar files (those that exist) to ``<database>.broken-<UTC time>``."""
    aside = database.with_name(f"{database.name}{BROKEN_SUFFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
                               f"-{os.getpid()}")
    for suffix in ("", *_SIDECARS):
        with suppress(FileNotFoundError):
            os.replace(database.with_name(database.name + suffix), aside.with_name(aside.name + suffix))
    fsync_dir(database.parent)
    return aside


def _create(database: Path, artifact_root: str, head: str) -> None:
    """Create and migrate the store in a temporary file beside ``database``, check it, then rename it into place."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    tmp = database.with_name(f".{database.name}{_CREATING}{os.getpid()}-{os.urandom(4).hex()}")
    uri = f"sqlite:///{tmp}"
    try:
        try:
            SqlAlchemyStore(uri, artifact_root)
        finally:  # MLflow caches an engine per URI: close it, its file is about to be renamed or removed
            engine = SqlAlchemyStore._engine_map.pop(uri, None)
            if engine is not None:
                engine.dispose()
        made = inspect_database(tmp, head, thorough=True)
        if made.health is not StoreHealth.READY:
            raise MirrorError(f"the new MLflow store is not ready: {made.detail}")
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, database)
        fsync_dir(database.parent)
    except MirrorError:
        raise
    except Exception as exc:
        raise MirrorError(f"cannot create the MLflow store {database}: {exc}") from exc
    finally:
        for suffix in ("", *_SIDECARS):
            tmp.with_name(tmp.name + suffix).unlink(missing_ok=True)
