"""L-Lipschitz validation losses of margin form g(w, x, y) = φ(y⟨w, x⟩) (Kusner et al. 2015, Assumption 2).

With ‖x‖ ≤ 1 and y ∈ {−1, +1}, |g(w, x, y) − g(w', x, y)| ≤ Lip(φ)·‖w − w'‖, so L = Lip(φ); and for one w the
margins lie in [−‖w‖, ‖w‖], so two records' losses differ by at most min(g*, 2L‖w‖) (docs/plugins/kusner-bo.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from dpaudit.errors import InvalidParameter


@dataclass(frozen=True)
class ValidationLoss:
    """A margin loss φ with its Lipschitz constant L and its upper bound g* (φ takes values in [0, g*])."""

    name: str
    lipschitz: float
    upper: float
    phi: Callable[[np.ndarray], np.ndarray]


RAMP = ValidationLoss("ramp", 1.0, 1.0, lambda m: np.clip(1.0 - m, 0.0, 1.0))  # Huang, Shi & Suykens 2014
SIGMOID = ValidationLoss("sigmoid", 0.25, 1.0, lambda m: expit(-m))  # σ(−margin), σ' ≤ 1/4
LOSSES = {loss.name: loss for loss in (RAMP, SIGMOID)}


def get_loss(name: str) -> ValidationLoss:
    """The validation loss called ``name`` ("ramp" or "sigmoid")."""
    try:
        return LOSSES[name]
    except KeyError:
        raise InvalidParameter(f"unknown validation loss {name!r}; known: {sorted(LOSSES)}") from None


def validation_score(w: np.ndarray, X: np.ndarray, ys: np.ndarray, loss: ValidationLoss) -> float:
    """f_V(w) = −(1/m) Σ_i g(w, x̄_i, ȳ_i) (Assumption 2), labels ys in {−1, +1}, rows of norm ≤ 1."""
    if len(ys) == 0:
        raise InvalidParameter("the validation set is empty")
    return -float(np.mean(loss.phi(ys * (X @ w))))
