"""One budget authority: workers reserve budget and release outputs through it; only it writes the ledger.

A tuning run of tens of trials, each in its own thread, process or cluster worker, must still spend one budget
and write one hash chain. Every system that keeps a privacy budget across workers keeps it in one authority with a
reserve → release protocol (Luo et al., *Privacy Budget Scheduling*, OSDI 2021; PipelineDP's driver-side
accountant). :class:`BudgetAuthority` is that authority over one :class:`~dpaudit.session.Session`:

* :meth:`BudgetAuthority.reserve` ``(event, key=...)`` admits the event through the session's budget filter and
  returns a :class:`Grant` only after the ``charge`` record (holding ``key``) is appended and fsynced. It is
  idempotent by ``key``: a retried reserve (a worker that timed out, a task the cluster re-ran) gets the same grant
  and writes nothing; the same key with another event, plugin or mechanism is refused. The session keeps the key
  map and checks it under its budget lock (:meth:`Session.charge <dpaudit.session.Session.charge>`), so two
  authorities on one session, or a direct keyed charge, never charge a key twice; a closed session refuses any key.
* :meth:`BudgetAuthority.release` ``(grant, output)`` writes the ``release`` record (fsynced) and returns the
  output; only then may the worker hand it on. A later release of the grant (a retry whose reply was lost, or a task
  the cluster re-ran, which drew fresh noise) writes nothing and returns the output released first, whatever it is
  given: the worker hands on what ``release`` returns. Neither its answer nor its success depends on the new
  output, so a re-run's fresh draw stays unpublished (were a retry accepted only when its output equalled the
  first, its success would be a second, uncharged sample of the mechanism).
* A grant whose worker died is never refunded: its noise may have been drawn. It stays in the composition and in the
  certificate, and :meth:`BudgetAuthority.unreleased` (and the ``info`` record of a resume) lists it as "reserved,
  never released".
* :meth:`BudgetAuthority.resume` reopens the ledger of an authority whose process was killed
  (:meth:`Session.resume <dpaudit.session.Session.resume>`), with every grant and key it had made, and continues.

Workers never touch the ledger or its hash chain: they hold grants (plain, picklable values) and call the authority.
In one process the workers are threads calling one object; on a cluster the authority is a Ray actor
(:mod:`dpaudit.authority_ray`) and workers call it remotely. The arithmetic of admission is the session's
(:mod:`dpaudit.budget`): sums of ε are exact and rounded upward (:func:`dpaudit.accounting.basic.sum_rounded_up`),
RDP sums carry a rounding margin (:class:`~dpaudit.accounting.rdp.RunningRdp`), so many small charges cannot drift
past the cap.

Example:
    >>> with BudgetAuthority(Session(epsilon=1.0, delta=1e-6, name="trials")) as authority:   # doctest: +SKIP
    ...     grant = authority.reserve(event, key="trial-3/step-0", plugin="mine", mechanism="laplace")
    ...     noisy_value = authority.release(grant, noisy_value)   # recorded before the worker hands it on
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import canonical
from dpaudit.errors import InvalidParameter, UncoveredRelease
from dpaudit.events import PrivacyEvent
from dpaudit.ledger import Record, read_records
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.records import FINISHED, RELEASE, ReleaseBody
from dpaudit.session import Session, _jsonable
from dpaudit.sidecar import ArrayFile, check_array_file, wants_sidecar

IN_SIDECAR = object()
"""A released output kept in a sidecar file, read back (by its ledger record) only when a retry asks for it."""

MAX_KEY_CHARS = 200
"""The longest idempotency key (a key is public: it is written in the charge record)."""


@dataclass(frozen=True)
class Grant:
    """A reservation: budget charged, and its ``charge`` record fsynced, before the grant was returned.

    Attributes:
        key: the idempotency key it was reserved with.
        seq: the sequence number of its ``charge`` record.
        run_id: the run whose ledger holds it.
    """

    key: str
    seq: int
    run_id: str


def _check_json(output: Any) -> None:
    """Refuse an output without a canonical JSON form before anything is written.

    Raises:
        InvalidParameter: the output has no canonical JSON form (NaN or infinity, a set, an arbitrary object).
    """
    try:
        canonical.encode(_jsonable(output))
    except (TypeError, ValueError, RecursionError) as err:
        raise InvalidParameter(f"a released output must be JSON data (finite numbers, strings, lists, mappings, "
                               f"numpy arrays): {err}") from None


class BudgetAuthority:
    """The one writer of a session's ledger for many workers: idempotent reservations, releases recorded first.

    Thread-safe: reservations and releases run concurrently (the session serialises the ledger appends, and checks
    keys, under its budget lock, so a key is charged at most once); releases of one key are serialised, so a retried
    release writes nothing.

    Args:
        session: an open session; the authority makes every charge and release of its workers through it.
    """

    def __init__(self, session: Session) -> None:
        if not isinstance(session, Session):
            raise InvalidParameter(f"a budget authority needs a Session, got {type(session).__name__}")
        self._session = session
        self._lock = threading.Lock()  # guards the dicts below
        self._key_locks: dict[str, threading.Lock] = {}
        # key → the released output; an ArrayFile for one kept in a sidecar file, IN_SIDECAR until that is read back
        self._released: dict[str, Any] = {}
        self._learn(read_records(session.ledger_path)[0])  # releases of keyed charges a resumed ledger holds

    @classmethod
    def resume(cls, run_id: str, *, store: Path | str | None = None, signing_key: Path | str | None = None,
               rng: RandomSource | None = None, mirror: bool = False,
               tracking_uri: str | None = None) -> BudgetAuthority:
        """The authority of the unclosed run ``run_id`` whose process was killed, continued from its ledger.

        Its grants (each key is recorded in its charge record; the session rebuilds its key map) and releases are
        read back, so a worker that retries a reserve or a release with its key after the restart gets the same
        grant, or the output released before, as before it; a worker holding a grant from before the restart still
        releases.

        Args:
            run_id, store, signing_key, rng, mirror, tracking_uri: as for
                :meth:`Session.resume <dpaudit.session.Session.resume>` (``mirror`` continues the MLflow mirror).

        Raises:
            InvalidParameter, LedgerError: see :meth:`Session.resume <dpaudit.session.Session.resume>`.
        """
        return cls(Session.resume(run_id, store=store, signing_key=signing_key, rng=rng, mirror=mirror,
                                  tracking_uri=tracking_uri))

    def _learn(self, records: list[Record], only: str | None = None) -> None:
        """Read the releases of keyed charges back from ``records`` (a resumed ledger's; the session holds its keys),
        or only the release of key ``only``."""
        keys = {seq: key for key, seq in self._session.keyed_seqs() if only is None or key == only}
        for record in records:
            if record.type == RELEASE:
                body = ReleaseBody.from_dict(record.body)
                key = keys.get(body.charge_seq)
                if key is not None:
                    self._released[key] = body.output if body.output_file is None else body.output_file

    @property
    def session(self) -> Session:
        """The session the authority charges (its budget, run id and certificate)."""
        return self._session

    @property
    def run_id(self) -> str:
        return self._session.run_id

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def reserve(self, event: PrivacyEvent, *, key: str, plugin: str, mechanism: str) -> Grant:
        """Charge ``event`` once per ``key``: the ``charge`` record (with the key) is fsynced before the grant.

        The session keeps keys unique (:meth:`Session.charge <dpaudit.session.Session.charge>`, under its budget
        lock), so two authorities on one session, or a direct keyed charge, never charge a key twice.

        Args:
            event: the privacy event the worker's release will be.
            key: the idempotency key, unique per reservation (e.g. ``"trial-3/step-17"``); public, at most
                :data:`MAX_KEY_CHARS` characters.
            plugin: the charging plugin's name.
            mechanism: the mechanism's name.

        Returns:
            The grant; the same grant, with nothing written, when ``key`` was reserved before for the same event,
            plugin and mechanism.

        Raises:
            InvalidParameter: a bad key or name, or a key reserved before for another event, plugin or mechanism.
            DPAuditError: the session is closed (a retried key included).
            BudgetExceeded: the budget cannot pay for it (nothing is written; a later retry is decided afresh).
            UnsupportedEvent: see :meth:`Session.charge <dpaudit.session.Session.charge>`.
        """
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
            raise InvalidParameter(f"an idempotency key must be a string of 1 to {MAX_KEY_CHARS} characters, "
                                   f"got {key!r}")
        charge = self._session.charge(event, plugin=plugin, mechanism=mechanism, key=key)
        return Grant(key, charge.seq, self._session.run_id)

    def release(self, grant: Grant, output: Any) -> Any:
        """Write the ``release`` record of ``grant``'s output, fsynced, and return the output the worker may hand on.

        The first release of a grant records ``output`` and returns it. A later one (a retry, a re-run task) writes
        nothing and returns a copy of the output released first (an array as an array; after a resume, as the ledger
        holds it; an array large enough for a sidecar file read back from that file, so the authority never holds
        it), whatever ``output`` is: hand on what this returns, never a re-run's own draw (module docstring).

        Raises:
            InvalidParameter: not a grant of this authority's run, or the output holds a confidential key or has no
                JSON form.
            UncoveredRelease: the output is not what the charge covers
                (:meth:`Session.record_release <dpaudit.session.Session.record_release>`); or the sidecar file of the
                output released first no longer holds it.
        """
        if not isinstance(grant, Grant):
            raise InvalidParameter(f"release needs a Grant, got {type(grant).__name__}")
        charge = self._session.keyed_charge(grant.key) if isinstance(grant.key, str) else None
        if grant.run_id != self._session.run_id or charge is None or charge.seq != grant.seq:
            raise InvalidParameter(f"grant {grant.key!r} (charge {grant.seq}) was not made by this authority's run "
                                   f"{self._session.run_id}")
        _check_json(output)
        with self._key_lock(grant.key):
            with self._lock:
                known, released = grant.key in self._released, self._released.get(grant.key)
            if known:
                if released is IN_SIDECAR:  # its file is named in the ledger's release record
                    self._learn(read_records(self._session.ledger_path)[0], only=grant.key)
                    with self._lock:
                        released = self._released[grant.key]
                return self._read_back(grant, released)
            self._session.record_release(charge, output)
            with self._lock:  # a copy (a sidecar array is not held twice): the caller may change its object
                self._released[grant.key] = (IN_SIDECAR if wants_sidecar(output) else
                                             np.array(output, copy=True) if isinstance(output, np.ndarray)
                                             else _jsonable(output))
            return output

    def _read_back(self, grant: Grant, released: Any) -> Any:
        """The output released first for ``grant``: as kept, or read from its sidecar file."""
        if not isinstance(released, ArrayFile):
            return copy.deepcopy(released)  # the caller may change what it is handed; the next retry gets the ledger's
        problem = check_array_file(self._session.run_dir, released)
        if problem is not None:
            raise UncoveredRelease(f"grant {grant.key!r} (charge {grant.seq}) was released before; its output "
                                   f"cannot be read back: {problem}")
        return np.load(Path(self._session.run_dir) / released.path, allow_pickle=False)

    def unreleased(self) -> tuple[Grant, ...]:
        """The grants of the session's keyed charges that this authority has not seen released: reserved, never
        released (a worker still running, or one that died), in charge order. They stay charged: the certificate
        composes them like every other charge."""
        with self._lock:
            released = set(self._released)
        return tuple(Grant(key, seq, self._session.run_id) for key, seq in self._session.keyed_seqs()
                     if key not in released)

    def close(self, status: str = FINISHED) -> dict[str, Any]:
        """Close the session and return its signed certificate (:meth:`Session.close
        <dpaudit.session.Session.close>`); grants never released are in it, charged."""
        return self._session.close(status=status)

    def __enter__(self) -> BudgetAuthority:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._session.__exit__(exc_type, exc, tb)
