"""MLflow mirror of the ledger: sessions as runs, trials as nested runs, records as batched idempotent entities.

See docs/mlflow.md for what is mirrored, what never is, and the idempotency design.

The names below are imported on first use (PEP 562), so that a session that does not mirror
(:mod:`dpaudit.tracking.session_mirror`) does not pay for importing MLflow.
"""

from importlib import import_module
from typing import Any

_LAZY = {
    "CONFIDENTIAL_KEYS": "dpaudit.public_values",
    "ConfidentialLog": "dpaudit.tracking.confidential",
    "KEY_FINGERPRINT_TAG": "dpaudit.tracking.run_page",
    "ODOMETER_KEY": "dpaudit.tracking.entities",
    "RUN_ID_TAG": "dpaudit.tracking.run_page",
    "SPENT_KEY": "dpaudit.tracking.entities",
    "MirrorError": "dpaudit.tracking.mirror",
    "MlflowMirror": "dpaudit.tracking.mirror",
    "default_tracking_uri": "dpaudit.tracking.store",
    "resolve_tracking_uri": "dpaudit.tracking.store",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dpaudit.tracking' has no attribute {name!r}")
