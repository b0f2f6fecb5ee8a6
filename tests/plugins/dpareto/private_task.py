"""A cheap charging task with a protected evaluation set, for the private-front tests (not a DPareto task).

As :class:`~tests.plugins.dpareto.charging_task.LaplaceTask` (one Laplace charge per trial, exact error
1/(1 + 4·eps·k)), with ``EVALUATION`` declared as its protected evaluation set of public size ``SIZE``: the exact
error stands for (mean error count on it) / ``SIZE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .charging_task import LaplaceTask

TRAINING = "private data set"
EVALUATION = "protected evaluation set"
SIZE = 200


@dataclass(frozen=True)
class ProtectedEvaluationTask(LaplaceTask):
    name: ClassVar[str] = "test-laplace-protected-evaluation"
    protected: ClassVar[tuple[str, ...]] = (TRAINING, EVALUATION)
    evaluation_set: ClassVar[str] = EVALUATION
    evaluation_size: ClassVar[int] = SIZE

    def with_protected_evaluation(self) -> ProtectedEvaluationTask:
        return self


def exact_error(params) -> float:
    return 1.0 / (1.0 + 4.0 * params["eps"] * params["k"])
