"""Exceptions raised by dpaudit.

Every error the command line can meet derives from :class:`DPAuditError`, so the CLI can turn it into a clear
message and a non-zero exit code without a traceback.
"""

from __future__ import annotations


class DPAuditError(Exception):
    """Base class of every error dpaudit raises on purpose."""


class InvalidParameter(DPAuditError, ValueError):
    """A privacy parameter or other input is out of its domain (negative ε, δ ≥ 1, NaN, ...)."""


class BudgetExceeded(DPAuditError):
    """A release would push the composed privacy loss past the session budget.

    Nothing was charged and nothing was released when this is raised.
    """


class UncoveredRelease(BudgetExceeded):
    """A release, AboveThreshold round or training run that its charge does not cover (:mod:`dpaudit.coverage`).

    One output more than the charge paid for, an output of another shape than the one charged (e.g. more
    coordinates), or a release against a charge with no release rule. Nothing was written when this is raised.
    """


class UnsupportedEvent(DPAuditError):
    """An accountant was asked to compose an event (or a mix of events) it does not model."""


class AccountingError(DPAuditError):
    """Accounting produced no sound bound (NaN, infinity, failed root-finding, ...)."""


class LedgerError(DPAuditError):
    """The ledger is unreadable, corrupted, or was written concurrently by another process."""


class PluginError(DPAuditError):
    """A plugin is unknown, failed to load, or broke the plugin contract."""


class VerificationError(DPAuditError):
    """An evidence bundle or run could not be read well enough to be verified."""


class TrustStoreError(VerificationError):
    """The trust store of pinned signing keys is unreadable, malformed, or writable by group or others."""


class ConfidentialStoreError(DPAuditError):
    """The confidential log's folder or file cannot be created or written, or is readable by others."""
