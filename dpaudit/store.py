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
from dpaudit.errors import LedgerError
from dpaudit.files import create_once

LEDGER = "ledger.jsonl"
CERTIFICATE = "certificate.json"
PUBLIC_KEY = "public_key.pem"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
STORE_FILE = "store.json"
KEYS_DIR = "keys"
TRANSPARENCY_DIR = "transparency"
STORE_FORMAT = "dpaudit-store/1"

_STORE_ID = re.compile(r"[0-9a-f]{32}")


def store_root(store: Path | str | None = None) -> Path:
    """The run store root folder (not created here)."""
    if store is not None:
        return Path(store)
    return Path(os.environ.get("DPAUDIT_HOME", "dpaudit_runs"))


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
    if not path.exists():
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
