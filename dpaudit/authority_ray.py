"""The budget authority as a Ray actor: one process writes the ledger, workers anywhere on the cluster reserve.

:class:`RayBudgetAuthority` hosts one :class:`~dpaudit.authority.BudgetAuthority` (and its session) in the actor's
process. Ray runs the actor's methods one at a time (``max_concurrency=1``), so reservations and releases are
applied in the order the actor receives them; workers (Ray tasks or other actors) call
``authority.reserve.remote(event, key, plugin, mechanism)`` and ``authority.release.remote(grant, output)`` with
their idempotency keys and wait for the reply before drawing noise or handing an output on. A task that Ray re-runs
after its worker died reserves with the same key and gets the same grant (nothing is written twice); a worker that
died for good leaves its grant charged, listed by ``unreleased``. The actor is not restarted by Ray
(``max_restarts=0``): an authority that died is resumed from its ledger with :func:`resume_authority`, which
rebuilds the filter and the keys (:meth:`BudgetAuthority.resume <dpaudit.authority.BudgetAuthority.resume>`).

The ledger and signing key live on the actor's machine: give ``store`` (and ``signing_key``) paths that it sees.
Ray is an optional dependency (``pip install 'dpaudit[ray]'``).

Example:
    >>> authority = start_authority(epsilon=1.0, delta=1e-6, name="trials", store="/shared/runs")  # doctest: +SKIP
    >>> grant = ray.get(authority.reserve.remote(event, "trial-3", "mine", "laplace"))           # doctest: +SKIP
    >>> noisy_value = ray.get(authority.release.remote(grant, noisy_value))                      # doctest: +SKIP
    >>> certificate = ray.get(authority.close.remote())                                          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray

from dpaudit.authority import BudgetAuthority, Grant
from dpaudit.events import PrivacyEvent
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.records import FINISHED
from dpaudit.session import Session


class _AuthorityHost:
    """The actor's body: one budget authority in this process (build it with :func:`start_authority` or
    :func:`resume_authority`).

    Args:
        session_kwargs: the :class:`~dpaudit.session.Session` arguments of a new run, or None with ``resume``.
        resume: ``{"run_id", "store", "signing_key", "rng"}`` of an unclosed run to resume, or None.
    """

    def __init__(self, session_kwargs: Mapping[str, Any] | None, resume: Mapping[str, Any] | None) -> None:
        self._authority = (BudgetAuthority(Session(**session_kwargs)) if resume is None
                           else BudgetAuthority.resume(**resume))

    def run_id(self) -> str:
        """The run id (its folder in the store)."""
        return self._authority.run_id

    def run_dir(self) -> str:
        """The run folder, as the actor's machine names it."""
        return str(self._authority.session.run_dir)

    def reserve(self, event: PrivacyEvent, key: str, plugin: str, mechanism: str) -> Grant:
        """:meth:`BudgetAuthority.reserve <dpaudit.authority.BudgetAuthority.reserve>` (positional for ``.remote``)."""
        return self._authority.reserve(event, key=key, plugin=plugin, mechanism=mechanism)

    def release(self, grant: Grant, output: Any) -> Any:
        """:meth:`BudgetAuthority.release <dpaudit.authority.BudgetAuthority.release>`: the output to hand on."""
        return self._authority.release(grant, output)

    def unreleased(self) -> tuple[Grant, ...]:
        """The grants reserved and never released."""
        return self._authority.unreleased()

    def spent_epsilon(self) -> float:
        """The filter's bound on ε spent so far."""
        return self._authority.session.spent_epsilon()

    def close(self, status: str = FINISHED) -> dict[str, Any]:
        """Close the run and return its signed certificate."""
        return self._authority.close(status)


RayBudgetAuthority = ray.remote(max_concurrency=1, max_restarts=0)(_AuthorityHost)
"""The Ray actor class hosting a :class:`~dpaudit.authority.BudgetAuthority`."""


def start_authority(epsilon: float, delta: float, **session_kwargs: Any) -> Any:
    """Start an authority actor over a new session (``Session(epsilon, delta, **session_kwargs)``, opened in the
    actor's process) and return its handle, once the run's ``open`` record is written.

    Raises:
        DPAuditError: the session could not be opened (its error, raised by Ray here).
    """
    actor = RayBudgetAuthority.remote(dict(session_kwargs, epsilon=epsilon, delta=delta), None)
    ray.get(actor.run_id.remote())  # the session is open (or its error is raised) before the handle is used
    return actor


def resume_authority(run_id: str, *, store: Path | str | None = None, signing_key: Path | str | None = None,
                     rng: RandomSource | None = None) -> Any:
    """Start an authority actor that resumes the unclosed run ``run_id`` (its former authority was killed) and
    return its handle, once the ``resume`` info record is written.

    Raises:
        InvalidParameter, LedgerError: see :meth:`Session.resume <dpaudit.session.Session.resume>`.
    """
    resume = {"run_id": run_id, "store": None if store is None else str(store),
              "signing_key": None if signing_key is None else str(signing_key), "rng": rng}
    actor = RayBudgetAuthority.remote(None, resume)
    ray.get(actor.run_id.remote())
    return actor
