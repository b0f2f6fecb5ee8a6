"""The tightest accountant: never looser than RDP, names its source, skips only what it may skip."""

from __future__ import annotations

import contextlib

import pytest

from dpaudit.accounting import DeltaUnreachable, RdpAccountant, TightestAccountant
from dpaudit.accounting.pld import CURRENT_FOLD
from dpaudit.accounting.tightest import MEMBERS
from dpaudit.errors import AccountingError
from dpaudit.events import ComposedEvent, SelfComposedEvent

from ._events import dpsgd, dpsgd_without_replacement, exponential, gaussian, laplace

EVENTS = {
    "dpsgd": dpsgd(0.01, 1.0, 300),
    "pure": ComposedEvent(events=(laplace(0.1),) * 20 + (exponential(0.3),)),
    "one laplace": laplace(1.0),
    "mixed": ComposedEvent(events=(laplace(0.2), gaussian(4.0), dpsgd(0.02, 1.5, 50))),
    "wor": dpsgd_without_replacement(100, 10_000, 1.2, 200),
    "gaussian 3-d": SelfComposedEvent(event=gaussian(6.0, dimension=3), count=4),
}


@pytest.mark.parametrize("name", sorted(EVENTS))
@pytest.mark.parametrize("delta", [0.0, 1e-6, 1e-3])
def test_never_looser_than_rdp_and_equal_to_named_member(name, delta):
    event = EVENTS[name]
    tight = TightestAccountant()
    try:
        rdp = RdpAccountant().epsilon(event, delta)
    except AccountingError:
        with pytest.raises(AccountingError):
            tight.epsilon(event, delta)
        return
    eps, source = tight.epsilon_with_source(event, delta)
    assert eps <= rdp
    assert eps == tight.epsilon(event, delta)
    member = next(m for m in tight.members if m.name == source)
    assert member.epsilon(event, delta) == eps
    for m in tight.members:
        if m.supports(event):
            with contextlib.suppress(DeltaUnreachable):
                assert eps <= m.epsilon(event, delta)


def test_sources():
    tight = TightestAccountant()
    assert tight.epsilon_with_source(laplace(1.0), 0.0)[1] == "rdp"  # ties go to the first member
    assert tight.epsilon_with_source(dpsgd(0.01, 1.0, 300), 1e-5)[1] == "pld"
    assert [cls.name for cls in MEMBERS] == ["rdp", "pld", "advanced", "basic"]  # prv: see accounting.prv
    assert "rdp/1" in tight.version() and CURRENT_FOLD in tight.version()
