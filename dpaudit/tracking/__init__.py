"""MLflow mirror of the ledger: sessions as runs, trials as nested runs, records as batched idempotent entities.

See docs/mlflow.md for what is mirrored, what never is, and the idempotency design.
"""

from dpaudit.public_values import CONFIDENTIAL_KEYS
from dpaudit.tracking.confidential import ConfidentialLog
from dpaudit.tracking.entities import KEY_FINGERPRINT_TAG, SPENT_KEY
from dpaudit.tracking.mirror import MirrorError, MlflowMirror
from dpaudit.tracking.store import default_tracking_uri, resolve_tracking_uri

__all__ = [
    "CONFIDENTIAL_KEYS",
    "KEY_FINGERPRINT_TAG",
    "SPENT_KEY",
    "ConfidentialLog",
    "MirrorError",
    "MlflowMirror",
    "default_tracking_uri",
    "resolve_tracking_uri",
]
