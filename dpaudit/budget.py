"""The budget filter: refuses any charge that would push the composed privacy loss past the session budget.

The budget (ε_B, δ_B) is fixed when the session opens. :meth:`BudgetFilter.admit` composes the events already
charged with the candidate event and compares the resulting ε at δ_B with ε_B. It is pure with respect to the
filter's state: admission and commitment are separate steps, and the session performs both under one lock,
together with the write-ahead ledger append, so two workers racing for the last of the budget cannot both be
admitted.

Speed. When the session's accountant is the tightest one (a minimum over members that include RDP), a cheap
member (RDP) is tried first; only when it would refuse is the session's accountant consulted. The certified ε is
that minimum, never looser than the RDP bound, so admitting on either keeps it within budget. Any other session
accountant (e.g. basic composition, which can be looser than RDP) is consulted directly. Before the session's
accountant, a lower bound that every sound accountant respects (:mod:`dpaudit.accounting.lower_bound`) refuses a
request that is over budget whatever the accountant, in microseconds, so the lock is not held through a PLD
composition only to refuse.

Adaptive mode. :class:`BudgetFilter` is sound only when every charge's privacy parameters were fixed in advance
(the certificate says so). :class:`AdaptiveBudgetFilter` admits charges whose parameters depend on earlier noisy
outputs, through the Rényi filter of :mod:`dpaudit.accounting.filters`; its certificate claims the budget itself.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpaudit.accounting import Accountant, get_accountant
from dpaudit.accounting.base import DeltaUnreachable
from dpaudit.accounting.filters import DEFAULT_FILTER_ORDERS, FILTER_NAME, RenyiFilter, charge_rdp, filter_epsilon
from dpaudit.accounting.lower_bound import epsilon_lower_bound
from dpaudit.errors import BudgetExceeded
from dpaudit.events import PrivacyEvent, compose
from dpaudit.validation import check_delta, check_epsilon


@dataclass(frozen=True)
class Admission:
    """The filter's decision for one candidate event.

    Attributes:
        epsilon: an upper bound on the composed ε at the budget's δ, with the candidate included (adaptive filter:
            the smallest ε_B under which the Rényi filter would admit everything so far, information only).
        source: the accountant that produced the bound (``"renyi-filter"`` for the adaptive filter).
    """

    epsilon: float
    source: str


class _FilterState:
    """What both filters keep: the budget, the charged events, the last admission's bound and the lock."""

    def __init__(self, epsilon: float, delta: float) -> None:
        self.epsilon = check_epsilon(epsilon, "budget epsilon")
        self.delta = check_delta(delta, "budget delta", allow_zero=False)
        self._events: list[PrivacyEvent] = []
        self._spent = 0.0
        self._lock = threading.RLock()

    @property
    def lock(self) -> threading.RLock:
        """Held by the session across admit → ledger append → commit."""
        return self._lock

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(self._events)

    @property
    def spent(self) -> float:
        """The bound recorded at the last admission (0 before any)."""
        return self._spent

    def commit(self, event: PrivacyEvent, admission: Admission) -> None:
        """Record an admitted event as charged."""
        self._events.append(event)
        self._spent = admission.epsilon


class BudgetFilter(_FilterState):
    """Admits events while the composed (ε, δ) stays within a budget fixed up front.

    Sound for charges whose privacy parameters were fixed in advance (the certificate's conditional assumption);
    see :class:`AdaptiveBudgetFilter` otherwise.

    Args:
        epsilon: ε_B, the session budget.
        delta: δ_B, the session budget (the δ at which composed ε is evaluated).
        accountant: the session's accountant (its bound is the one certified).
        fast_accountant: a cheaper sound accountant tried first (``"rdp"`` by default), only when ``accountant``
            is a minimum over members that include it.
    """

    def __init__(self, epsilon: float, delta: float, accountant: Accountant, fast_accountant: str = "rdp") -> None:
        super().__init__(epsilon, delta)
        self.accountant = accountant
        fast = get_accountant(fast_accountant)
        # Admitting on the fast bound is sound only if the certified bound can never exceed it: the session's
        # accountant must take the minimum over members that include the fast one (the tightest accountant).
        # A basic-composition session admitted on RDP would otherwise certify ε above its budget.
        members = getattr(accountant, "members", ())
        self._fast = fast if any(type(m) is type(fast) for m in members) else None

    def admit(self, event: PrivacyEvent) -> Admission:
        """Decide whether ``event`` fits; does not change the filter.

        Raises:
            BudgetExceeded: the composed ε would exceed ε_B, or no accountant can bound it at δ_B (e.g. the leaves'
                own δ already exceed it).
            UnsupportedEvent, AccountingError: the accountant cannot bound the composition.
        """
        candidate = compose([*self._events, event])
        if self._fast is not None and self._fast.supports(candidate):
            eps = self._fast.epsilon(candidate, self.delta)
            if eps <= self.epsilon:
                return Admission(eps, self._fast.name)
        lower = epsilon_lower_bound(candidate, self.delta)
        if lower > self.epsilon:  # every sound accountant would report at least this: refuse without computing
            raise BudgetExceeded(
                f"release refused: composed epsilon would be at least {lower:.6g} > budget {self.epsilon:g} "
                f"(delta {self.delta:g}, lower bound); nothing was charged or released")
        try:
            eps, source = self.accountant.epsilon_with_source(candidate, self.delta)
        except DeltaUnreachable as exc:
            raise BudgetExceeded(f"release refused: no finite epsilon at the budget's delta {self.delta:g} ({exc}); "
                                 "nothing was charged or released") from exc
        if not eps <= self.epsilon:
            raise BudgetExceeded(
                f"release refused: composed epsilon would be {eps:.6g} > budget {self.epsilon:g} "
                f"(delta {self.delta:g}, {source} accountant); nothing was charged or released"
            )
        return Admission(eps, source)


class AdaptiveBudgetFilter(_FilterState):
    """Admits events whose privacy parameters may depend on earlier noisy outputs: a Rényi filter.

    A charge is admitted iff, with it, the running RDP sums fit some order's budget
    (:class:`~dpaudit.accounting.filters.RenyiFilter`); the session is then (ε_B, δ_B)-DP whatever the order in
    which the parameters were chosen. ``spent`` is :func:`~dpaudit.accounting.filters.filter_epsilon` of the sums,
    the smallest budget this filter would have needed so far (information, not a certified claim).

    Args:
        epsilon: ε_B.
        delta: δ_B, split evenly over the finite orders.
        orders: the filter's finite orders (integer orders ≥ 2 of the RDP grid), fixed now.

    Raises:
        InvalidParameter: a bad budget or bad orders.
    """

    def __init__(self, epsilon: float, delta: float, orders: Sequence[float] = DEFAULT_FILTER_ORDERS) -> None:
        super().__init__(epsilon, delta)
        self.filter = RenyiFilter(self.epsilon, self.delta, tuple(orders))
        self._rdp = np.zeros(len(self.filter.orders))
        self._epsilon_inf = 0.0

    def _with(self, event: PrivacyEvent) -> tuple[np.ndarray, float]:
        curve, at_inf = charge_rdp(event, self.filter.orders)
        return self._rdp + curve, self._epsilon_inf + at_inf

    def admit(self, event: PrivacyEvent) -> Admission:
        """Decide whether ``event`` fits; does not change the filter.

        Raises:
            BudgetExceeded: no order's budget holds the running sums with ``event`` added.
            UnsupportedEvent: ``event`` has no Rényi-DP bound (e.g. a high-probability sensitivity).
        """
        rdp, epsilon_inf = self._with(event)
        needed = filter_epsilon(self.filter, rdp, epsilon_inf)
        if not self.filter.admits(rdp, epsilon_inf):
            raise BudgetExceeded(
                f"release refused: the Renyi filter (orders {self.filter.orders[0]:g}..{self.filter.orders[-1]:g}, "
                f"delta {self.delta:g} split over {len(self.filter.orders)} orders) would need epsilon {needed:.6g} "
                f"> budget {self.epsilon:g}; nothing was charged or released")
        return Admission(needed, FILTER_NAME)

    def commit(self, event: PrivacyEvent, admission: Admission) -> None:
        """Record an admitted event as charged and add its RDP to the running sums."""
        self._rdp, self._epsilon_inf = self._with(event)
        super().commit(event, admission)
