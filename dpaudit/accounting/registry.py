"""Accountants by name."""

from __future__ import annotations

from dpaudit.accounting.advanced import AdvancedComposition
from dpaudit.accounting.base import Accountant
from dpaudit.accounting.basic import BasicComposition
from dpaudit.accounting.pld import PldAccountant, recorded_fold
from dpaudit.accounting.prv import PrvAccountant
from dpaudit.accounting.rdp import RdpAccountant
from dpaudit.accounting.tightest import TightestAccountant
from dpaudit.errors import InvalidParameter

ACCOUNTANTS: dict[str, type[Accountant]] = {
    cls.name: cls
    for cls in (BasicComposition, AdvancedComposition, RdpAccountant, PldAccountant, PrvAccountant, TightestAccountant)
}
DEFAULT_ACCOUNTANT = "tightest"


def get_accountant(name: str, recorded_version: str | None = None) -> Accountant:
    """A new accountant of the named kind (per-spec caches are shared at module level).

    Args:
        name: the accountant's name.
        recorded_version: the ``accountant_version`` a certificate recorded, when recomputing its claim: a ``pld`` or
            ``tightest`` accountant then composes with the PLD fold it names (:func:`~dpaudit.accounting.pld.
            recorded_fold`), so an older certificate is recomputed bit for bit; other accountants have one version.

    Raises:
        InvalidParameter: an unknown name (the message lists the known ones).
        AccountingError: ``recorded_version`` names a PLD fold this code does not have.
    """
    cls = ACCOUNTANTS.get(name)
    if cls is None:
        raise InvalidParameter(f"unknown accountant {name!r}; known: {', '.join(sorted(ACCOUNTANTS))}")
    if recorded_version is not None and cls in (PldAccountant, TightestAccountant):
        return cls(recorded_fold(recorded_version))
    return cls()
