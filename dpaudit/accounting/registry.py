"""Accountants by name."""

from __future__ import annotations

from dpaudit.accounting.advanced import AdvancedComposition
from dpaudit.accounting.base import Accountant
from dpaudit.accounting.basic import BasicComposition
from dpaudit.accounting.pld import PldAccountant
from dpaudit.accounting.prv import PrvAccountant
from dpaudit.accounting.rdp import RdpAccountant
from dpaudit.accounting.tightest import TightestAccountant
from dpaudit.errors import InvalidParameter

ACCOUNTANTS: dict[str, type[Accountant]] = {
    cls.name: cls
    for cls in (BasicComposition, AdvancedComposition, RdpAccountant, PldAccountant, PrvAccountant, TightestAccountant)
}
DEFAULT_ACCOUNTANT = "tightest"


def get_accountant(name: str) -> Accountant:
    """A new accountant of the named kind (per-spec caches are shared at module level).

    Raises:
        InvalidParameter: an unknown name (the message lists the known ones).
    """
    cls = ACCOUNTANTS.get(name)
    if cls is None:
        raise InvalidParameter(f"unknown accountant {name!r}; known: {', '.join(sorted(ACCOUNTANTS))}")
    return cls()
