"""The ``randtune`` plugin: private selection with a random number of DP-SGD repetitions (docs/plugins/randtune.md).

Liu & Talwar 2019 (geometric K) and Papernot & Steinke 2022 (truncated negative binomial, Poisson): draw K, run K
repetitions, each training a candidate drawn uniformly from the public grid with DP-SGD, and release only the best
repetition by accuracy on the public validation half. One :class:`~dpaudit.events.RepeatAndSelectEvent` is charged
before K is drawn and before any training; the repetitions charge nothing of their own.

The repetitions are independent given their candidate index and seeds, so they may run in parallel (``workers``,
``ray_address``; :mod:`dpaudit.parallel`): the driver draws every repetition's index and seeds from the session's
randomness in the sequential order, each worker trains one repetition behind a
:class:`~dpaudit.parallel.DetachedView` (which can write nothing), and the driver selects and releases the best.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from torch import nn

from dpaudit.data.catalog import FINAL_TEST_NAME, TRAIN_NAME, VALIDATION_NAME
from dpaudit.parallel import TrialFailure, TrialsFailed, predraw
from dpaudit.tuning import (
    MECHANISMS,
    SEED_RANGE,
    SEEDS_PER_TRAINING,
    Candidate,
    TrainResult,
    accuracy,
    candidate_event,
    tuning_data,
)
from dpaudit.tuning.detached import WorkerInputs, train_replayed
from dpaudit_plugins.randtune.base_event import dominating_event
from dpaudit_plugins.randtune.config import RandTuneConfig

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge, Session

T = TypeVar("T")

PLUGIN_NAME = "randtune"
VERSION = "0.1.0"
SEEDS_PER_REPETITION = SEEDS_PER_TRAINING
"""The seeds one repetition draws from its view's randomness (:data:`~dpaudit.tuning.SEEDS_PER_TRAINING`); a
worker that draws another number fails (:meth:`~dpaudit.parallel.ReplaySeeds.check_exhausted`)."""


@dataclass(frozen=True)
class RandTuneOutcome:
    """What a ``randtune`` run produced.

    Attributes:
        public: the public results (what :func:`run` returns; everything in it is covered by the certificate).
        model: the selected model (None when K = 0).
        repetitions: CONFIDENTIAL: the realised K. Publishing it is not covered by the guarantee.
        validation_scores: CONFIDENTIAL: every repetition's (candidate index, public validation accuracy).
        wall_time_s: CONFIDENTIAL: seconds spent (it grows with K).
    """

    public: dict[str, Any]
    model: nn.Module | None
    repetitions: int
    validation_scores: tuple[tuple[int, float], ...]
    wall_time_s: float


def tune(session: Session, config: Mapping[str, Any]) -> RandTuneOutcome:
    """Run random-repetition tuning inside ``session`` (module docstring).

    Raises:
        InvalidParameter: a bad configuration.
        PluginError: the session does not protect ``adult-train``, or the grid has no dominating base event.
        BudgetExceeded: the session cannot pay for the repeat-and-select (nothing is drawn or trained).
        TrialsFailed: a repetition raised or its worker died (nothing is released; the charge stays).
    """
    start = time.perf_counter()
    cfg = RandTuneConfig.from_mapping(config)
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    options = cfg.options
    data = tuning_data(view, options.train_rows, options.test_rows)
    mechanism = f"{MECHANISMS[options.optimizer]} {options.model} on {TRAIN_NAME}"
    events = [candidate_event(c, len(data.y_train), mechanism) for c in cfg.candidates]
    base = dominating_event(events, f"one repetition: {mechanism}, a candidate drawn uniformly from the grid")
    view.record_info({
        "candidates": [c.to_dict() for c in cfg.candidates],
        "distribution": cfg.distribution, "parameters": dict(cfg.parameters),
        "base_event": {"sample_rate": base.sample_rate, "noise_multiplier": base.noise_multiplier,
                       "steps": base.steps},
        "selection": f"best accuracy on {VALIDATION_NAME}; ties by candidate index, then model digest",
    })
    charge, repetitions = view.repeat_and_select(base, cfg.distribution, cfg.parameters,
                                                 label=f"best of K repetitions by accuracy on {VALIDATION_NAME}")
    shared = RepetitionInputs(training=WorkerInputs.of(view, data, options), candidates=cfg.candidates,
                              charge=charge, label=mechanism)
    # in the order the sequential loop draws them: each repetition's candidate index, then its seeds
    jobs = [Repetition(index=view.rng.randbelow(len(cfg.candidates)),
                       seeds=predraw(view.rng, SEED_RANGE, SEEDS_PER_REPETITION)) for _ in range(repetitions)]
    with cfg.parallel.executor() as executor:
        outcomes = executor.map(run_repetition, shared, jobs)
    failed = [o for o in outcomes if isinstance(o, TrialFailure)]
    if failed:  # nothing is released; the repeat-and-select charge stays in the ledger and the run fails
        raise TrialsFailed(f"{len(failed)} randtune repetition(s) failed, first: {failed[0].reason}; nothing was "
                          "released, the repeat-and-select charge stays")
    scores = [(job.index, score) for job, (score, _, _) in zip(jobs, outcomes, strict=True)]
    best = select_best((job.index, score, digest, (score, result))
                       for job, (score, digest, result) in zip(jobs, outcomes, strict=True))
    public: dict[str, Any] = {"method": PLUGIN_NAME, "distribution": cfg.distribution,
                              "parameters": dict(cfg.parameters), "charge_seq": charge.seq,
                              "public_data": [VALIDATION_NAME, FINAL_TEST_NAME]}
    if best is None:
        view.record_release(charge, {"selected": None})
        public.update(selected=None, candidate_index=None, validation_accuracy=None, test_accuracy=None)
        model = None
    else:
        index, digest, (score, result) = best
        view.record_release(charge, {"candidate_index": index, "candidate": cfg.candidates[index].to_dict(),
                                        "model_sha256": digest, "validation_accuracy": score})
        test_accuracy = accuracy(result, data.X_test, data.y_test, view)
        view.log_public_metrics({"test_accuracy": test_accuracy})
        public.update(selected=cfg.candidates[index].to_dict(), candidate_index=index, model_sha256=digest,
                      validation_accuracy=score, test_accuracy=test_accuracy)
        model = result.model
    return RandTuneOutcome(public=public, model=model, repetitions=repetitions, validation_scores=tuple(scores),
                           wall_time_s=time.perf_counter() - start)


@dataclass(frozen=True)
class RepetitionInputs:
    """What every repetition shares, sent to each worker once: the training inputs, the public grid, the covering
    repeat-and-select charge and its event's label."""

    training: WorkerInputs
    candidates: tuple[Candidate, ...]
    charge: Charge
    label: str


@dataclass(frozen=True)
class Repetition:
    """One repetition: the candidate index and the :data:`SEEDS_PER_REPETITION` seeds the driver drew for it."""

    index: int
    seeds: tuple[tuple[int, int], ...]


def run_repetition(shared: RepetitionInputs, job: Repetition) -> tuple[float, str, TrainResult]:
    """Train candidate ``job.index`` under the repeat-and-select charge in a worker
    (:func:`~dpaudit.tuning.detached.train_replayed`).

    Returns:
        (accuracy on the public validation half, model digest, the training result).
    """
    result, score = train_replayed(shared.training, shared.candidates[job.index], job.seeds, shared.charge,
                                   shared.label, claimed=False)
    return score, result.model_sha256, result


def select_best(results: Iterable[tuple[int, float, str, T]]) -> tuple[int, str, T] | None:
    """The best of ``(candidate index, score, model digest, payload)`` results under the fixed public total order
    (score, then the higher candidate index, then the larger digest); a larger score is better.

    Returns:
        (index, digest, payload) of the best, or None when there is none (K = 0).
    """
    best: tuple[tuple[float, int, str], T] | None = None
    for index, score, digest, payload in results:
        key = (score, index, digest)
        if best is None or key > best[0]:
            best = (key, payload)
    if best is None:
        return None
    (_, index, digest), payload = best
    return index, digest, payload


def best_of_repetitions(view: PluginSession, n_candidates: int, repetitions: int,
                        repetition: Callable[[int], tuple[float, str, T]]) -> tuple[int, str, T] | None:
    """Run K repetitions one after another, each on a candidate index drawn uniformly from ``view.rng``, and keep
    the best (:func:`select_best`).

    Args:
        repetition: trains candidate ``index`` and returns (score, model digest, payload); a larger score is better.
    """
    def results() -> Iterable[tuple[int, float, str, T]]:
        for _ in range(repetitions):
            index = view.rng.randbelow(n_candidates)
            score, digest, payload = repetition(index)
            yield index, score, digest, payload

    return select_best(results())


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin entry: :func:`tune`'s public results only (no K, no per-repetition score, no wall time)."""
    return tune(session, config).public
