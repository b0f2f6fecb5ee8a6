"""The verifier's recheck of an adaptive session's claim: its Rényi filter admitted every charge, twice over.

1. With the session's own implementation (:func:`~dpaudit.accounting.filters.charge_rdp`, the RDP accountant's
   curves): no prefix of the charges is refused.
2. With an independent one: dp_accounting's RDP curves at the filter's orders (the functions the ``rdp`` recheck
   uses, :mod:`dpaudit.accounting.recheck`), an exact ``Fraction`` sum of the pure charges at α = ∞, and the order
   budgets written as ε_B + (ln δ_B − ln |A| + ln α)/(α − 1) − ln(1 − 1/α). Some order must hold every prefix; the
   RDP sums are compared with a relative tolerance of :data:`~dpaudit.accounting.recheck.RDP_REL_TOL` (the two
   libraries agree to about 10⁻⁹ at integer orders), the pure sum exactly.

And the claim must be the filter's budget (ε_B, δ_B), exactly: a filter certifies its budget, nothing smaller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpaudit.accounting.charges import PureSpec, tally
from dpaudit.accounting.filters import FILTER_NAME, RenyiFilter, charge_rdp, first_refused
from dpaudit.accounting.rdp import unsupported_reason
from dpaudit.accounting.recheck import RDP_REL_TOL, _dpa_curve
from dpaudit.errors import DPAuditError
from dpaudit.events import PrivacyEvent


@dataclass(frozen=True)
class FilterRecheck:
    """Outcome of :func:`recheck_filter`: ``ok`` iff the claim is the budget and both implementations admit."""

    ok: bool
    reason: str


def _independent_budgets(flt: RenyiFilter) -> np.ndarray:
    log_delta = math.log(flt.delta) - math.log(len(flt.orders))
    return np.array([flt.epsilon + (log_delta + math.log(a)) / (a - 1.0) - math.log(1.0 - 1.0 / a)
                     for a in flt.orders])


def _independent_charge(event: PrivacyEvent, orders: list[float]) -> tuple[np.ndarray, Fraction | None]:
    """dp_accounting's RDP of one charge at ``orders``, and its exact pure ε (None unless every leaf is pure)."""
    _, counts = tally(event)
    reason = unsupported_reason(counts)
    if reason is not None:
        raise DPAuditError(reason)
    curve = sum((k * _dpa_curve(spec, orders) for spec, k in counts.items()), np.zeros(len(orders)))
    pure = all(isinstance(s, PureSpec) for s in counts)
    return curve, (sum((Fraction(s.epsilon) * k for s, k in counts.items()), Fraction(0)) if pure else None)


def _independent_first_refused(flt: RenyiFilter, events: Sequence[PrivacyEvent]) -> int | None:
    orders = list(flt.orders)
    budgets = _independent_budgets(flt)
    total = np.zeros(len(orders))
    total_pure: Fraction | None = Fraction(0)
    for i, event in enumerate(events):
        curve, pure = _independent_charge(event, orders)
        total = total + curve
        total_pure = None if total_pure is None or pure is None else total_pure + pure
        finite_ok = bool(np.any(total * (1.0 - RDP_REL_TOL) <= budgets))
        if not (finite_ok or (total_pure is not None and total_pure <= Fraction(flt.epsilon))):
            return i
    return None


def recheck_filter(flt: RenyiFilter, charges: Sequence[tuple[int, PrivacyEvent]], claimed_epsilon: float,
                   claimed_delta: float) -> FilterRecheck:
    """Recheck an adaptive session's claim against its filter and its charges (module docstring).

    Args:
        flt: the filter the ledger's ``open`` record names.
        charges: (ledger seq, event) of every charge, in ledger order.
        claimed_epsilon, claimed_delta: the certificate's claim.
    """
    events = [e for _, e in charges]
    if (claimed_epsilon, claimed_delta) != (flt.epsilon, flt.delta):
        return FilterRecheck(False, f"claim ({claimed_epsilon:.12g}, {claimed_delta:.3g}) is not the {FILTER_NAME} "
                             f"budget ({flt.epsilon:.12g}, {flt.delta:.3g}): a filter certifies its budget only")
    try:
        ours = first_refused(flt, [charge_rdp(e, flt.orders) for e in events])
        independent = _independent_first_refused(flt, events)
    except DPAuditError as exc:
        return FilterRecheck(False, f"{FILTER_NAME} recomputation failed: {exc}")
    scope = (f"{len(events)} charges through the {FILTER_NAME} (orders {', '.join(f'{a:g}' for a in flt.orders)}, "
             f"delta {flt.delta:g} split {len(flt.orders)} ways, plus the pure order)")
    if ours is not None or independent is not None:
        which = [f"ours refuses the charges up to seq {charges[ours][0]}" if ours is not None else "ours admits all",
                 f"dp_accounting refuses the charges up to seq {charges[independent][0]}" if independent is not None
                 else "dp_accounting admits all"]
        return FilterRecheck(False, f"{scope}: the charges exceed the filter ({'; '.join(which)})")
    return FilterRecheck(True, f"{scope}: every prefix admitted by our RDP and by dp_accounting's "
                               f"(tolerance {RDP_REL_TOL:g}); claim = budget")
