"""Accountants by name."""

from __future__ import annotations

import pytest

from dpaudit.accounting import ACCOUNTANTS, DEFAULT_ACCOUNTANT, TightestAccountant, get_accountant
from dpaudit.errors import InvalidParameter


def test_names_and_default():
    assert sorted(ACCOUNTANTS) == ["advanced", "basic", "pld", "prv", "rdp", "tightest"]
    assert DEFAULT_ACCOUNTANT == "tightest"
    assert isinstance(get_accountant(DEFAULT_ACCOUNTANT), TightestAccountant)
    for name in ACCOUNTANTS:
        acc = get_accountant(name)
        # pld/4: the canonical fold by binary digits on two grids; prv/2: the overflow-safe epsilon sum
        # (docs/accounting.md)
        version = {"pld": 4, "prv": 2}.get(name, 1)
        assert acc.name == name and acc.version().startswith(f"{name}/{version}")


def test_unknown_name_lists_known_ones():
    with pytest.raises(InvalidParameter, match="advanced, basic, pld, prv, rdp, tightest"):
        get_accountant("moments")
