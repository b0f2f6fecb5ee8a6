"""The task interface of the ``dpareto`` plugin: what a privacy-utility trade-off to explore must provide.

A task is a domain of hyperparameters (:class:`~dpaudit_plugins.dpareto.domain.Domain`) and a trial: given one point
of the domain, a DP algorithm run whose privacy objective ε and error are the two objectives DPareto minimises
(Avent et al. 2020, Sec. 3). The plugin, not the task, charges every trial, so that each trial's privacy cost is in
the ledger before the trial touches data:

1. :meth:`Task.plan` states, for a point, the events the trial will charge (in order) and the trial's ε with the
   oracle that derived it (:class:`TrialPlan`). A task whose data are synthetic (the paper's SVT example) charges
   nothing and derives ε from a pinned closed-form oracle.
2. The plugin charges those events through the session view and hands the :class:`~dpaudit.session.Charge` objects
   to :meth:`Task.evaluate`, which must claim each DP-SGD charge before training on it (``view.claim``) and record
   the released model's digest (``view.record_release``), then return the trained model's error on the task's
   *public* evaluation data, in [0, 1].
3. A trial that fails (divergence, NaN, an error outside [0, 1]) raises :class:`TrialFailed` or returns a non-finite
   error; the plugin records it (ledger and output) and never feeds it to the utility GP (docs/plugins/dpareto.md,
   "Failed trials").

Before the first trial the plugin asks the session whether the whole plan fits the budget: for an adaptive search
(BO) ``n_trials`` copies of :meth:`Task.worst_case`'s events, and before each trial it checks that the trial's events
are dominated by the worst case at every Rényi order (:func:`check_dominated`), so a budget that admitted the plan
admits every trial.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from dpaudit.accounting.filters import charge_rdp
from dpaudit.accounting.rdp import ORDERS
from dpaudit.accounting.registry import get_accountant
from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.events import (
    PoissonSubsampledGaussianEvent,
    PrivacyEvent,
    SampledWithoutReplacementGaussianEvent,
    neighbouring_of,
)
from dpaudit.events import compose as compose_events
from dpaudit.validation import check_count, check_delta, check_epsilon

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge
    from dpaudit_plugins.dpareto.domain import Domain

Params = Mapping[str, float | int]
"""One point of a domain, ``{name: value}`` (ints for integer parameters)."""


class TrialFailed(DPAuditError):
    """A trial ran but produced no usable error (diverged, NaN loss, ...); the message says why (one line)."""


@dataclass(frozen=True)
class EpsilonOracle:
    """How a trial's ε was derived, so that anyone can re-derive it.

    Attributes:
        accountant: the accountant's name (``"rdp"``, ``"pld"``, ...) or a closed form's name (e.g.
            ``"svt-closed-form"``).
        version: the accountant's version string (libraries included) or the closed form's citation.
        sampling: the batch sampling scheme of the trial's DP-SGD (``"poisson"``, ``"fixed-size without
            replacement"``) or ``"none"``.
        neighbouring: the neighbouring relation the ε is about (``"add_remove"``, ``"replace_one"``).
        delta: the δ at which ε is stated.
    """

    accountant: str
    version: str
    sampling: str
    neighbouring: str
    delta: float

    def to_dict(self) -> dict[str, Any]:
        return {"accountant": self.accountant, "version": self.version, "sampling": self.sampling,
                "neighbouring": self.neighbouring, "delta": self.delta}


@dataclass(frozen=True)
class TrialPlan:
    """What one trial will charge and the privacy objective it reports.

    Attributes:
        events: the events the plugin charges before the trial runs, in order (empty: the trial touches no
            protected data, e.g. a synthetic SVT instance).
        epsilon: the trial's privacy objective as the task states it: the ε of each released model at
            ``oracle.delta`` (> 0, finite). For a trial that charges, the plugin recomputes it from the events
            (:func:`model_epsilon`) and refuses a stated ε below that (:func:`~dpaudit_plugins.dpareto.trials.
            run_trial`); for one that charges nothing it is the oracle's statement, not certified.
        oracle: how ``epsilon`` was derived.
        models: the number of models the trial trains: ``events`` is ``models`` consecutive groups of equal size,
            one per model (e.g. DPareto's replications), and ``epsilon`` is about each group, not their composition.
    """

    events: tuple[PrivacyEvent, ...]
    epsilon: float
    oracle: EpsilonOracle
    models: int = 1

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon, "a trial's epsilon")
        if not all(isinstance(e, PrivacyEvent) for e in self.events):
            raise InvalidParameter("a trial plan's events must be PrivacyEvents")
        if check_count("models", self.models) > 1 and len(self.events) % self.models:
            raise InvalidParameter(f"a trial plan's {len(self.events)} events do not split into {self.models} "
                                   "models")

    def groups(self) -> list[tuple[int, ...]]:
        """The positions in ``events`` of each model's events (none when the plan charges nothing)."""
        if not self.events:
            return []
        size = len(self.events) // self.models
        return [tuple(range(m * size, (m + 1) * size)) for m in range(self.models)]


@runtime_checkable
class Task(Protocol):
    """A privacy-utility trade-off to explore (implementations: ``tasks_svt``, ``tasks_adult``).

    Attributes:
        name: the task's registered name (:mod:`dpaudit_plugins.dpareto.catalog`).
        domain: the hyperparameter box.
        protected: the data sets the trials train on (the session must protect them).
        public: the data sets used without protection (the public evaluation set).
    """

    name: str
    domain: Domain
    protected: tuple[str, ...]
    public: tuple[str, ...]

    def plan(self, params: Params, view: PluginSession) -> TrialPlan:
        """The events a trial at ``params`` will charge and its ε (deterministic in ``params``; no noise drawn)."""

    def worst_case(self, view: PluginSession) -> tuple[PrivacyEvent, ...]:
        """Events that dominate every point's events at every Rényi order (:func:`check_dominated`): the up-front
        cost bound of one adaptively chosen trial (e.g. DP-SGD at the largest sampling rate, the most steps and the
        smallest noise multiplier of the domain, not necessarily a point of it); empty for a task that charges
        nothing. No ε is asked for: none is needed, and at such a corner it can be costly to compute."""

    def evaluate(self, params: Params, charges: tuple[Charge, ...], view: PluginSession, seed: int) -> float:
        """Run the trial at ``params`` under ``charges`` (those of :meth:`plan`, already charged) and return its
        error in [0, 1] on public evaluation data (or on the protected evaluation set of a private front,
        :mod:`~dpaudit_plugins.dpareto.private_front`, which noises it); randomness from ``seed`` only.

        Raises:
            TrialFailed: the trial produced no usable error.
        """

    def describe(self) -> dict[str, Any]:
        """Public description of the task (name, data, model, δ, replications) for the output."""


FILTER_ORDERS: tuple[float, ...] = tuple(a for a in ORDERS if a.is_integer() and a >= 2)
"""Every order a session's Rényi filter may use (integer orders ≥ 2 of the RDP grid): dominance is checked at all of
them, so it holds whatever orders the session chose."""

SAMPLING_OF_KIND = {PoissonSubsampledGaussianEvent.kind: "poisson",
                    SampledWithoutReplacementGaussianEvent.kind: "fixed-size without replacement"}


def epsilon_of_events(events: Sequence[PrivacyEvent], delta: float, accountant: str = "rdp") -> tuple[float,
                                                                                                      EpsilonOracle]:
    """The ε at ``delta`` of ``events`` composed, by the named accountant, with the oracle that states how.

    The helper a DP-SGD task's :meth:`Task.plan` uses: one model trained with ``events`` is (ε, δ)-DP.

    Raises:
        InvalidParameter: no events, or events about different neighbouring relations.
    """
    if not events:
        raise InvalidParameter("epsilon_of_events needs at least one event")
    relations = {neighbouring_of(e) for e in events}
    if len(relations) != 1:
        raise InvalidParameter("a trial's events must all be about one neighbouring relation")
    delta = check_delta(delta, allow_zero=False)
    acc = get_accountant(accountant)
    composed = compose_events(list(events))
    kinds = sorted({leaf.kind for leaf, _ in composed.leaves()})
    sampling = ", ".join(SAMPLING_OF_KIND.get(kind, "none") for kind in kinds)
    oracle = EpsilonOracle(accountant=acc.name, version=acc.version(), sampling=sampling,
                           neighbouring=relations.pop().value, delta=delta)
    return float(acc.epsilon(composed, delta)), oracle


def model_epsilon(plan: TrialPlan) -> float:
    """The largest ε over the plan's models, each model's events composed by the oracle's accountant at its δ
    (:func:`epsilon_of_events`): what a charging trial may at least report (equal groups are computed once).

    Raises:
        InvalidParameter: the plan charges nothing (its ε can only be the oracle's).
    """
    if not plan.events:
        raise InvalidParameter("a trial that charges nothing has no epsilon to recompute from its events")
    found: list[tuple[list[PrivacyEvent], float]] = []
    for group in plan.groups():
        events = [plan.events[i] for i in group]
        if not any(events == seen for seen, _ in found):
            found.append((events, epsilon_of_events(events, plan.oracle.delta, plan.oracle.accountant)[0]))
    return max(epsilon for _, epsilon in found)


def rdp_of(events: Sequence[PrivacyEvent], orders: Sequence[float] = FILTER_ORDERS) -> tuple[np.ndarray,
                                                                                                       float]:
    """The summed RDP curve of ``events`` at ``orders`` and at α = ∞ (Mironov 2017, Prop. 1)."""
    total, at_inf = np.zeros(len(orders)), 0.0
    for event in events:
        curve, inf = charge_rdp(event, orders)
        total, at_inf = total + curve, at_inf + inf
    return total, at_inf


def check_dominated(events: Sequence[PrivacyEvent], worst: Sequence[PrivacyEvent],
                    orders: Sequence[float] = FILTER_ORDERS) -> None:
    """Refuse a trial whose events are not dominated by the worst case at every order (then a budget that paid for
    ``n`` worst cases pays for any ``n`` trials, Rényi curves adding under adaptive composition).

    Raises:
        InvalidParameter: some order where the trial's RDP exceeds the worst case's (a task bug: its
            :meth:`Task.worst_case` is not an upper bound).
    """
    curve, at_inf = rdp_of(events, orders)
    bound, bound_inf = rdp_of(worst, orders)
    over = np.flatnonzero(curve > bound * (1 + 1e-12) + 1e-15)
    if over.size or at_inf > bound_inf:
        where = f"order {orders[over[0]]:g}" if over.size else "order inf"
        raise InvalidParameter(f"a trial's privacy cost exceeds the task's declared worst case at {where}; "
                               "nothing was charged")
