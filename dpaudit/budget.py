"""The budget filter: refuses any charge that would push the composed privacy loss past the session budget.

The budget (ε_B, δ_B) is fixed when the session opens. :meth:`BudgetFilter.admit` composes the events already
charged with the candidate event and compares the resulting ε at δ_B with ε_B. It is pure with respect to the
filter's state: admission and commitment are separate steps.

Admission outside the lock. The session takes a :class:`Snapshot` of the charged events (and the filter's version,
bumped by every commit) under its lock and makes the cheap decisions there (:meth:`BudgetFilter.admit_fast`). When
only the session's accountant can decide (e.g. a PLD composition), it releases the lock, computes
:meth:`BudgetFilter.admit_slow` on the snapshot, and takes the lock again: if the version is unchanged it appends the
charge record and commits, in that one locked step; otherwise another charge got in meanwhile and it decides again on
a fresh snapshot. So a long composition never blocks other threads' charges or a close, and two workers racing for
the last of the budget cannot both be admitted: each commit is decided on exactly the events charged before it.

Speed. When the session's accountant is the tightest one (a minimum over members that include RDP), a cheap
member (RDP) is tried first; only when it would refuse is the session's accountant consulted. The certified ε is
that minimum, never looser than the RDP bound, so admitting on either keeps it within budget. Any other session
accountant (e.g. basic composition, which can be looser than RDP) is consulted directly. The RDP bound comes from a
running curve (:class:`~dpaudit.accounting.rdp.RunningRdp`: the committed charges' RDP curves summed in charge order,
Mironov 2017 Prop. 1) plus the candidate's, so its cost does not grow with the number of earlier charges; the ε
admitted is that of an upper bound on the curve the certificate computes from scratch (which may sum in another
order), so the certified ε never exceeds an ε admitted on it. The session's accountant is asked first for its
admission bound (:meth:`~dpaudit.accounting.base.Accountant.admission_bound`: for the PLD, the reading of its fold on
a grid 16 times coarser, an upper bound on its ε by construction since that ε is the smaller of the two grids'
readings; for the tightest, the same with the PLD member's bound), and computes its ε only when that bound is over
the budget, so the decision is the accountant's and the certified ε never exceeds the ε admitted. Before the session's
accountant, a lower bound that every sound accountant respects (:mod:`dpaudit.accounting.lower_bound`) refuses a
request that is over budget whatever the accountant, in microseconds, so the lock is not held through a PLD
composition only to refuse.

Adaptive mode. :class:`BudgetFilter` is sound only when every charge's privacy parameters were fixed in advance
(the certificate says so). :class:`AdaptiveBudgetFilter` admits charges whose parameters depend on earlier noisy
outputs, through the Rényi filter of :mod:`dpaudit.accounting.filters`; its certificate claims the budget itself.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpaudit.accounting import Accountant, RdpAccountant
from dpaudit.accounting.base import DeltaUnreachable
from dpaudit.accounting.basic import round_up
from dpaudit.accounting.charges import event_counts
from dpaudit.accounting.filters import DEFAULT_FILTER_ORDERS, FILTER_NAME, RenyiFilter, charge_rdp, filter_epsilon
from dpaudit.accounting.lower_bound import epsilon_lower_bound
from dpaudit.accounting.rdp import UNIT_ROUNDOFF, RunningRdp
from dpaudit.display import show
from dpaudit.errors import BudgetExceeded, DPAuditError
from dpaudit.events import PrivacyEvent, compose, neighbouring_of
from dpaudit.sensitivity import Neighbouring
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


@dataclass(frozen=True)
class Snapshot:
    """The charged events at one moment, and the filter's version then (bumped by every commit).

    Taking one copies nothing: the filter's list of charged events only ever grows, so its first ``version`` entries
    are the events charged then, read on demand (:attr:`events`).

    Attributes:
        version: how many events had been committed.
    """

    version: int
    charged: list[PrivacyEvent] = field(repr=False, compare=False)

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """The events committed then, in charge order."""
        return tuple(self.charged[: self.version])


class _FilterState(ABC):
    """What both filters keep: the budget, the charged events, the last admission's bound, a version and the lock."""

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

    def snapshot(self) -> Snapshot:
        """The charged events now (take it under :attr:`lock`)."""
        return Snapshot(len(self._events), self._events)

    def is_current(self, snapshot: Snapshot) -> bool:
        """Whether nothing was committed since ``snapshot`` (ask under :attr:`lock`, then commit in the same step)."""
        return snapshot.version == len(self._events)

    def commit(self, event: PrivacyEvent, admission: Admission) -> None:
        """Record an admitted event as charged (under :attr:`lock`)."""
        self._events.append(event)
        self._spent = admission.epsilon

    @abstractmethod
    def admit(self, event: PrivacyEvent) -> Admission:
        """Decide whether ``event`` fits the current state; does not change the filter."""

    def admit_fast(self, event: PrivacyEvent, snapshot: Snapshot) -> Admission | None:
        """The decisions cheap enough to take under the session lock, on a current ``snapshot``; None when only
        :meth:`BudgetFilter.admit_slow` can decide. A filter whose whole decision is cheap (the Rényi filter)
        decides here."""
        return self.admit(event)


class BudgetFilter(_FilterState):
    """Admits events while the composed (ε, δ) stays within a budget fixed up front.

    Sound for charges whose privacy parameters were fixed in advance (the certificate's conditional assumption);
    see :class:`AdaptiveBudgetFilter` otherwise.

    Args:
        epsilon: ε_B, the session budget.
        delta: δ_B, the session budget (the δ at which composed ε is evaluated).
        accountant: the session's accountant (its bound is the one certified).
    """

    def __init__(self, epsilon: float, delta: float, accountant: Accountant) -> None:
        super().__init__(epsilon, delta)
        self.accountant = accountant
        # Admitting on the RDP bound is sound only if the certified bound can never exceed it: the session's
        # accountant must take the minimum over members that include RDP (the tightest accountant). A
        # basic-composition session admitted on RDP would otherwise certify ε above its budget.
        members = getattr(accountant, "members", ())
        fast = any(type(m) is RdpAccountant for m in members)
        # the committed charges' running RDP curve and their relation; None once a charge has no RDP curve
        self._rdp: RunningRdp | None = RunningRdp() if fast else None
        self._relation: Neighbouring | None = None
        # the last candidate and its _with_rdp, reused by its commit (reset by every commit)
        self._last: tuple[PrivacyEvent, tuple[RunningRdp, Neighbouring] | None] | None = None
        # the lower bound of the charged events, kept up to date by commit: a lower bound of a composition is the
        # largest of its parts' (lower_bound.py), so a candidate needs only the new event's
        self._lower = 0.0

    def commit(self, event: PrivacyEvent, admission: Admission) -> None:
        """Record an admitted event as charged (under :attr:`lock`) and fold it into the running lower bound and the
        running RDP curve."""
        self._lower = max(self._lower, epsilon_lower_bound(event, self.delta))
        self._rdp, self._relation = self._with_rdp(event) or (None, None)
        self._last = None
        super().commit(event, admission)

    def _with_rdp(self, event: PrivacyEvent) -> tuple[RunningRdp, Neighbouring] | None:
        """The running RDP curve with ``event`` added, and the relation of the charges; None when there is none (not
        the tightest accountant, a charge without an RDP curve, ``event`` is one, or its relation is another)."""
        if self._rdp is None:
            return None
        if self._last is not None and self._last[0] is event:
            return self._last[1]
        try:
            relation = neighbouring_of(event)
            if self._relation not in (None, relation):
                return None
            result = self._rdp.plus(event_counts(event)), relation
        except DPAuditError:  # no RDP curve (or a faulty event, which the session's accountant then reports)
            return None
        self._last = (event, result)
        return result

    def _lower_bound(self, event: PrivacyEvent, snapshot: Snapshot) -> float:
        """The lower bound of ``snapshot`` plus ``event``: from the running value when the snapshot is current."""
        if self.is_current(snapshot):
            return max(self._lower, epsilon_lower_bound(event, self.delta))
        return epsilon_lower_bound(compose([*snapshot.events, event]), self.delta)

    def admit(self, event: PrivacyEvent) -> Admission:
        """Decide whether ``event`` fits the current state; does not change the filter.

        Raises:
            BudgetExceeded: the composed ε would exceed ε_B, or no accountant can bound it at δ_B (e.g. the leaves'
                own δ already exceed it).
            UnsupportedEvent, AccountingError: the accountant cannot bound the composition.
        """
        snapshot = self.snapshot()
        admission = self.admit_fast(event, snapshot)
        return admission if admission is not None else self.admit_slow(event, snapshot)

    def admit_fast(self, event: PrivacyEvent, snapshot: Snapshot) -> Admission | None:
        """The cheap decisions (microseconds, taken under the session lock): the running RDP bound admits (current
        ``snapshot`` only), or the lower bound refuses; None when only the session's accountant can decide
        (:meth:`admit_slow`).

        Raises:
            BudgetExceeded: the lower bound already exceeds ε_B.
        """
        running = self._with_rdp(event) if self.is_current(snapshot) else None
        if running is not None:
            eps = running[0].epsilon(self.delta)
            if eps <= self.epsilon:
                return Admission(eps, RdpAccountant.name)
        lower = self._lower_bound(event, snapshot)
        if lower > self.epsilon:  # every sound accountant would report at least this: refuse without computing
            raise BudgetExceeded(
                f"release refused: composed epsilon would be at least {lower:.6g} > budget {self.epsilon:g} "
                f"(delta {self.delta:g}, lower bound); nothing was charged or released")
        return None

    def admit_slow(self, event: PrivacyEvent, snapshot: Snapshot) -> Admission:
        """The session's accountant on ``snapshot`` plus ``event`` (its admission bound when that fits the budget, else
        its ε): a pure function of the two, so it runs without the lock; the caller commits only if the snapshot is
        still current (:meth:`is_current`).

        Raises:
            BudgetExceeded: the composed ε exceeds ε_B, or no accountant can bound it at δ_B.
            UnsupportedEvent, AccountingError: the accountant cannot bound the composition.
        """
        candidate = compose([*snapshot.events, event])
        bound = self.accountant.admission_bound(candidate, self.delta)
        if bound is not None and bound[0] <= self.epsilon:
            return Admission(*bound)
        try:
            eps, source = self.accountant.epsilon_with_source(candidate, self.delta)
        except DeltaUnreachable as exc:
            raise BudgetExceeded(f"release refused: no finite epsilon at the budget's delta {self.delta:g} ({exc}); "
                                 "nothing was charged or released") from exc
        if not eps <= self.epsilon:
            raise BudgetExceeded(
                f"release refused: composed epsilon would be {show(eps)} > budget {self.epsilon:g} "
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
        self._epsilon_inf = Fraction(0)  # the pure order's sum, exact
        self._terms = 0  # rounded additions behind the finite orders' running sums, for their rounding bound

    def _with(self, event: PrivacyEvent) -> tuple[np.ndarray, Fraction, int]:
        curve, at_inf = charge_rdp(event, self.filter.orders)
        exact_inf = self._epsilon_inf + Fraction(at_inf) if math.isfinite(at_inf) else at_inf
        return self._rdp + curve, exact_inf, self._terms + 1

    @staticmethod
    def _upper(rdp: np.ndarray, epsilon_inf: Fraction | float, terms: int) -> tuple[np.ndarray, float]:
        """Upper bounds on the exact sums of the charges' RDP at the finite orders and at the pure order.

        The pure order's sum is kept exact and rounded up here (:func:`~dpaudit.accounting.basic.round_up`):
        10⁴ charges of ε = 1e-4 add up to 0.99999999999991 in floats, but the charged floats sum to more than 1.
        The finite orders' float sums add ``terms`` nonnegative terms, so each is within γ_n·(exact sum) of it,
        γ_n = nu/(1 − nu) (Higham 2002, eq. 4.4); the factor 1 + 4·n·u covers that and its own rounding while
        nu ≤ 0.01, i.e. for fewer than 0.01/u ≈ 9·10¹³ charges: every charge is a fsynced ledger record, so no
        session reaches that many (it would take years of appends and petabytes of ledger), and no check is made.
        """
        pure = round_up(epsilon_inf) if isinstance(epsilon_inf, Fraction) else epsilon_inf
        return rdp * (1.0 + 4.0 * terms * UNIT_ROUNDOFF), pure

    def admit(self, event: PrivacyEvent) -> Admission:
        """Decide whether ``event`` fits; does not change the filter.

        Raises:
            BudgetExceeded: no order's budget holds the running sums with ``event`` added.
            UnsupportedEvent: ``event`` has no Rényi-DP bound (e.g. a high-probability sensitivity).
        """
        rdp, epsilon_inf = self._upper(*self._with(event))
        needed = filter_epsilon(self.filter, rdp, epsilon_inf)
        if not self.filter.admits(rdp, epsilon_inf):
            raise BudgetExceeded(
                f"release refused: the Renyi filter (orders {self.filter.orders[0]:g}..{self.filter.orders[-1]:g}, "
                f"delta {self.delta:g} split over {len(self.filter.orders)} orders) would need epsilon {show(needed)} "
                f"> budget {self.epsilon:g}; nothing was charged or released")
        return Admission(needed, FILTER_NAME)

    def commit(self, event: PrivacyEvent, admission: Admission) -> None:
        """Record an admitted event as charged and add its RDP to the running sums."""
        self._rdp, self._epsilon_inf, self._terms = self._with(event)
        super().commit(event, admission)
