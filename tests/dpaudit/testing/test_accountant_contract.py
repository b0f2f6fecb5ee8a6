"""The shipped accountant contract (dpaudit.testing.AccountantContract): run on every built-in accountant, and shown
to catch accountants that break it.

References: pure-ε composition is exact (basic composition, Dwork & Roth 2014, Thm. 3.16); DP-SGD values come from
dp_accounting 0.x's own RDP and PLD accountants, an independent implementation (rel. tolerance 2 %, which covers
the different order grids and PLD discretisations; the tests of dpaudit/accounting/ hold the tight comparisons).
"""

from __future__ import annotations

import dp_accounting as dpa
import pytest
from dp_accounting import pld as dpa_pld
from dp_accounting import rdp as dpa_rdp

from dpaudit.accounting import (
    AdvancedComposition,
    BasicComposition,
    PldAccountant,
    PrvAccountant,
    RdpAccountant,
    TightestAccountant,
)
from dpaudit.accounting.charges import LeafSpec
from dpaudit.events import PrivacyEvent, SelfComposedEvent, compose
from dpaudit.testing import AccountantContract, Reference
from dpaudit.testing.events import dpsgd_event, gaussian_event, laplace_event

LAPLACE = laplace_event(0.5)
LAPLACE_3 = SelfComposedEvent(event=LAPLACE, count=3)
GAUSSIAN = gaussian_event(1.0, 1e-6)
DPSGD = dpsgd_event(0.01, 1.0, 100)
MIXED_RELATIONS = compose([LAPLACE, laplace_event(0.5, neighbouring="replace_one")])


def _dp_accounting(accountant: dpa.PrivacyAccountant, delta: float = 1e-6) -> float:
    accountant.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 100))
    return accountant.get_epsilon(delta)


PURE = (Reference(LAPLACE, 1e-6, 0.5, 1e-12, "one 0.5-DP release"),
        Reference(LAPLACE_3, 1e-6, 1.5, 1e-12, "basic composition, Dwork & Roth 2014, Thm. 3.16"))
DPSGD_RDP = Reference(DPSGD, 1e-6, _dp_accounting(dpa_rdp.RdpAccountant()), 0.02, "dp_accounting RdpAccountant")
DPSGD_PLD = Reference(DPSGD, 1e-6, _dp_accounting(dpa_pld.PLDAccountant()), 0.02, "dp_accounting PLDAccountant")


class TestBasicComposition(AccountantContract):
    accountant = BasicComposition()
    supported = (LAPLACE, GAUSSIAN)
    unsupported = (DPSGD, MIXED_RELATIONS)
    references = PURE


class TestAdvancedComposition(AccountantContract):
    accountant = AdvancedComposition()
    supported = (LAPLACE, GAUSSIAN)
    unsupported = (DPSGD, MIXED_RELATIONS)
    references = PURE[:1]


class TestRdpAccountant(AccountantContract):
    accountant = RdpAccountant()
    supported = (LAPLACE, GAUSSIAN, DPSGD)
    unsupported = (MIXED_RELATIONS,)
    references = (DPSGD_RDP,)


class TestPldAccountant(AccountantContract):
    accountant = PldAccountant()
    supported = (LAPLACE, GAUSSIAN, DPSGD)
    unsupported = (MIXED_RELATIONS,)
    references = (DPSGD_PLD,)


class TestPrvAccountant(AccountantContract):
    accountant = PrvAccountant()
    supported = (DPSGD,)
    unsupported = (LAPLACE, MIXED_RELATIONS)
    references = (DPSGD_PLD,)


class TestTightestAccountant(AccountantContract):
    accountant = TightestAccountant()
    supported = (LAPLACE, GAUSSIAN, DPSGD)
    unsupported = (MIXED_RELATIONS,)
    references = (Reference(LAPLACE_3, 1e-6, 1.5, 1e-4, "basic composition; at delta > 0 the PLD may be a little "
                            "below the pure epsilon"), DPSGD_PLD)


# --- the contract catches broken accountants ------------------------------------------------------------------


class _HalvedBasic(BasicComposition):
    """Reports half of basic composition: an under-report, below the true ε."""

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        return super()._epsilon_for(counts, delta) / 2


class _RisingInDelta(BasicComposition):
    """Grows with δ: a larger δ should never need a larger ε."""

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        return super()._epsilon_for(counts, delta) + delta


class _Shrinking(BasicComposition):
    """Divides by the squared number of releases: composing more lowers ε."""

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        return super()._epsilon_for(counts, delta) / sum(counts.values()) ** 2


class _ClaimsEverything(BasicComposition):
    """Says it supports every event, and then still refuses some."""

    def supports(self, event: PrivacyEvent) -> bool:
        return True


def _contract(accountant, **attributes) -> AccountantContract:
    return type("Contract", (AccountantContract,), {"accountant": accountant, "supported": (LAPLACE,),
                                                    **attributes})()


@pytest.mark.parametrize(("accountant", "attributes", "check", "message"), [
    (_HalvedBasic(), {"references": PURE}, "test_matches_references", "reference"),
    (_RisingInDelta(), {}, "test_epsilon_is_non_increasing_in_delta", "rises with delta"),
    (_Shrinking(), {}, "test_epsilon_is_non_decreasing_in_composition", "compositions give"),
    (_ClaimsEverything(), {"unsupported": (DPSGD,)}, "test_refuses_unsupported_events", "claims to support"),
    (BasicComposition(), {"supported": (DPSGD,)}, "test_supports_before_compose", "does not support"),
    (BasicComposition(), {"supported": ()}, "test_declares_events_to_check", "at least one"),
])
def test_the_contract_catches_a_broken_accountant(accountant, attributes: dict, check: str, message: str) -> None:
    contract = _contract(accountant, **attributes)
    with pytest.raises(AssertionError, match=message):
        getattr(contract, check)()


@pytest.mark.parametrize("check", [name for name in dir(AccountantContract) if name.startswith("test_")])
def test_the_same_checks_pass_on_the_unbroken_accountant(check: str) -> None:
    """The control for the test above: each check passes on BasicComposition with the same attributes."""
    getattr(_contract(BasicComposition(), references=PURE, unsupported=(DPSGD,)), check)()
