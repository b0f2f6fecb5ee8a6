"""Selection helpers of the session: views of charged AboveThreshold rounds; repeat-and-select's commitment to K.

Nothing here holds privacy state. The AboveThreshold rounds' state (rounds started, answers, noisy thresholds) lives
in the :class:`~dpaudit.session.Session`, keyed by the charge, and changes only under its lock; the views below
only read it and ask the session to act. Repeat-and-select's helper builds the hiding commitment to the number of
repetitions K (Papernot & Steinke 2022; Liu & Talwar 2019), which the session records as an ``info`` record (the
charged event is built by :func:`dpaudit.mechanisms.repeat_and_select.repeat_and_select_event`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpaudit import canonical
from dpaudit.coverage import RoundState
from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.tracking.confidential import write_private

if TYPE_CHECKING:  # the session imports this module
    from dpaudit.session import Charge, Session

class AboveThresholdRounds:
    """A read-only view of the AboveThreshold rounds that one charge, made before the first of them, pays for.

    The rounds' state (how many started, each round's answers, its noisy threshold) lives in the session, keyed by
    the charge; this object holds none of it, so nothing here can be raised, reset or built around another
    mechanism. Rounds start only through the session (:meth:`next_round`).
    """

    def __init__(self, session: Session, charge: Charge) -> None:
        self._session = session
        self._charge = charge

    @property
    def charge(self) -> Charge:
        return self._charge

    @property
    def rounds(self) -> int:
        """The rounds charged (fixed up front)."""
        return self._session.coverage(self._charge).coverage.count

    @property
    def rounds_started(self) -> int:
        return self._session.coverage(self._charge).rounds_started

    def next_round(self, threshold: float) -> AuditedAboveThreshold:
        """Start the next round with a public ``threshold``.

        Raises:
            UncoveredRelease: all charged rounds are used (a :class:`~dpaudit.errors.BudgetExceeded`; nothing is
                drawn).
        """
        return AuditedAboveThreshold(self._session, self._charge, self._session._start_round(self._charge, threshold))


class AuditedAboveThreshold:
    """A view of one AboveThreshold round run by the session: every answer is a release, written to the ledger first.

    Building one by hand gives only another view of a round the session started (its answers are counted in the
    session, keyed by the charge); a round the session did not start answers nothing.
    """

    def __init__(self, session: Session, charge: Charge, round_index: int) -> None:
        if isinstance(round_index, bool) or not isinstance(round_index, int):
            raise InvalidParameter(f"round_index must be an int, got {type(round_index).__name__}")
        self._session = session
        self._charge = charge
        self._round_index = round_index

    @property
    def charge(self) -> Charge:
        return self._charge

    @property
    def round_index(self) -> int:
        return self._round_index

    def _state(self) -> RoundState:
        rounds = self._session.coverage(self._charge).rounds
        return (rounds[self._round_index] if 0 <= self._round_index < len(rounds) else None) or RoundState()

    @property
    def halted(self) -> bool:
        return self._state().halted

    @property
    def queries_made(self) -> int:
        return self._state().answers

    def test(self, value: float) -> bool:
        """Is the (noisy) query above the (noisy) threshold? Refused once halted or past ``max_queries``.

        Raises:
            UncoveredRelease: the round has halted or answered ``max_queries`` queries (nothing is drawn).
            InvalidParameter: ``value`` is not a finite number (the query is not counted).
        """
        return self._session._answer(self._charge, self._round_index, value)


def commit_repetitions(run_dir: Path, charge_seq: int, repetitions: int, rng: RandomSource,
                       clock_frozen_at: float) -> dict[str, Any]:
    """Write the opening of a hiding commitment to K and return the public ``info`` body that commits to it.

    The commitment is sha256 of the canonical JSON of ``{charge_seq, repetitions, salt}`` with a 256-bit random
    salt; the opening goes to ``<run_dir>/confidential/repetitions-<charge_seq>.json`` (neither mirrored nor
    exported), so the run's owner can later prove K to an auditor entitled to see it. The body is the same whatever
    K is, except for the hash.
    """
    opening = {"charge_seq": charge_seq, "repetitions": repetitions, "salt": f"{rng.randbelow(2**256):064x}"}
    write_private(run_dir, f"repetitions-{charge_seq}.json", canonical.dumps(opening))  # mode 0600, folder 0700
    return {"repetitions_commitment": canonical.sha256_hex(canonical.encode(opening)),
            "commitment_scheme": "sha256(canonical JSON of {charge_seq, repetitions, salt}); "
            "opening kept by the run owner, outside the release",
            "clock_frozen_at": clock_frozen_at,
            "clock": "frozen right after this charge, before K was drawn, until the session closes: no record time "
            "from here on depends on K (the K repetitions' duration would reveal K)"}
