"""The confidential log: raw, NON-private values, kept in their own file, never in the MLflow tracking store.

Debugging a private tuning run sometimes needs the true (unnoised) scores. Logging them into MLflow would put them
in the database that ``dpaudit ui`` (or a team's tracking server) serves to whoever reaches its port, and no
certificate covers them. So they go, only on request, into a SQLite file of the run folder,
``<run folder>/confidential/log.sqlite``: the folder is created with mode 0700 and the file with mode 0600 (SQLite
gives its journal the database's mode), neither is attached to the MLflow run (only the run folder's top-level
files are) nor exported in an evidence bundle, and the file's ``meta`` table says what it is. Nothing in dpaudit
creates it unless a :class:`ConfidentialLog` is constructed. The randtune commitment openings share the folder
(:func:`write_private`).
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

from dpaudit.errors import ConfidentialStoreError, InvalidParameter

FOLDER = "confidential"
LOG_FILE = "log.sqlite"
LOCATION = f"{FOLDER}/{LOG_FILE}"
"""Where the log lives, relative to the run folder (the certificate names it)."""
FOLDER_MODE = 0o700
FILE_MODE = 0o600
DESCRIPTION = (
    "CONFIDENTIAL. The values in this file are NOT differentially private: they are raw, data-dependent values "
    "logged for debugging, outside the release and outside every dpaudit privacy certificate. Do not share, publish "
    "or export them."
)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS value (run_name TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL, "
    "value REAL NOT NULL, time REAL NOT NULL)",
)


@dataclass(frozen=True)
class ConfidentialValue:
    """One logged value: ``value`` of ``key`` at ``step`` in the log's run ``run_name``, at ``time`` (Unix s)."""

    run_name: str
    key: str
    step: int
    value: float
    time: float


def private_folder(run_dir: Path) -> Path:
    """``<run_dir>/confidential``, created with mode 0700 (an existing one is tightened to it).

    Raises:
        ConfidentialStoreError: it is a symlink or not a folder, or cannot be created.
    """
    folder = Path(run_dir) / FOLDER
    try:
        folder.mkdir(mode=FOLDER_MODE, exist_ok=True)
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode):
            raise ConfidentialStoreError(f"{folder} is not a folder (a symlink or a file): refusing to write there")
        if stat.S_IMODE(info.st_mode) != FOLDER_MODE:
            os.chmod(folder, FOLDER_MODE)  # mkdir's mode is masked by the umask
    except OSError as exc:
        raise ConfidentialStoreError(f"cannot create the confidential folder {folder}: {exc}") from exc
    return folder


def write_private(run_dir: Path, name: str, text: str) -> Path:
    """Write ``text`` to the new file ``<run_dir>/confidential/<name>``, mode 0600 from its creation.

    Raises:
        ConfidentialStoreError: the file exists already or cannot be written.
    """
    path = private_folder(run_dir) / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise ConfidentialStoreError(f"cannot write the confidential file {path}: {exc}") from exc
    return path


def _create_log_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 before SQLite opens it (SQLite would use the umask's 0644)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE))
        info = path.lstat()
    except OSError as exc:
        raise ConfidentialStoreError(f"cannot create the confidential log {path}: {exc}") from exc
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ConfidentialStoreError(f"{path} is readable by others (mode {stat.S_IMODE(info.st_mode):o}): make it "
                                     f"0600 (chmod 600 {path}) or move it away")


def _check_entry(run_name: str, values: Mapping[str, float], step: int) -> list[tuple[str, float]]:
    if not isinstance(run_name, str) or not run_name.strip():
        raise InvalidParameter(f"run name must be a non-empty string, got {run_name!r}")
    if not isinstance(values, Mapping) or not values:
        raise InvalidParameter("values must be a non-empty mapping of name -> number")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidParameter(f"step must be a whole number >= 0, got {step!r}")
    checked = []
    for key, value in values.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidParameter(f"a confidential value's name must be a non-empty string, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise InvalidParameter(f"confidential value {key!r} must be a finite number, got {value!r}")
        checked.append((key, float(value)))
    return checked


class ConfidentialLog:
    """Raw values of one run, in ``<run_dir>/confidential/log.sqlite`` (created here, mode 0600).

    Args:
        run_dir: the run folder.

    Raises:
        ConfidentialStoreError: the folder or file cannot be created, or the file is readable by others.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = private_folder(run_dir) / LOG_FILE
        _create_log_file(self.path)
        self._lock = threading.Lock()
        with self._transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('description', ?)", (DESCRIPTION,))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One committed transaction on a fresh connection (thread-safe; SQLite syncs the commit to disk)."""
        with self._lock:
            try:
                db = sqlite3.connect(self.path)
                try:
                    with db:
                        yield db
                finally:
                    db.close()
            except sqlite3.Error as exc:
                raise ConfidentialStoreError(f"cannot use the confidential log {self.path}: {exc}") from exc

    def log(self, run_name: str, values: Mapping[str, float], step: int) -> None:
        """Log ``values`` at ``step`` for ``run_name``, committed before returning.

        Raises:
            InvalidParameter: empty run name or values, a bad name, a non-finite value, or a bad step.
            ConfidentialStoreError: the file could not be written.
        """
        now = time.time()
        rows = [(run_name, key, step, value, now) for key, value in _check_entry(run_name, values, step)]
        with self._transaction() as db:
            db.executemany("INSERT INTO value VALUES (?, ?, ?, ?, ?)", rows)

    def read(self) -> list[ConfidentialValue]:
        """Every logged value, in logging order."""
        with self._transaction() as db:
            rows = db.execute("SELECT run_name, key, step, value, time FROM value ORDER BY rowid").fetchall()
        return [ConfidentialValue(*row) for row in rows]
