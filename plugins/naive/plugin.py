"""The ``naive`` plugin: train every candidate with DP-SGD, release the best by public validation accuracy.

The baseline of private hyperparameter selection (Ding et al., Table 1 "Naive"): each candidate's training is
charged on its own (:func:`~dpaudit.tuning.training.train_private`), so the total is the adaptive
composition of all of them, bounded by the session's accountant (by default the tightest of RDP, PLD, advanced and
basic composition that applies). Every trained model is released (its digest and its public validation accuracy),
so selecting among them on public data is post-processing and costs nothing more (docs/plugins/naive.md).

The candidates' trainings are independent given their seeds, so they may run in parallel (``workers``,
``ray_address``; :mod:`dpaudit.parallel`): the driver charges each candidate's event
(:func:`~dpaudit.tuning.training.charge_run`, the event ``train_private`` charges) and draws its seeds from the
session's randomness, in candidate order, before dispatching it (with N workers the whole grid is charged before one
dispatch; with one, each candidate just before it trains); each worker trains one candidate behind a
:class:`~dpaudit.parallel.DetachedView` (which can write nothing) and scores it on the public validation half; the
driver writes each model's record and release, and its score, in candidate order. With ``workers = 1`` the ledger
is record for record the one the sequential loop always wrote.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from torch import nn

from dpaudit.accounting import get_accountant
from dpaudit.accounting.tightest import MEMBERS
from dpaudit.data.catalog import FINAL_TEST_NAME, TRAIN_NAME, VALIDATION_NAME
from dpaudit.errors import AccountingError, PluginError, UnsupportedEvent
from dpaudit.events import PrivacyEvent, compose
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
from dpaudit.tuning.training import charge_run
from dpaudit_plugins.naive.config import NaiveConfig
from dpaudit_plugins.naive.noise_scale import noise_factor

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge, Session

PLUGIN_NAME = "naive"
VERSION = "0.1.0"
SEEDS_PER_CANDIDATE = SEEDS_PER_TRAINING
"""The seeds one candidate's training draws from its view's randomness (:data:`~dpaudit.tuning.SEEDS_PER_TRAINING`);
a worker that draws another number fails (:meth:`~dpaudit.parallel.ReplaySeeds.check_exhausted`)."""
#: the fitted composition aims at ε_B·(1 − margin), so that the session's own check never fails on rounding
_MARGIN = 1e-3


@dataclass(frozen=True)
class NaiveOutcome:
    """What a ``naive`` run produced: ``public`` is what :func:`run` returns; ``model`` is the selected model."""

    public: dict[str, Any]
    model: nn.Module


def composition_bounds(events: list[PrivacyEvent], delta: float) -> dict[str, float | str]:
    """ε at ``delta`` of the composed ``events`` by each member of the tightest accountant, or why it refuses."""
    event = compose(events)
    out: dict[str, float | str] = {}
    for cls in MEMBERS:
        try:
            out[cls.name] = get_accountant(cls.name).epsilon(event, delta)
        except (UnsupportedEvent, AccountingError) as exc:
            out[cls.name] = f"not applicable: {exc}"
    return out


def fitted_candidates(session: PluginSession, candidates: tuple[Candidate, ...],
                      dataset_size: int) -> tuple[tuple[Candidate, ...], float]:
    """The grid with every σ multiplied by the common factor that fits the session budget (``fit_budget``).

    Computed from public parameters (the grid, n, the budget) before any record is used, and recorded as ``info``.

    Raises:
        PluginError: the session has already charged something (the factor is for the whole budget).
        InvalidParameter: no factor fits.
    """
    if session.spent_epsilon() > 0.0:
        raise PluginError(f"{PLUGIN_NAME}: fit_budget splits the whole session budget; open a fresh session")
    epsilon, delta = session.budget
    events = [candidate_event(c, dataset_size, "fit") for c in candidates]
    factor = noise_factor(events, epsilon * (1.0 - _MARGIN), delta)
    fitted = tuple(replace(c, noise_multiplier=c.noise_multiplier * factor) for c in candidates)
    session.record_info({"noise_factor": factor, "budget_split": "every sigma times one common factor, "
                                      "by bisection on public parameters so that the composition fits the budget",
                                      "candidates": [c.to_dict() for c in fitted]})
    return fitted, factor


def tune(session: Session, config: Mapping[str, Any]) -> NaiveOutcome:
    """Train every candidate, release the best by accuracy on the public validation half.

    Raises:
        InvalidParameter: a bad configuration; with ``fit_budget``, no noise factor fits.
        PluginError: the session does not protect ``adult-train`` or does not list both public halves of the
            Adult test split; ``fit_budget`` in a session that already spent.
        BudgetExceeded: the session cannot pay for every candidate (checked before the first training: nothing is
            charged or trained).
        TrialsFailed: a candidate's training raised or its worker died: the candidates before it are recorded and
            released, its charge and those made with it stay, nothing of it or after it is released.
    """
    start = time.perf_counter()
    cfg = NaiveConfig.from_mapping(config)
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    options = cfg.options
    data = tuning_data(view, options.train_rows, options.test_rows)
    mechanism = f"{MECHANISMS[options.optimizer]} {options.model} on {TRAIN_NAME}"
    candidates, factor = cfg.candidates, 1.0
    if cfg.fit_budget:
        candidates, factor = fitted_candidates(view, cfg.candidates, len(data.y_train))
    # the whole plan is checked before the first training: a grid the budget cannot pay for trains nothing
    view.check_affordable([candidate_event(c, len(data.y_train), f"candidate {i}") for i, c in
                              enumerate(candidates)])
    shared = WorkerInputs.of(view, data, options)
    best, scores, events = None, [], []
    with cfg.parallel.executor() as executor:
        # one worker: each candidate charged just before it trains (the sequential loop's ledger); N workers: the
        # whole grid charged before one dispatch (it was checked affordable, and every candidate is trained anyway)
        per_dispatch = 1 if executor.workers == 1 else len(candidates)
        for first in range(0, len(candidates), per_dispatch):
            batch = range(first, min(first + per_dispatch, len(candidates)))
            jobs = [charged_candidate(view, candidates[i], i, len(data.y_train), options.optimizer, mechanism)
                    for i in batch]
            outcomes = executor.map(train_one, shared, jobs)
            for index, job, outcome in zip(batch, jobs, outcomes, strict=True):
                if isinstance(outcome, TrialFailure):  # its charge stays; nothing of it or after it is released
                    raise TrialsFailed(f"{PLUGIN_NAME}: candidate {index}'s training failed: {outcome.reason}; "
                                       f"the charges of candidates {batch.start}-{batch.stop - 1} stay, nothing "
                                       f"from candidate {index} on was released")
                result, score = outcome
                # one nested MLflow run per candidate, its hyperparameters as params (public: the grid is fixed up
                # front, and every candidate is trained, so the number of trials reveals nothing)
                with view.trial(f"candidate {index}", params=job.candidate.to_dict()):
                    assert result.pending is not None  # a claimed run returns its record
                    result.pending.write(view, job.charge)
                    events.append(job.charge.event)
                    scores.append(score)
                    view.log_public_metrics({"validation_accuracy": score}, step=index)
                key = (score, index)
                if best is None or key > best[0]:
                    best = (key, result)
    (score, index), result = best
    test_accuracy = accuracy(result, data.X_test, data.y_test, view)
    delta = view.budget[1]
    bounds = composition_bounds(events, delta)
    epsilon, source = get_accountant("tightest").epsilon_with_source(compose(events), delta)
    public = {
        "method": PLUGIN_NAME, "selected": candidates[index].to_dict(), "candidate_index": index,
        "noise_factor": factor,
        "model_sha256": result.model_sha256, "validation_accuracy": score, "test_accuracy": test_accuracy,
        "validation_accuracies": scores, "epsilon": epsilon, "delta": delta, "attained_by": source,
        "bounds": bounds, "charges": len(events), "public_data": [VALIDATION_NAME, FINAL_TEST_NAME],
        "wall_time_s": time.perf_counter() - start,
    }
    view.record_info({k: public[k] for k in ("selected", "candidate_index", "model_sha256",
                                                             "validation_accuracy", "test_accuracy", "epsilon",
                                                             "attained_by", "bounds")})
    return NaiveOutcome(public=public, model=result.model)


@dataclass(frozen=True)
class ChargedCandidate:
    """One candidate ready to train: its hyperparameters, its own charge (made and claimed by the driver), the
    event's label, and the :data:`SEEDS_PER_CANDIDATE` seeds the driver drew for it."""

    candidate: Candidate
    charge: Charge
    label: str
    seeds: tuple[tuple[int, int], ...]


def charged_candidate(view: PluginSession, candidate: Candidate, index: int, dataset_size: int, optimizer: str,
                      mechanism: str) -> ChargedCandidate:
    """In the driver: charge and claim candidate ``index``'s DP-SGD event (the one ``train_private`` charges, with
    its label ``"candidate <index>: <mechanism>"`` and the optimizer's mechanism name), then draw its seeds from the
    session's randomness.

    Raises:
        BudgetExceeded: the session cannot pay for it (nothing is charged).
    """
    label = f"candidate {index}: {mechanism}"
    charge = charge_run(view, candidate_event(candidate, dataset_size, label), MECHANISMS[optimizer])
    return ChargedCandidate(candidate=candidate, charge=charge, label=label,
                            seeds=predraw(view.rng, SEED_RANGE, SEEDS_PER_CANDIDATE))


def train_one(shared: WorkerInputs, job: ChargedCandidate) -> tuple[TrainResult, float]:
    """Train one charged candidate in a worker (:func:`~dpaudit.tuning.detached.train_replayed`; the driver writes
    the returned :attr:`~dpaudit.tuning.training.TrainResult.pending` record).

    Returns:
        (the training result, accuracy on the public validation half).
    """
    return train_replayed(shared, job.candidate, job.seeds, job.charge, job.label, claimed=True)


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin entry: :func:`tune`'s public results."""
    return tune(session, config).public
