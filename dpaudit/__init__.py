"""dpaudit: privacy-accounting audit and provenance for differentially private tuning and training.

Public API::

    from dpaudit import Session, BudgetExceeded
    with Session(epsilon=1.0, delta=1e-6, name="my-study") as s:
        m = s.laplace(value, sensitivity=1.0, epsilon=0.1)

``Session``, ``Charge`` and ``PrivacyEngine`` are imported on first use (PEP 562), so that light commands and
subprocesses that need only the ledger or the errors do not pay for importing torch, Opacus and dp_accounting.
"""

from typing import Any

from dpaudit.errors import (
    AccountingError,
    BudgetExceeded,
    DPAuditError,
    InvalidParameter,
    LedgerError,
    PluginError,
    UncoveredRelease,
    UnsupportedEvent,
    VerificationError,
)
from dpaudit.sensitivity import Neighbouring, Sensitivity, declared, from_formula

_LAZY = {"Session": "dpaudit.session", "Charge": "dpaudit.session", "PrivacyEngine": "dpaudit.privacy_engine",
         "tune": "dpaudit.tuner", "SearchSpace": "dpaudit.tuning.space", "Parameter": "dpaudit.tuning.space"}

__all__ = [
    "AccountingError",
    "BudgetExceeded",
    "Charge",
    "DPAuditError",
    "InvalidParameter",
    "LedgerError",
    "Neighbouring",
    "Parameter",
    "PluginError",
    "PrivacyEngine",
    "SearchSpace",
    "Sensitivity",
    "Session",
    "UncoveredRelease",
    "UnsupportedEvent",
    "VerificationError",
    "declared",
    "from_formula",
    "tune",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")
