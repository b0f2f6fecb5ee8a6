"""The ``naive`` plugin: train every candidate with DP-SGD, release the best by public validation accuracy.

The baseline of private hyperparameter selection (Ding et al., Table 1 "Naive"): each candidate's training is
charged on its own (:func:`~dpaudit.tuning.training.train_private`), so the total is the adaptive
composition of all of them, bounded by the session's accountant (by default the tightest of RDP, PLD, advanced and
basic composition that applies). Every trained model is released (its digest and its public validation accuracy),
so selecting among them on public data is post-processing and costs nothing more (docs/plugins/naive.md).
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
from dpaudit.tuning import MECHANISMS, Candidate, accuracy, candidate_event, train_candidate, tuning_data
from dpaudit_plugins.naive.config import NaiveConfig
from dpaudit_plugins.naive.noise_scale import noise_factor

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Session

PLUGIN_NAME = "naive"
VERSION = "0.1.0"
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
    best, scores, events = None, [], []
    for index, candidate in enumerate(candidates):
        label = f"candidate {index}: {mechanism}"
        # one nested MLflow run per candidate, its hyperparameters as params (public: the grid is fixed up front,
        # and every candidate is trained, so the number of trials reveals nothing)
        with view.trial(f"candidate {index}", params=candidate.to_dict()):
            result = train_candidate(view, candidate, data, options, label=label)
            events.append(candidate_event(candidate, len(data.y_train), label))  # the event train_private charged
            score = accuracy(result, data.X_val, data.y_val, view)
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


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin entry: :func:`tune`'s public results."""
    return tune(session, config).public
