"""The local run store: one folder per session holding its ledger, certificate, report and public key.

Root: the ``store`` argument, else ``$DPAUDIT_HOME``, else ``./dpaudit_runs``. The signing key lives in
``<root>/keys/signing_key.pem`` unless a key path is given (see docs/ledger.md for the limits of that choice).
"""

from __future__ import annotations

import os
from pathlib import Path

LEDGER = "ledger.jsonl"
CERTIFICATE = "certificate.json"
PUBLIC_KEY = "public_key.pem"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"


def store_root(store: Path | str | None = None) -> Path:
    """The run store root folder (not created here)."""
    if store is not None:
        return Path(store)
    return Path(os.environ.get("DPAUDIT_HOME", "dpaudit_runs"))


def default_key_path(root: Path) -> Path:
    """Where the store's signing key lives."""
    return root / "keys" / "signing_key.pem"
