"""Reading an unclosed run's ledger so that its session can continue: what :meth:`dpaudit.Session.resume` rebuilds.

A session (or a budget authority, :mod:`dpaudit.authority`) whose process was killed leaves a ledger without a
``close`` record. Its budget, accountant, neighbouring relation and data sets are in the ``open`` record, and every
charge it granted is in a fsynced ``charge`` record, so from a whole ledger the filter is rebuilt as it was: the
same events, committed in the same order, with the bounds recorded at the time. A charge without a ``release``
record stays charged (its noise may have been drawn before the kill); it is "reserved, never released" unless a
worker that still holds its grant releases it later through the authority.

:func:`check_resumable` checks the ledger (chain intact, a torn final append only, bound to this folder and store,
never closed, not cut before its signed head checkpoint, :mod:`dpaudit.head`), the key and the randomness source
without writing anything; :func:`check_accounting` that the accountant is the recorded one; :func:`point_of` reads
what the ledger holds; :func:`resume_info` is the body of the ``info`` record the resumed session appends first, so
an auditor sees where the process was restarted. The record is ``info``, not a new record type: it is never used
for accounting, and readers of older ledgers (verify, reports, the mirror) need no change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.certificate import open_body
from dpaudit.coverage import CoverageState, RoundState, after_release, unused
from dpaudit.errors import InvalidParameter, UncoveredRelease
from dpaudit.events import PrivacyEvent
from dpaudit.head import check_head
from dpaudit.ledger import Record
from dpaudit.mechanisms.outputs import AboveThresholdRound, TrainingRun
from dpaudit.records import CHARGE, CLOSE, INFO, RELEASE, ChargeBody, OpenBody, ReleaseBody
from dpaudit.recovery import _bound_run, _run_key, intact_records

RESUME_INFO = "resume"
"""The key of the ``info`` body a resumed session writes first."""


@dataclass(frozen=True)
class ResumePoint:
    """What an unclosed ledger says about its session.

    Attributes:
        run_dir: the run folder.
        opened: the ``open`` record's body (budget, accountant, relation, data sets, key fingerprint).
        charges: (seq, body) of every ``charge`` record, in ledger order.
        released: charge seq → the outputs released under it (as :attr:`ReleaseBody.released`), for the charges
            that have a ``release`` record.
        records: how many whole records the ledger holds.
        head: the hash of its last whole record.
    """

    run_dir: Path
    opened: OpenBody
    charges: tuple[tuple[int, ChargeBody], ...]
    released: Mapping[int, tuple[Any, ...]]
    records: int
    head: str

    @property
    def unreleased(self) -> tuple[int, ...]:
        """The seqs of the charges without a release record (reserved, never released; still counted)."""
        return tuple(seq for seq, _ in self.charges if seq not in self.released)


def check_resumable(run_dir: Path, root: Path, signing_key: Path, randomness: Mapping[str, Any]):
    """(the run's signing key, its ``open`` body), after checking without writing anything that the run in
    ``run_dir`` (a folder of the store ``root``) can be resumed: an intact ledger (a torn final append aside), bound
    to this folder and store, never closed, reaching its signed head checkpoint (:func:`dpaudit.head.check_head`),
    ``signing_key`` the key its ``open`` record names and ``randomness`` (a source's description) acceptable
    (:func:`_check_randomness`).

    Raises:
        LedgerError: the ledger is damaged, names another run or store, or ends before its head checkpoint (or the
            checkpoint is missing or not signed by the run key).
        InvalidParameter: the run has a ``close`` record, the key is missing or not the run's, or the randomness is
            refused.
    """
    records, _ = intact_records(run_dir / run_store.LEDGER)
    _bound_run(run_dir, root, records)
    closes = [r.seq for r in records if r.type == CLOSE]
    if closes:
        raise InvalidParameter(f"run {run_dir.name} is closed (close record {closes[0]}): a closed run cannot be "
                               "resumed, whatever was appended after its close (open a new Session)")
    key = _run_key(run_dir, records, signing_key, root)
    check_head(run_dir, records, key)
    _check_randomness(run_dir.name, records, randomness)
    return key, open_body(records)


def _check_randomness(run: str, records: Sequence[Record], randomness: Mapping[str, Any]) -> None:
    """Refuse a randomness source that is of another kind than the run's, or that would replay its noise.

    A secure source must describe itself as the ``open`` record's does. A seeded source (tests only; its certificate
    is "not for release") must be seeded anew: the same seed would restart its stream and draw again the noise of
    releases already made, so a seed already used by the run (at open or at an earlier resume, named in the
    :data:`RESUME_INFO` records) is refused.

    Raises:
        InvalidParameter: another kind of source, or a seeded source with a seed the run used before.
    """
    opened, given = dict(open_body(records).randomness), dict(randomness)
    seeded = opened.get("kind") == "seeded"
    if ({k: v for k, v in given.items() if k != "seed"} if seeded else given) != (
            {k: v for k, v in opened.items() if k != "seed"} if seeded else opened):
        raise InvalidParameter(f"run {run} was opened with randomness {opened}, not {given}: resume it with the same "
                               "kind of source")
    used = [opened.get("seed"), *(r.body["info"][RESUME_INFO].get("randomness", {}).get("seed") for r in records
                                  if r.type == INFO and RESUME_INFO in r.body.get("info", {}))]
    if seeded and given.get("seed") in used:
        raise InvalidParameter(f"run {run} draws from a seeded source and has used the seeds {used}: resuming it with "
                               f"seed {given.get('seed')} would restart a stream and replay noise already released; "
                               "pass rng=SeededRandom(<a seed the run has not used>) explicitly")


def check_accounting(run: str, opened: OpenBody, accountant: Mapping[str, str],
                     adaptive: Mapping[str, Any] | None) -> None:
    """Refuse to resume a run with accounting other than the one its ``open`` record names: the rebuilt accountant's
    ``{name, version}`` and the adaptive filter's description must be the recorded ones (a run opened under
    ``pld/3`` is not continued under ``pld/4``: its charges were admitted by the other bound).

    Raises:
        InvalidParameter: the accounting differs; ``dpaudit recover RUN`` closes the run as it stands instead.
    """
    recorded = (canonical.encode(dict(opened.accountant)),
                canonical.encode(None if opened.adaptive is None else dict(opened.adaptive)))
    if recorded != (canonical.encode(dict(accountant)), canonical.encode(None if adaptive is None else dict(adaptive))):
        raise InvalidParameter(f"run {run} was accounted by {dict(opened.accountant)} (adaptive filter "
                               f"{opened.adaptive}), but this dpaudit would continue it with {dict(accountant)} "
                               f"({adaptive}): it is not resumed; run `dpaudit recover {run}` to close it as it stands")


def point_of(run_dir: Path, records: list[Record]) -> ResumePoint:
    """The resume point of ``records`` (an unclosed ledger's, as :meth:`~dpaudit.ledger.Ledger.open` read them)."""
    charges = tuple((r.seq, ChargeBody.from_dict(r.body)) for r in records if r.type == CHARGE)
    released: dict[int, tuple[Any, ...]] = {}
    for r in records:
        if r.type == RELEASE:
            body = ReleaseBody.from_dict(r.body)
            released[body.charge_seq] = (*released.get(body.charge_seq, ()), body.released)
    return ResumePoint(run_dir, open_body(records), charges, released, len(records), records[-1].hash)


def resumed_coverage(event: PrivacyEvent, outputs: Sequence[Any]) -> CoverageState | None:
    """What a charge made before the restart may still release, conservatively; None for an event without a release
    rule (nothing can be released against it, as in the session that made it).

    Only releases are in the ledger. Training runs claimed and AboveThreshold rounds started are not, and a round's
    noisy threshold died with the process, so every training run of the charge counts as claimed and every round as
    started and halted: none can run again. Outputs of other units are replayed
    (:func:`~dpaudit.coverage.after_release`), so a charge releases at most what it covers, across the restart.
    """
    try:
        state = unused(event)
    except UncoveredRelease:
        return None
    unit, count = state.coverage.unit, state.coverage.count
    if isinstance(unit, AboveThresholdRound):
        return replace(state, rounds=tuple(RoundState(halted=True) for _ in range(count)))
    if isinstance(unit, TrainingRun):
        state = replace(state, claims=count)
    for output in outputs:
        state = after_release(state, output)
    return state


def resume_info(point: ResumePoint, repairs: tuple[str, ...], randomness: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``info`` body a resumed session appends: the ledger it continues, its charges, the ones never released,
    any repair of a torn final append (:meth:`dpaudit.ledger.Ledger.open`) and the randomness source it continues
    with (a seeded source's seed, so that no later resume reuses it)."""
    return {RESUME_INFO: {"after_records": point.records, "after_head": point.head, "charges": len(point.charges),
                          "unreleased_charges": list(point.unreleased), "repairs": list(repairs),
                          "randomness": dict(randomness)}}
