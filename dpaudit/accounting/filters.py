"""A Rényi privacy filter: admission of charges whose privacy parameters are chosen adaptively.

The accountants of this package compose events whose parameters were fixed in advance. A *privacy filter*
(Rogers, Roth, Ullman & Vadhan 2016) instead lets every charge's parameters depend on earlier noisy outputs and
stops the interaction before a budget fixed up front could be exceeded; it certifies the budget, not the realised
composition (reporting the realised sum would make it an odometer, a different and costlier object).

The filter here (docs/accounting.md, "Adaptive parameters: the Rényi filter"):

* a fixed set A of integer orders α ≥ 2 (subset of :data:`dpaudit.accounting.rdp.ORDERS`) and α = ∞, fixed when
  the session opens;
* δ_B split evenly over the finite orders, δ_α = δ_B/|A| (a union bound; α = ∞ needs no δ);
* per-order RDP budgets from Balle, Barthe, Gaboardi, Hsu & Sato 2020, Thm. 21:
  B_α = ε_B − ln((α − 1)/α) + (ln δ_α + ln α)/(α − 1), and B_∞ = ε_B;
* a charge is admitted iff, with it, some order α ∈ A ∪ {∞} has Σ_i ρ_i(α) ≤ B_α, where ρ_i is the RDP curve of
  charge i (:func:`charge_rdp`, the RDP accountant's curves).

Why this is (ε_B, δ_B)-DP: for one order, Feldman & Zrnic 2021 (Sec. 3, their Rényi filter theorem; also Lécuyer
2021) show that the interaction stopped at τ_α, the last charge with Σ ρ_i(α) ≤ B_α, is (α, B_α)-RDP with
adaptively chosen ρ_i (the supermartingale exp((α − 1)(L_t − Σ_{i≤t} ρ_i(α))), optional stopping at the bounded
τ_α). Balle et al.'s conversion turns that into a hockey-stick divergence of at most δ_α at e^{ε_B}. The whole
interaction stops at max_α τ_α, and E_P[(1 − e^{ε_B − L})₊] of its privacy loss L is at most the sum over α of the
same quantity for the interaction stopped at τ_α, hence at most Σ_α δ_α = δ_B. At α = ∞ every charge is pure
ε_i-DP, so its privacy loss is at most Σ ε_i ≤ ε_B everywhere and contributes nothing. The literature we could
check proves the single-order filter; the union bound over orders is our conservative extension.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.accounting.charges import tally
from dpaudit.accounting.rdp import ORDERS, composed_rdp, unsupported_reason
from dpaudit.errors import InvalidParameter, UnsupportedEvent
from dpaudit.events import PrivacyEvent
from dpaudit.validation import check_delta, check_epsilon

FILTER_NAME = "renyi-filter"
FILTER_VERSION = "renyi-filter/1"
#: 14 integer orders from 2 to 1024, dense where DP-SGD budgets of ε ≈ 1-10 are attained (δ_α = δ_B/14); chosen
#: over sets of 6 to 71 orders by the price measured in docs/accounting.md (finer grids pay more for the split).
DEFAULT_FILTER_ORDERS: tuple[float, ...] = (2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0, 256.0,
                                            1024.0)
_INTEGER_ORDERS = frozenset(a for a in ORDERS if a.is_integer())


def conversion_term(orders: np.ndarray, delta: float) -> np.ndarray:
    """ε − ρ in Balle et al. 2020, Thm. 21: an (α, ρ)-RDP mechanism is (ρ + term, δ)-DP, term = ln((α − 1)/α) −
    (ln δ + ln α)/(α − 1), at each order of ``orders`` (all > 1)."""
    a = np.asarray(orders, dtype=float)
    return np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)


@dataclass(frozen=True)
class RenyiFilter:
    """The filter's public description, fixed when the session opens.

    Attributes:
        epsilon: ε_B.
        delta: δ_B, split evenly over ``orders``.
        orders: the finite orders α (integers ≥ 2 of :data:`~dpaudit.accounting.rdp.ORDERS`, increasing); α = ∞ is
            always used as well, with no share of δ.

    Raises:
        InvalidParameter: a bad budget, or orders that are empty, repeated, unsorted or not integer grid orders.
    """

    epsilon: float
    delta: float
    orders: tuple[float, ...] = DEFAULT_FILTER_ORDERS

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon, "filter epsilon")
        check_delta(self.delta, "filter delta", allow_zero=False)
        orders = tuple(float(a) for a in self.orders)
        if not orders:
            raise InvalidParameter("a Renyi filter needs at least one order")
        if any(a not in _INTEGER_ORDERS for a in orders):
            raise InvalidParameter(f"filter orders must be integer orders >= 2 of the RDP grid (up to 1024), got "
                                   f"{list(self.orders)}")
        if list(orders) != sorted(set(orders)):
            raise InvalidParameter(f"filter orders must be strictly increasing, got {list(self.orders)}")
        object.__setattr__(self, "orders", orders)

    @property
    def delta_per_order(self) -> float:
        """δ_α = δ_B/|A|: each finite order's share of δ_B (union bound)."""
        return self.delta / len(self.orders)

    def budgets(self) -> np.ndarray:
        """B_α = ε_B − :func:`conversion_term` (α, δ_α) at each finite order (may be negative: order unusable)."""
        return self.epsilon - conversion_term(np.array(self.orders), self.delta_per_order)

    def admits(self, rdp: np.ndarray, epsilon_inf: float) -> bool:
        """Whether cumulative RDP ``rdp`` (at :attr:`orders`) and pure-DP sum ``epsilon_inf`` fit some order."""
        return bool(np.any(rdp <= self.budgets())) or epsilon_inf <= self.epsilon

    def to_dict(self) -> dict[str, Any]:
        """The filter's record in the ledger's ``open`` record and in the certificate's claim."""
        return {"name": FILTER_NAME, "version": FILTER_VERSION, "epsilon": self.epsilon, "delta": self.delta,
                "orders": list(self.orders), "delta_per_order": self.delta_per_order, "pure_order": True,
                "conversion": "Balle et al. 2020 Thm. 21 per order; delta split evenly over the finite orders"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RenyiFilter:
        """The filter a ledger's ``open`` record names (its budget and orders; δ_α is recomputed, never read).

        Raises:
            InvalidParameter: not a filter of this kind or version, or bad parameters.
        """
        if data.get("name") != FILTER_NAME or data.get("version") != FILTER_VERSION:
            raise InvalidParameter(f"unknown privacy filter {data.get('name')!r} {data.get('version')!r}")
        try:
            return cls(float(data["epsilon"]), float(data["delta"]), tuple(float(a) for a in data["orders"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameter(f"malformed privacy filter description: {exc}") from None


def charge_rdp(event: PrivacyEvent, orders: Sequence[float]) -> tuple[np.ndarray, float]:
    """RDP of one charged event at ``orders`` (a subset of the grid) and at α = ∞ (∞ unless every leaf is pure).

    A repeat-and-select's λ̂ minimum (Papernot & Steinke 2022) runs over ``orders`` only, so the verifier's
    independent implementation evaluates the same bound.

    Raises:
        UnsupportedEvent: a leaf with no Rényi-DP bound (a release whose sensitivity holds only with probability
            1 − δ_s), or an unmodelled leaf.
    """
    _, counts = tally(event)
    reason = unsupported_reason(counts)
    if reason is not None:
        raise UnsupportedEvent(f"the Renyi filter of an adaptive session cannot admit it: {reason}")
    mask = np.isin(np.array(ORDERS), np.asarray(orders, dtype=float))
    return composed_rdp(counts, mask)


def filter_epsilon(flt: RenyiFilter, rdp: np.ndarray, epsilon_inf: float) -> float:
    """The smallest ε_B at which a filter with ``flt``'s δ_B and orders admits cumulative ``rdp``/``epsilon_inf``.

    min(min_α Σρ(α) + term(α, δ_α), Σε_∞): the session's running "spent" value and the price of adaptivity
    (docs/accounting.md). Not a certified quantity: the certificate claims the budget.
    """
    finite = rdp + conversion_term(np.array(flt.orders), flt.delta_per_order)
    return float(max(min(float(np.min(finite)), epsilon_inf), 0.0))


def first_refused(flt: RenyiFilter, curves: Sequence[tuple[np.ndarray, float]]) -> int | None:
    """Index of the first prefix of ``curves`` (per-charge RDP at ``flt.orders`` and at ∞) the filter refuses."""
    total = np.zeros(len(flt.orders))
    total_inf = 0.0
    for i, (curve, at_inf) in enumerate(curves):
        total = total + curve
        total_inf += at_inf
        if not flt.admits(total, total_inf):
            return i
    return None
