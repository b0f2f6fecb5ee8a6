"""A cheap task whose trials charge the session, for the plugin's tests (not a DPareto task of the paper).

A trial at (eps, k) charges one Laplace count at ε = eps and releases it (the count of a public constant: the
release is what the charge covers; nothing protected is read). Its error is 1/(1 + 4·eps·k), so the front is a
known trade-off. Where ``fail`` says so, the trial fails: NaN, an error outside [0, 1], or TrialFailed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dpaudit.testing.events import laplace_event
from dpaudit_plugins.dpareto.domain import Domain, Parameter
from dpaudit_plugins.dpareto.task import TrialFailed, TrialPlan, epsilon_of_events

DELTA = 1e-5


@dataclass(frozen=True)
class LaplaceTask:
    fail: Callable[[dict], object] | None = None
    evaluated: list = field(default_factory=list, compare=False)

    name: ClassVar[str] = "test-laplace"
    domain: ClassVar[Domain] = Domain((Parameter("eps", 0.05, 0.5, scale="log"), Parameter("k", 1, 3, integer=True)))
    protected: ClassVar[tuple[str, ...]] = ()
    public: ClassVar[tuple[str, ...]] = ()

    def _plan(self, eps: float, view) -> TrialPlan:
        events = (laplace_event(eps, neighbouring=view.neighbouring, label="test trial"),)
        epsilon, oracle = epsilon_of_events(events, DELTA, accountant="basic")
        return TrialPlan(events=events, epsilon=epsilon, oracle=oracle)

    def plan(self, params, view) -> TrialPlan:
        return self._plan(float(params["eps"]), view)

    def worst_case(self, view) -> tuple:
        return self._plan(0.5, view).events

    def evaluate(self, params, charges, view, seed: int) -> float:
        self.evaluated.append(dict(params))
        for charge in charges:
            view.record_release(charge, 1.0)
        outcome = self.fail(params) if self.fail is not None else None
        if outcome == "raise":
            raise TrialFailed("diverged")
        if outcome is not None:
            return outcome  # a NaN or an out-of-range error
        return 1.0 / (1.0 + 4.0 * params["eps"] * params["k"])

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "delta": DELTA}


def fail_above(threshold: float, outcome: object = math.nan) -> Callable[[dict], object]:
    """Fail every trial with eps above ``threshold`` with ``outcome`` (NaN, a bad number, or "raise")."""
    return lambda params: outcome if params["eps"] > threshold else None
