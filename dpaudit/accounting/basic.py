"""Basic composition: the ε's and δ's of adaptively composed (ε_i, δ_i)-DP mechanisms add up.

Dwork, McSherry, Nissim & Smith 2006; for (ε, δ) and adaptive composition Dwork, Kenthapadi, McSherry, Mironov &
Naor 2006 (Dwork & Roth 2014, Thm. 3.16). Each leaf is charged its pure-DP ε from the privacy map (Laplace,
AboveThreshold, exponential, randomized response: δ_i = 0) or, for the discrete Gaussian, the (ε, δ) it was
calibrated for; a leaf whose sensitivity holds with probability 1 − δ_s adds δ_s to its δ_i. Subsampled Gaussian
steps declare no (ε, δ) charge and are refused. A repeat-and-select with a geometric number of runs of a
pure ε-DP base is charged 3ε (Liu & Talwar 2019, Thm. 3.4); any other repeat-and-select is refused (its bound is
an RDP statement, Papernot & Steinke 2022).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from dpaudit.accounting.base import Accountant, DeltaUnreachable, package_versions
from dpaudit.accounting.charges import ApproximateSpec, DiscreteGaussianSpec, LeafSpec, PureSpec, RepeatSelectSpec
from dpaudit.accounting.repeat_select import liu_talwar_epsilon


def _liu_talwar_charge(spec: RepeatSelectSpec) -> tuple[float, float] | None:
    """(3ε, 0) when K is geometric and the base is pure ε-DP by basic composition (Liu & Talwar 2019, Thm. 3.4)."""
    if not spec.is_geometric():
        return None
    charges = [(approximate_dp_charge(s), k) for s, k in spec.base]
    if any(c is None or c[1] != 0.0 for c, _ in charges):
        return None
    return liu_talwar_epsilon(sum_rounded_up([(c[0], k) for c, k in charges])), 0.0


#: the (ε, δ) charge of one application, by spec type; subsampled Gaussians declare none
_CHARGES: dict[type, Callable[[Any], tuple[float, float] | None]] = {
    PureSpec: lambda spec: (spec.epsilon, 0.0),
    DiscreteGaussianSpec: lambda spec: (spec.declared_epsilon, spec.declared_delta),
    ApproximateSpec: lambda spec: (spec.epsilon, spec.delta),
    RepeatSelectSpec: _liu_talwar_charge,
}


def approximate_dp_charge(spec: LeafSpec) -> tuple[float, float] | None:
    """The (ε, δ) charge of one application, or None for a leaf that declares none (subsampled Gaussians) and for a
    repeat-and-select that Liu & Talwar's theorem does not cover."""
    charge = _CHARGES.get(type(spec))
    return None if charge is None else charge(spec)


def unsupported_without_charge(counts: dict[LeafSpec, int]) -> str | None:
    """The refusal reason shared by the charge-based accountants."""
    for spec in counts:
        if isinstance(spec, RepeatSelectSpec) and approximate_dp_charge(spec) is None:
            return ("repeat-and-select has an (epsilon, 0) charge only for a geometric number of runs of a pure-DP "
                    "base (Liu & Talwar 2019, Thm. 3.4); use rdp")
        if approximate_dp_charge(spec) is None:
            return f"{type(spec).__name__} declares no (epsilon, delta) charge; use rdp, pld or prv"
    return None


def sum_rounded_up(terms: list[tuple[float, int]]) -> float:
    """Σ k·x over ``terms`` (x a float, k a count), rounded *upward*: the smallest float ≥ the exact rational sum.

    A nearest-rounded sum (``math.fsum``, or the float products k·x) can fall below the exact sum, e.g. 10⁴ charges
    of ε = 1e-4 sum to exactly 1.0 in floats but to 1 + 4.8·10⁻¹⁷ exactly (the float 1e-4 is above 10⁻⁴), so a
    filter comparing it with a budget of 1.0 would admit the last charge past the budget. The sum is exact in
    :class:`~fractions.Fraction` (one term per distinct spec of the tally, so it costs microseconds), then rounded
    up; a non-finite term gives the float sum (inf or nan).
    """
    if not all(math.isfinite(x) for x, _ in terms):
        return math.fsum(x * k for x, k in terms)
    return round_up(sum((Fraction(x) * k for x, k in terms), Fraction(0)))


def round_up(exact: Fraction) -> float:
    """The smallest float ≥ ``exact``."""
    nearest = float(exact)
    return nearest if Fraction(nearest) >= exact else math.nextafter(nearest, math.inf)


def charge_sums(counts: dict[LeafSpec, int]) -> tuple[float, float]:
    """(Σ k_i ε_i, Σ k_i δ_i) over the tally, each rounded upward (:func:`sum_rounded_up`), so that both are upper
    bounds on the exact sums of the charged (float) parameters."""
    charges = [(approximate_dp_charge(s), k) for s, k in counts.items()]
    return (sum_rounded_up([(c[0], k) for c, k in charges]), sum_rounded_up([(c[1], k) for c, k in charges]))


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
