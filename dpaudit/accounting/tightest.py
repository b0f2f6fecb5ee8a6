"""The default accountant: the smallest of the upper bounds that apply.

Each accountant in :data:`MEMBERS` returns a sound upper bound on ε at δ, so their minimum is one too
(and it is never looser than RDP, which supports every leaf kind). The event is tallied once and handed to each
member. A member that does not model the event (:class:`~dpaudit.errors.UnsupportedEvent`) or cannot state a
bound at this δ (:class:`~dpaudit.accounting.base.DeltaUnreachable`) is skipped; any other accounting error
(NaN, failed numerics) propagates, so certification fails loudly rather than quietly falling back. A member that
refuses because the event is outside its controlled numerical regime is skipped *and named* in the source.
"""

from __future__ import annotations

from dpaudit.accounting.advanced import AdvancedComposition
from dpaudit.accounting.base import Accountant, DeltaUnreachable, OutsideControlledRegime
from dpaudit.accounting.basic import BasicComposition
from dpaudit.accounting.charges import LeafSpec, tally
from dpaudit.accounting.pld import CURRENT_FOLD, PldAccountant
from dpaudit.accounting.rdp import RdpAccountant
from dpaudit.errors import AccountingError, UnsupportedEvent
from dpaudit.events import PrivacyEvent
from dpaudit.validation import check_delta

#: Member order: a tie goes to the earlier one. The PRV accountant is not a member: see dpaudit.accounting.prv.
MEMBERS: tuple[type[Accountant], ...] = (
    RdpAccountant, PldAccountant, AdvancedComposition, BasicComposition,
)


def member_name(source: str) -> str:
    """The accountant name at the start of a source string (``"rdp (pld outside ...)"`` → ``"rdp"``)."""
    return source.split(" (", 1)[0]


class TightestAccountant(Accountant):
    """min over the member accountants that support the event; records which attained it."""

    name = "tightest"

    def __init__(self, pld_fold: str = CURRENT_FOLD) -> None:
        """``pld_fold``: the fold version of the PLD member (:data:`dpaudit.accounting.pld.FOLDS`)."""
        self.members: tuple[Accountant, ...] = tuple(PldAccountant(pld_fold) if cls is PldAccountant else cls()
                                                     for cls in MEMBERS)

    def version(self) -> str:
        return "tightest/1 [" + "; ".join(m.version() for m in self.members) + "]"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        reasons = [m._unsupported_reason(counts) for m in self.members]
        return None if any(r is None for r in reasons) else "; ".join(r for r in reasons if r)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        return self._best(counts, delta)[0]

    def _epsilon_for_event(self, event: PrivacyEvent, counts: dict[LeafSpec, int], delta: float) -> float:
        return self._best(counts, delta, event)[0]

    def admission_bound(self, event: PrivacyEvent, delta: float) -> tuple[float, str] | None:
        """The smallest of the PLD member's admission bound (its coarse grid alone; left out when it has none) and
        every other member's ε (closed forms and RDP curves: cheap), with the member that attained it. Each term is at
        least its member's ε, so the smallest is at least this accountant's; None when no member answers.

        Raises:
            AccountingError: a member's numerics failed (as in :meth:`epsilon_with_source`).
        """
        delta = check_delta(delta)
        _, counts = tally(event)
        best: tuple[float, str] | None = None
        for member in self.members:
            try:
                found = member.admission_bound(event, delta) if isinstance(member, PldAccountant) \
                    else (member.epsilon_of_tally(counts, delta, event), member.name)
            except (UnsupportedEvent, DeltaUnreachable):
                continue
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        return best

    def epsilon_with_source(self, event: PrivacyEvent, delta: float) -> tuple[float, str]:
        """(ε, name of the member accountant that attained it).

        When a member refused because the event lies outside its controlled numerical regime
        (:class:`~dpaudit.accounting.base.OutsideControlledRegime`), the source says so after the name, e.g.
        ``"rdp (pld outside its controlled regime: ...)"``; :func:`member_name` recovers the name.

        Raises:
            The same as :meth:`Accountant.epsilon`.
        """
        delta = check_delta(delta)
        _, counts = tally(event)
        return self._best(counts, delta, event)

    def _best(self, counts: dict[LeafSpec, int], delta: float, event: PrivacyEvent | None = None
              ) -> tuple[float, str]:
        best: tuple[float, str] | None = None
        skipped = []
        refused = []
        unreachable = False
        for member in self.members:
            try:
                eps = member.epsilon_of_tally(counts, delta, event)
            except (UnsupportedEvent, DeltaUnreachable) as exc:
                skipped.append(str(exc))
                unreachable = unreachable or isinstance(exc, DeltaUnreachable)
                if isinstance(exc, OutsideControlledRegime):
                    refused.append(str(exc))
                continue
            if best is None or eps < best[0]:
                best = (eps, member.name)
        if best is None:
            # some member models the event but none can state a bound at this δ: the δ is too small, not the event
            # unmodelled (the budget filter refuses such a charge as over budget)
            error = DeltaUnreachable if unreachable else AccountingError
            raise error("no accountant can bound this event: " + "; ".join(skipped))
        if refused:  # say which member fell back from which, and why, in the source itself
            return best[0], f"{best[1]} ({'; '.join(refused)})"
        return best
