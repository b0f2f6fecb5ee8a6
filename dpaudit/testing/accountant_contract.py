"""The accountant contract: what every :class:`~dpaudit.accounting.base.Accountant` must do, as pytest tests.

Subclass :class:`AccountantContract` in a test module (its name must start with ``Test``) and set the class
attributes; pytest then runs every ``test_*`` method below against your accountant::

    from dpaudit.testing import AccountantContract, Reference
    from dpaudit.testing.events import laplace_event

    class TestMyAccountant(AccountantContract):
        accountant = MyAccountant()
        supported = (laplace_event(0.5),)
        unsupported = ()
        references = (Reference(laplace_event(0.5), delta=1e-6, epsilon=0.5, rel_tol=1e-9),)

The properties checked are the interface's promises (DESIGN.md, "Accountant"): ``supports()`` answers before
``compose``/``epsilon`` is asked and agrees with it; ε(δ) is non-increasing in δ (a bound valid at δ is valid at
every δ' ≥ δ); composing more events never lowers ε (post-processing: the first k outputs are a function of the
first k + 1); an unsupported event raises :class:`~dpaudit.errors.UnsupportedEvent` rather than a number; and ε
matches a reference value within its stated tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import ClassVar

from dpaudit.accounting.base import Accountant, DeltaUnreachable
from dpaudit.errors import UnsupportedEvent
from dpaudit.events import PrivacyEvent, SelfComposedEvent

#: δ values at which monotonicity in δ is checked, increasing
DELTAS: tuple[float, ...] = (1e-10, 1e-8, 1e-6, 1e-4, 1e-2)
#: numbers of compositions at which monotonicity in composition is checked, increasing
COMPOSITIONS: tuple[int, ...] = (1, 2, 3, 8)
#: relative slack for "non-increasing" and "non-decreasing": a numerical accountant's own rounding, far below any
#: privacy-relevant difference
MONOTONE_SLACK = 1e-9


@dataclass(frozen=True)
class Reference:
    """A known ε for an event at a δ: from a closed form, a paper's table, or an independent library.

    Attributes:
        event: the event.
        delta: the δ at which ε is known.
        epsilon: the reference ε.
        rel_tol: |ε_accountant − epsilon| ≤ rel_tol · epsilon is required.
        source: where the value comes from (stated in a failure message).
    """

    event: PrivacyEvent
    delta: float
    epsilon: float
    rel_tol: float
    source: str = ""


def _epsilon_or_none(accountant: Accountant, event: PrivacyEvent, delta: float) -> float | None:
    """ε at δ, or None where the accountant says its bound cannot reach δ (:class:`DeltaUnreachable`)."""
    try:
        return accountant.epsilon(event, delta)
    except DeltaUnreachable:
        return None


class AccountantContract:
    """Base class of an accountant's contract tests (pytest collects subclasses named ``Test*``).

    Class attributes (set by the subclass):
        accountant: the accountant under test.
        supported: events it must bound (each at least once at some δ in :data:`DELTAS`).
        unsupported: events it must refuse (``supports()`` False, ``epsilon`` raises UnsupportedEvent).
        references: known values it must match.
    """

    accountant: ClassVar[Accountant]
    supported: ClassVar[Sequence[PrivacyEvent]] = ()
    unsupported: ClassVar[Sequence[PrivacyEvent]] = ()
    references: ClassVar[Sequence[Reference]] = ()

    def test_declares_events_to_check(self) -> None:
        assert self.supported, "an accountant contract needs at least one supported event"

    def test_supports_before_compose(self) -> None:
        for event in self.supported:
            assert self.accountant.supports(event), f"{self.accountant.name} does not support {event.kind}"
            bounds = [_epsilon_or_none(self.accountant, event, d) for d in DELTAS]
            assert any(b is not None for b in bounds), f"{event.kind}: no bound at any delta in {DELTAS}"
            assert all(b is None or (math.isfinite(b) and b >= 0) for b in bounds), f"{event.kind}: {bounds}"

    def test_refuses_unsupported_events(self) -> None:
        for event in self.unsupported:
            assert not self.accountant.supports(event), f"{self.accountant.name} claims to support {event.kind}"
            try:
                eps = self.accountant.epsilon(event, 1e-6)
            except UnsupportedEvent:
                continue
            raise AssertionError(f"{self.accountant.name} returned {eps!r} for unsupported {event.kind}")

    def test_epsilon_is_non_increasing_in_delta(self) -> None:
        for event in self.supported:
            bounds = [_epsilon_or_none(self.accountant, event, d) for d in DELTAS]
            reached = [(d, b) for d, b in zip(DELTAS, bounds, strict=True) if b is not None]
            first = DELTAS.index(reached[0][0]) if reached else len(DELTAS)
            assert all(b is not None for b in bounds[first:]), (
                f"{event.kind}: reachable at delta={DELTAS[first]} but not at a larger delta: {bounds}")
            for (d_small, small), (d_large, large) in pairwise(reached):
                assert large <= small * (1 + MONOTONE_SLACK), (
                    f"{event.kind}: epsilon rises with delta: {small!r} at {d_small} < {large!r} at {d_large}")

    def test_epsilon_is_non_decreasing_in_composition(self) -> None:
        for event in self.supported:
            for delta in DELTAS[2:]:
                bounds = [_epsilon_or_none(self.accountant, _times(event, k), delta) for k in COMPOSITIONS]
                known = [(k, b) for k, b in zip(COMPOSITIONS, bounds, strict=True) if b is not None]
                for (k_few, few), (k_many, many) in pairwise(known):
                    assert many >= few * (1 - MONOTONE_SLACK), (
                        f"{event.kind} at delta={delta}: {k_many} compositions give {many!r} < {few!r} for {k_few}")

    def test_matches_references(self) -> None:
        for ref in self.references:
            eps = self.accountant.epsilon(ref.event, ref.delta)
            assert abs(eps - ref.epsilon) <= ref.rel_tol * ref.epsilon, (
                f"{self.accountant.name} on {ref.event.kind} at delta={ref.delta}: {eps!r}, reference "
                f"{ref.epsilon!r} ± {ref.rel_tol:.0e} ({ref.source or 'no source given'})")


def _times(event: PrivacyEvent, count: int) -> PrivacyEvent:
    """``event`` composed with itself ``count`` times (the event itself for 1)."""
    return event if count == 1 else SelfComposedEvent(event=event, count=count)
