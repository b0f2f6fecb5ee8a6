"""Basic composition: the ε's and δ's of adaptively composed (ε_i, δ_i)-DP mechanisms add up.

Dwork, McSherry, Nissim & Smith 2006; for (ε, δ) and adaptive composition Dwork, Kenthapadi, McSherry, Mironov &
Naor 2006 (Dwork & Roth 2014, Thm. 3.16). Each leaf is charged its pure-DP ε from the privacy map (Laplace,
AboveThreshold, exponential: δ_i = 0) or, for the discrete Gaussian, the (ε, δ) it was calibrated for. Subsampled
Gaussian steps declare no (ε, δ) charge and are refused.
"""

from __future__ import annotations

import math

from dpaudit.accounting.base import Accountant, DeltaUnreachable, package_versions
from dpaudit.accounting.charges import DiscreteGaussianSpec, LeafSpec, PureSpec


def approximate_dp_charge(spec: LeafSpec) -> tuple[float, float] | None:
    """The (ε, δ) charge of one application, or None for a leaf that declares none (subsampled Gaussians)."""
    if isinstance(spec, PureSpec):
        return spec.epsilon, 0.0
    if isinstance(spec, DiscreteGaussianSpec):
        return spec.declared_epsilon, spec.declared_delta
    return None


def unsupported_without_charge(counts: dict[LeafSpec, int]) -> str | None:
    """The refusal reason shared by the charge-based accountants."""
    for spec in counts:
        if approximate_dp_charge(spec) is None:
            return f"{type(spec).__name__} declares no (epsilon, delta) charge; use rdp, pld or prv"
    return None


def charge_sums(counts: dict[LeafSpec, int]) -> tuple[float, float]:
    """(Σ k_i ε_i, Σ k_i δ_i) over the tally, with exactly rounded float sums (``math.fsum``)."""
    charges = [(approximate_dp_charge(s), k) for s, k in counts.items()]
    return math.fsum(c[0] * k for c, k in charges), math.fsum(c[1] * k for c, k in charges)


class BasicComposition(Accountant):
    """ε = Σ ε_i when Σ δ_i ≤ δ (Dwork & Roth 2014, Thm. 3.16)."""

    name = "basic"

    def version(self) -> str:
        return f"basic/1 ({package_versions('dpaudit')})"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        return unsupported_without_charge(counts)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        eps, spent_delta = charge_sums(counts)
        if spent_delta > delta:
            raise DeltaUnreachable(
                f"basic composition spends delta = {spent_delta!r} > the requested {delta!r}; "
                "use the rdp or pld accountant (they convert the noise, not the declared delta)"
            )
        return eps
