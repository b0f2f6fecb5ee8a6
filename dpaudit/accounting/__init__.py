"""Accountants: compose privacy events into a sound (ε, δ) upper bound (docs/accounting.md).

``get_accountant(name)`` gives one of ``basic``, ``advanced``, ``rdp``, ``pld``, ``prv`` or ``tightest`` (the
default: the minimum of the others that apply). :func:`recheck` is the verifier's independent recomputation.
"""

from dpaudit.accounting.advanced import AdvancedComposition
from dpaudit.accounting.base import Accountant, DeltaUnreachable
from dpaudit.accounting.basic import BasicComposition
from dpaudit.accounting.pld import PldAccountant
from dpaudit.accounting.prv import PrvAccountant
from dpaudit.accounting.rdp import RdpAccountant
from dpaudit.accounting.recheck import Recheck, recheck
from dpaudit.accounting.registry import ACCOUNTANTS, DEFAULT_ACCOUNTANT, get_accountant
from dpaudit.accounting.tightest import TightestAccountant

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_ACCOUNTANT",
    "Accountant",
    "AdvancedComposition",
    "BasicComposition",
    "DeltaUnreachable",
    "PldAccountant",
    "PrvAccountant",
    "RdpAccountant",
    "Recheck",
    "TightestAccountant",
    "get_accountant",
    "recheck",
]
