"""dpaudit: privacy-accounting audit and provenance for differentially private tuning and training.

Public API::

    from dpaudit import Session, BudgetExceeded
    with Session(epsilon=1.0, delta=1e-6, name="my-study") as s:
        m = s.laplace(value, sensitivity=1.0, epsilon=0.1)
"""

from dpaudit.errors import (
    AccountingError,
    BudgetExceeded,
    DPAuditError,
    InvalidParameter,
    LedgerError,
    PluginError,
    UnsupportedEvent,
    VerificationError,
)
from dpaudit.sensitivity import Neighbouring, Sensitivity, declared, from_formula
from dpaudit.session import Charge, Session

__all__ = [
    "AccountingError",
    "BudgetExceeded",
    "Charge",
    "DPAuditError",
    "InvalidParameter",
    "LedgerError",
    "Neighbouring",
    "PluginError",
    "Sensitivity",
    "Session",
    "UnsupportedEvent",
    "VerificationError",
    "declared",
    "from_formula",
]
