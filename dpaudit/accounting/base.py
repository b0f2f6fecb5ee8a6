"""The accountant interface: compose an event's leaves into a sound upper bound on ε at a given δ.

An accountant works in two steps. :func:`~dpaudit.accounting.charges.tally` reduces the event to counts per
leaf spec (O(n) in the number of leaves, cheap); :meth:`Accountant._epsilon_for` turns the tally into ε, with
all per-spec work cached at module level by the concrete accountants. The budget filter calls an accountant
with a growing :class:`~dpaudit.events.ComposedEvent` before every release, so n releases cost one pass over
the leaves per call, not n expensive per-leaf computations.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from importlib.metadata import version as _dist_version
from typing import ClassVar

from dpaudit.accounting.charges import LeafSpec, tally
from dpaudit.errors import AccountingError, UnsupportedEvent
from dpaudit.events import PrivacyEvent
from dpaudit.validation import check_delta


class DeltaUnreachable(AccountingError):
    """This accountant's bound cannot be stated at the requested δ (e.g. basic composition with Σδ_i > δ).

    Not a numerical failure: another accountant may still bound the event, so the tightest accountant skips an
    accountant that raises this (and only this) kind of :class:`AccountingError`.
    """


class OutsideControlledRegime(UnsupportedEvent):
    """A numerical accountant refuses to answer where its own error is not controlled (e.g. the PLD's FFT rounding
    noise is not small against δ); the tightest accountant then falls back to another member and says so."""


def package_versions(*names: str) -> str:
    """``"opacus 1.6.0, dp-accounting 0.6.0"`` for the installed distributions ``names``."""
    return ", ".join(f"{n} {_dist_version(n)}" for n in names)


class Accountant(ABC):
    """Composes privacy events into an (ε, δ) upper bound.

    Subclasses set ``name`` and implement :meth:`_unsupported_reason` and :meth:`_epsilon_for`.
    """

    name: ClassVar[str]

    @abstractmethod
    def version(self) -> str:
        """Accountant id and the versions of the libraries whose numerics it uses, e.g. ``"rdp/1 (opacus 1.6.0)"``."""

    def supports(self, event: PrivacyEvent) -> bool:
        """True when every leaf is modelled and the event has one neighbouring relation.

        Raises:
            AccountingError: a leaf under-charges (its privacy map exceeds its declared ε); that is an error in
                the event, not a question of support.
        """
        try:
            _, counts = tally(event)
        except UnsupportedEvent:
            return False
        return self._unsupported_reason(counts) is None

    def epsilon(self, event: PrivacyEvent, delta: float) -> float:
        """A sound upper bound on ε of ``event`` at ``delta``.

        Raises:
            InvalidParameter: δ outside [0, 1).
            UnsupportedEvent: an unmodelled leaf, mixed neighbouring relations, or a sampling scheme this
                accountant does not model.
            AccountingError: no finite bound (NaN, infinity, failed numerics; :class:`DeltaUnreachable` when the
                bound cannot reach δ), or an under-charging leaf.
        """
        delta = check_delta(delta)
        _, counts = tally(event)
        return self.epsilon_of_tally(counts, delta, event)

    def epsilon_with_source(self, event: PrivacyEvent, delta: float) -> tuple[float, str]:
        """(ε, the name of the accountant that attained it): this accountant's own :meth:`epsilon` and name.

        An accountant that takes the minimum over members (the tightest) overrides it to name the member.

        Raises:
            The same as :meth:`epsilon`.
        """
        return self.epsilon(event, delta), self.name

    def admission_bound(self, event: PrivacyEvent, delta: float) -> tuple[float, str] | None:
        """(ε, source): a cheaper upper bound on :meth:`epsilon_with_source`'s ε (never below it), which the budget
        filter tries before the accountant itself; None when the accountant has none (the default).

        Raises:
            The same as :meth:`epsilon`.
        """
        return None

    def epsilon_of_tally(self, counts: dict[LeafSpec, int], delta: float, event: PrivacyEvent | None = None) -> float:
        """ε for an already tallied event (δ already validated); shared by :meth:`epsilon` and the tightest.

        Args:
            counts: the event's tally.
            delta: δ.
            event: the event itself, when known: an accountant whose numerics depend on the order in which the
                parts are composed (the PLD) composes it in its own canonical order (:meth:`_epsilon_for_event`).
        """
        reason = self._unsupported_reason(counts)
        if reason is not None:
            raise UnsupportedEvent(f"{self.name} accountant: {reason}")
        eps = float(self._epsilon_for(counts, delta) if event is None
                    else self._epsilon_for_event(event, counts, delta))
        if math.isnan(eps):
            raise AccountingError(f"{self.name} accountant produced NaN")
        if math.isinf(eps):
            raise DeltaUnreachable(f"{self.name} accountant has no finite epsilon at delta = {delta!r}")
        if eps < 0:
            raise AccountingError(f"{self.name} accountant produced a negative epsilon {eps!r}")
        return eps

    @abstractmethod
    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        """Why this accountant cannot bound the tally, or None when it can."""

    @abstractmethod
    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        """The bound; may return inf (no finite bound at δ), never a value below the true ε."""

    def _epsilon_for_event(self, event: PrivacyEvent, counts: dict[LeafSpec, int], delta: float) -> float:
        """The bound of ``event`` (tally ``counts``): the tally's, unless the accountant composes in its own order."""
        return self._epsilon_for(counts, delta)
