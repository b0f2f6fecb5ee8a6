"""The local run store: one folder per session holding its ledger, certificate, report and public key.

Root: the ``store`` argument, else ``$DPAUDIT_HOME``, else ``./dpaudit_runs``. The signing key lives in
``<root>/keys/signing_key.pem`` unless a key path is given (see docs/ledger.md for the limits of that choice).
``<root>/store.json`` names the store by a random id created once (every ledger's ``open`` record and every
certificate name it, binding a run to its store); ``<root>/transparency/`` holds the store's log of closed
certificates (:mod:`dpaudit.transparency`).
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from dpaudit import canonical
from dpaudit.errors import InvalidParameter, LedgerError, VerificationError
from dpaudit.files import create_once

LEDGER = "ledger.jsonl"
CERTIFICATE = "certificate.json"
PUBLIC_KEY = "public_key.pem"
MAX_PUBLIC_KEY_BYTES = 64 * 1024
"""The largest ``public_key.pem`` read (an Ed25519 PEM key is 113 bytes)."""
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
STORE_FILE = "store.json"
KEYS_DIR = "keys"
TRANSPARENCY_DIR = "transparency"
STORE_FORMAT = "dpaudit-store/1"

_STORE_ID = re.compile(r"[0-9a-f]{32}")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def store_root(store: Path | str | None = None) -> Path:
    """The run store root folder (not created here)."""
    if store is not None:
        return Path(store)
    return Path(os.environ.get("DPAUDIT_HOME", "dpaudit_runs"))


def is_run_id(value: object) -> bool:
    """Whether ``value`` is a valid run id, the name of one folder in a store.

    A run id is 1 to 128 characters from ``[A-Za-z0-9_.-]``, starting with a letter or digit, and without ``..``:
    no path separator, no NUL, no ``.`` / ``..``, so joining it to a store root can never leave the store (MLflow
    run ids and the session's own hex ids qualify).
    """
    return isinstance(value, str) and _RUN_ID.fullmatch(value) is not None and ".." not in value


def validate_run_id(run_id: object) -> str:
    """``run_id`` if it is a valid run id (:func:`is_run_id`).

    Raises:
        InvalidParameter: anything else, with the reason.
    """
    if not is_run_id(run_id):
        shown = repr(run_id)[:80] if isinstance(run_id, str) else type(run_id).__name__
        raise InvalidParameter(f"invalid run id {shown}: a run id is 1-128 characters from A-Z a-z 0-9 _ . -, starts "
                               "with a letter or digit and holds no '..' (no path separators)")
    return run_id


def run_folder(root: Path, run_id: str) -> Path:
    """The folder of run ``run_id`` in the store at ``root`` (not created here), checked to resolve inside it.

    Raises:
        InvalidParameter: ``run_id`` is not a valid run id, or its folder resolves outside the store (a symlink).
    """
    root = Path(root)
    folder = root / validate_run_id(run_id)
    if not folder.resolve().is_relative_to(root.resolve()):
        raise InvalidParameter(f"run folder {folder} resolves outside the store {root} (a symbolic link?)")
    return folder


def default_key_path(root: Path) -> Path:
    """Where the store's signing key lives."""
    return root / KEYS_DIR / "signing_key.pem"


def is_store(folder: Path) -> bool:
    """Whether ``folder`` is a run store root: it has a store id, a transparency log or a keys folder.

    Any one suffices, so deleting the store id and the log does not make a store's run pass for an exported
    bundle (whose folder name and log ``verify`` cannot check).
    """
    folder = Path(folder)
    return any((folder / name).exists() for name in (STORE_FILE, TRANSPARENCY_DIR, KEYS_DIR))


def read_store_id(root: Path) -> str | None:
    """The id of the store at ``root``, or None if it has no ``store.json`` (not a store, or an old one).

    Raises:
        LedgerError: ``store.json`` exists but is unreadable or malformed.
    """
    path = Path(root) / STORE_FILE
    if not os.path.lexists(path):
        return None
    data = canonical.read_object(path, LedgerError)
    store_id = data.get("store_id")
    if data.get("format") != STORE_FORMAT or not isinstance(store_id, str) or not _STORE_ID.fullmatch(store_id):
        raise LedgerError(f"{path} is not a {STORE_FORMAT} file with a 32-hex-digit store_id")
    return store_id


def load_or_create_store_id(root: Path) -> str:
    """The id of the store at ``root``, created (128 random bits, once, race-safe) if the store has none.

    Raises:
        LedgerError: ``store.json`` is malformed or cannot be written.
    """
    root = Path(root)
    found = read_store_id(root)
    if found is not None:
        return found
    body = canonical.encode({"format": STORE_FORMAT, "store_id": secrets.token_hex(16)}) + b"\n"
    try:
        create_once(root / STORE_FILE, body)
    except OSError as err:
        raise LedgerError(f"cannot create {root / STORE_FILE}: {err}") from err
    found = read_store_id(root)
    assert found is not None
    return found


def read_certificate(run_dir: Path) -> dict | None:
    """The run folder's certificate, None when there is none yet (the session is still open).

    Raises:
        VerificationError: it is not a regular file or not strict JSON.
    """
    path = Path(run_dir) / CERTIFICATE
    return canonical.read_object(path, VerificationError) if os.path.lexists(path) else None
