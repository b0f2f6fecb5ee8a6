"""Trials in parallel, with one budget authority: the driver's :class:`~dpaudit.session.Session`.

A tuning run evaluates many trials (randtune's K repetitions, a grid, a BO batch). This module runs such trials
in worker processes, on one machine or on a Ray cluster, without moving any privacy decision out of the driver:

1. the driver charges every event that covers a trial *before* dispatching it (the charge record is fsynced while
   no worker has started), and draws every seed the trial will use from the session's own random source
   (:class:`~dpaudit.mechanisms.randomness.SecureRandom` for a release; a seeded session stays reproducible);
2. a worker runs the trial as a pure function of (public hyperparameters, the data, those seeds) behind a
   :class:`DetachedView`, which can draw only the seeds it was given and refuses every charge, claim, release or
   record: workers never write the ledger;
3. the results come back in submission order (never arrival order), and the driver selects and writes whatever
   is released before anything reaches the user.

Because the seeds are drawn in the driver in the order the sequential loop draws them, and each worker consumes
exactly its own seeds (:meth:`ReplaySeeds.check_exhausted`), ``workers = 1`` (in process, today's path),
``workers = N`` (a process pool) and a Ray cluster give identical results and identical ledgers for a seeded
session. A trial that raises, or whose worker dies, comes back as a :class:`TrialFailure`: its charge stays in the
ledger (the budget was committed before dispatch), and the caller records or reports it; nothing is lost or
refunded. Used by randtune's repetitions, naive's candidates and constant-overhead's partition models
(docs/plugins/randtune.md, docs/plugins/naive.md and docs/plugins/constant-overhead.md, "Parallel trials").
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dpaudit.errors import DPAuditError, InvalidParameter, PluginError, UncoveredRelease
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.sensitivity import Neighbouring
from dpaudit.validation import check_count

S = TypeVar("S")
J = TypeVar("J")
R = TypeVar("R")

PARALLEL_KEYS = frozenset({"workers", "ray_address"})
"""The configuration keys :class:`ParallelOptions` reads (a plugin adds them to its own known keys)."""


class TrialsFailed(DPAuditError):
    """Trials failed in their workers and the caller cannot go on without them: their charges stay in the ledger,
    nothing of theirs was released, and a session this ends closes ``FAILED`` (not a refusal)."""


@dataclass(frozen=True)
class TrialFailure:
    """A trial that produced no result: it raised in its worker, or its worker died.

    Attributes:
        reason: one line, ``"<ExceptionType>: <message>"``.
    """

    reason: str


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _pin_threads() -> None:
    """One intra-op thread per worker (torch, OpenMP, BLAS): N workers on N cores, not N × cores threads fighting
    for them. Set through the environment, which torch reads when it is imported, and directly on a torch that is
    already imported (a worker does not import torch only to pin it)."""
    os.environ.update({name: "1" for name in _THREAD_VARIABLES})
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


class Executor(ABC):
    """Runs ``fn(shared, job)`` for each job; results in submission order. Use as a context manager."""

    workers: int

    @abstractmethod
    def map(self, fn: Callable[[S, J], R], shared: S, jobs: Sequence[J]) -> list[R | TrialFailure]:
        """``[fn(shared, job) for job in jobs]``, each a :class:`TrialFailure` if it raised or its worker died.

        ``shared`` (the data, the public configuration) is sent to each worker once; ``fn`` must be importable
        (a module-level function) for the parallel executors.
        """

    def close(self) -> None:  # noqa: B027 - by default there is nothing to release
        """Release the workers."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SequentialExecutor(Executor):
    """``workers = 1``: every job in this process, one after another (the sequential path)."""

    workers = 1

    def map(self, fn: Callable[[S, J], R], shared: S, jobs: Sequence[J]) -> list[R | TrialFailure]:
        outcomes: list[R | TrialFailure] = []
        for job in jobs:
            try:
                outcomes.append(fn(shared, job))
            except Exception as exc:  # a failed trial is an outcome; KeyboardInterrupt still stops the run
                outcomes.append(TrialFailure(_reason(exc)))
        return outcomes


_SHARED: Any = None  # a pool worker's copy of ``shared``, set once by its initializer


def _init_pool_worker(shared: Any) -> None:
    global _SHARED
    _pin_threads()
    _SHARED = shared


def _pool_call(fn: Callable[[Any, J], R], job: J) -> R:
    return fn(_SHARED, job)


class ProcessExecutor(Executor):
    """``workers = N``: a pool of N processes on this machine (forked from a clean fork server), one thread each."""

    def __init__(self, workers: int) -> None:
        self.workers = check_count("workers", workers)

    def map(self, fn: Callable[[S, J], R], shared: S, jobs: Sequence[J]) -> list[R | TrialFailure]:
        if not jobs:
            return []
        # workers are forked from a fork server: a fresh single-threaded process (none of the driver's threads,
        # locks or CUDA state), which imports ``fn``'s and ``shared``'s modules once, so a worker starts without
        # re-importing torch
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(dict.fromkeys([fn.__module__, type(shared).__module__])))
        # a pool per map: a worker that died breaks only this batch's pool, never a later batch
        with concurrent.futures.ProcessPoolExecutor(
                max_workers=min(self.workers, len(jobs)), mp_context=context,
                initializer=_init_pool_worker, initargs=(shared,)) as pool:
            outcomes: list[R | TrialFailure] = []
            for future in [_submit(pool, fn, job) for job in jobs]:
                try:
                    outcomes.append(future.result())
                except concurrent.futures.process.BrokenProcessPool as exc:
                    outcomes.append(TrialFailure(f"worker process died: {_reason(exc)}"))
                except Exception as exc:
                    outcomes.append(TrialFailure(_reason(exc)))
        return outcomes


def _submit(pool: concurrent.futures.ProcessPoolExecutor, fn: Callable[[Any, J], R],
            job: J) -> concurrent.futures.Future:
    """Submit ``job``; once a worker has died the pool refuses new jobs, and such a job is a failed trial too."""
    try:
        return pool.submit(_pool_call, fn, job)
    except concurrent.futures.process.BrokenProcessPool as exc:
        refused: concurrent.futures.Future = concurrent.futures.Future()
        refused.set_exception(exc)
        return refused


def _ray_call(fn: Callable[[Any, J], R], shared: Any, job: J) -> R:
    _pin_threads()
    return fn(shared, job)


class RayExecutor(Executor):
    """Ray tasks: on the cluster at ``address``, or a local Ray with ``workers`` CPUs (``ray.init(num_cpus=N)``).

    Each trial is one task of one CPU with ``max_retries=0``: a trial whose worker died is reported as failed,
    never silently re-run. A Ray already initialised by the caller is used as it is and left running.
    """

    def __init__(self, workers: int, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - ray is an optional extra
            raise InvalidParameter("ray_address needs Ray: pip install 'dpaudit[ray]'") from exc
        self.workers = check_count("workers", workers)
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            if address is None:
                ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        self._call = ray.remote(num_cpus=1, max_retries=0)(_ray_call)

    def map(self, fn: Callable[[S, J], R], shared: S, jobs: Sequence[J]) -> list[R | TrialFailure]:
        ray = self._ray
        shared_ref = ray.put(shared)
        refs = [self._call.remote(fn, shared_ref, job) for job in jobs]
        outcomes: list[R | TrialFailure] = []
        for ref in refs:
            try:
                outcomes.append(ray.get(ref))
            except ray.exceptions.RayTaskError as exc:  # the trial raised: report its own exception
                outcomes.append(TrialFailure(_reason(exc.cause) if exc.cause is not None else _reason(exc)))
            except ray.exceptions.RayError as exc:  # the worker or its node died
                outcomes.append(TrialFailure(f"worker process died: {_reason(exc)}"))
        return outcomes

    def close(self) -> None:
        if self._owned:
            self._ray.shutdown()


@dataclass(frozen=True)
class ParallelOptions:
    """Where a plugin's trials run; public, and without effect on any result or ledger record.

    Attributes:
        workers: 1 (in this process, sequentially) or N parallel workers (a local process pool, or N CPUs of a
            local Ray when ``ray_address`` is ``"local"``).
        ray_address: None (no Ray), ``"local"`` (start a local Ray with ``workers`` CPUs) or the address of a
            running Ray cluster (``"auto"``, ``"ray://host:10001"``, ...).
    """

    workers: int = 1
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int):
            raise InvalidParameter(f"workers must be a positive integer, got {self.workers!r}")
        check_count("workers", self.workers)
        if self.ray_address is not None and (not isinstance(self.ray_address, str) or not self.ray_address):
            raise InvalidParameter(f"ray_address must be a non-empty string, got {self.ray_address!r}")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ParallelOptions:
        """The ``workers`` and ``ray_address`` keys of a plugin configuration (other keys are the caller's).

        Raises:
            InvalidParameter: a non-positive or non-integer ``workers``, or an empty ``ray_address``.
        """
        return cls(workers=config.get("workers", 1), ray_address=config.get("ray_address"))

    def executor(self) -> Executor:
        """The executor these options name (a context manager: close it to release the workers)."""
        if self.ray_address is not None:
            return RayExecutor(self.workers, None if self.ray_address == "local" else self.ray_address)
        return SequentialExecutor() if self.workers == 1 else ProcessExecutor(self.workers)


class ReplaySeeds(RandomSource):
    """A worker's random source: exactly the draws the driver made for its trial, in order, then nothing.

    The driver draws each value from the session's source (:func:`predraw`), so a worker's randomness is the
    session's (a CSPRNG for a release); the worker cannot draw more than it was given, nor a different range.
    """

    def __init__(self, draws: Sequence[tuple[int, int]], for_release: bool) -> None:
        self._draws = list(draws)
        self._next = 0
        self.for_release = for_release

    def randbelow(self, n: int) -> int:
        if self._next >= len(self._draws):
            raise PluginError(f"a trial in a worker drew more than the {len(self._draws)} values its driver drew "
                              "for it")
        bound, value = self._draws[self._next]
        if bound != n:
            raise PluginError(f"a trial in a worker asked for a value below {n}; its driver drew one below {bound}")
        self._next += 1
        return value

    def check_exhausted(self) -> None:
        """Raises PluginError unless every pre-drawn value was used (the driver's and the worker's plans agree)."""
        if self._next != len(self._draws):
            raise PluginError(f"a trial in a worker used {self._next} of the {len(self._draws)} values its driver "
                              "drew for it")

    def describe(self) -> dict[str, Any]:
        return {"kind": "replay", "draws": len(self._draws), "for_release": self.for_release}


def predraw(rng: RandomSource, bound: int, count: int) -> tuple[tuple[int, int], ...]:
    """``count`` values below ``bound`` drawn from ``rng`` now, for a worker's :class:`ReplaySeeds`."""
    return tuple((bound, rng.randbelow(bound)) for _ in range(count))


class DetachedView:
    """What a trial running in a worker sees of the session: its seeds, the device, the neighbouring relation and
    the charges the driver made for it. Every other attribute of a session view (charge, claim, release, records,
    data, MLflow) is refused: those are the driver's.

    Args:
        rng: the trial's :class:`ReplaySeeds`.
        device: the torch device name (``"cpu"``, ``"cuda"``).
        neighbouring: the session's relation.
        charges: sequence numbers of the driver's charges that cover this trial (:meth:`holds`).
    """

    def __init__(self, rng: ReplaySeeds, device: str, neighbouring: Neighbouring, charges: Sequence[int]) -> None:
        self.rng = rng
        self._device = device
        self.neighbouring = Neighbouring(neighbouring)
        self._charges = frozenset(charges)
        self._begun: set[int] = set()

    @property
    def device(self) -> Any:  # -> torch.device
        import torch

        return torch.device(self._device)

    def holds(self, charge: Any) -> bool:
        """Whether the driver charged ``charge`` for this trial."""
        return charge.seq in self._charges

    def start_claimed_run(self, charge: Any) -> None:
        """Begin the one run the driver claimed ``charge`` for (:meth:`Session.start_claimed_run
        <dpaudit.session.Session.start_claimed_run>`): a trial's view trains once per charge.

        Raises:
            UncoveredRelease: not a charge of this trial, or its run has begun.
        """
        if charge.seq not in self._charges or charge.seq in self._begun:
            raise UncoveredRelease(f"charge {charge.seq}: not claimed for this trial, or its run has begun (one run "
                                   "per claimed charge)")
        self._begun.add(charge.seq)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise PluginError(f"a trial running in a worker cannot use {name!r}: charges, releases, records and data "
                          "access belong to the driver's session")
