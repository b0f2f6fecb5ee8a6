"""Advanced composition for heterogeneous (ε_i, δ_i)-DP mechanisms.

The theorem used is Kairouz, Oh & Viswanath 2015 (ICML; JMLR 2017 "The composition theorem for differential
privacy"), Thm. 3.5, third bound: for any δ' ∈ (0, 1], the adaptive composition of (ε_i, δ_i)-DP mechanisms is
(ε', 1 − (1 − δ') Π(1 − δ_i))-DP, hence (ε', δ' + Σ δ_i)-DP, with

    ε' = Σ ε_i · (e^{ε_i} − 1)/(e^{ε_i} + 1) + sqrt(2 ln(1/δ') · Σ ε_i²).

It sharpens Dwork, Rothblum & Vadhan 2010 (Thm. III.3, mean term ε_i(e^{ε_i} − 1)) by bounding the mean privacy
loss by the KL divergence of randomized response, ε tanh(ε/2) ≤ ε(e^ε − 1); the deviation term is Azuma's
inequality for a privacy-loss martingale with increments in [−ε_i, ε_i]. Basic composition is also valid, so the
accountant returns min(ε', Σ ε_i). The δ budget is split as δ' = δ − Σ δ_i. Repeat-and-select events are
refused (the basic and RDP accountants bound them).
"""

from __future__ import annotations

import math

from dpaudit.accounting.base import Accountant, DeltaUnreachable, package_versions
from dpaudit.accounting.basic import approximate_dp_charge, charge_sums, unsupported_without_charge
from dpaudit.accounting.charges import LeafSpec, RepeatSelectSpec


def advanced_epsilon(charges: list[tuple[float, int]], delta_prime: float) -> float:
    """Kairouz, Oh & Viswanath 2015, Thm. 3.5 (third bound) for ``k_i`` applications of ε_i-DP mechanisms.

    Args:
        charges: (ε_i, k_i) pairs.
        delta_prime: δ' ∈ (0, 1).
    """
    mean = math.fsum(k * e * math.tanh(e / 2.0) for e, k in charges)
    square = math.fsum(k * e * e for e, k in charges)
    return mean + math.sqrt(2.0 * math.log(1.0 / delta_prime) * square)


class AdvancedComposition(Accountant):
    """min(KOV 2015 Thm. 3.5, basic composition) with δ' = δ − Σ δ_i."""

    name = "advanced"

    def version(self) -> str:
        return f"advanced/1 ({package_versions('dpaudit')})"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        if any(isinstance(s, RepeatSelectSpec) for s in counts):
            return "repeat-and-select is bounded by the rdp (Papernot & Steinke) and basic (Liu & Talwar) accountants"
        return unsupported_without_charge(counts)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        basic, spent_delta = charge_sums(counts)
        delta_prime = delta - spent_delta
        if delta_prime < 0:
            raise DeltaUnreachable(
                f"advanced composition: the leaves already spend delta = {spent_delta!r} > the requested {delta!r}"
            )
        if delta_prime == 0:
            return basic
        charges = [(approximate_dp_charge(s)[0], k) for s, k in counts.items()]
        return min(advanced_epsilon(charges, delta_prime), basic)
