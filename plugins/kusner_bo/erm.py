"""L2-regularised logistic regression on the public training set (Kusner et al. 2015, eq. (10)).

w_λ = argmin_w  λ/2 ‖w‖² + (1/n) Σ_i log(1 + exp(−y_i ⟨w, x_i⟩)),   y_i ∈ {−1, +1}, ‖x_i‖ ≤ 1,

so the training loss is convex and 1-Lipschitz in w (its gradient is −y σ(−y⟨w, x⟩) x, of norm ≤ ‖x‖ ≤ 1), as
Assumption 2 requires. Solved by Newton's method in float64; the returned gradient norm ‖∇O_λ(ŵ)‖ is the solver's
certificate of accuracy: by λ-strong convexity ‖ŵ − w_λ‖ ≤ ‖∇O_λ(ŵ)‖/λ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_positive

#: Newton iterations before giving up (the objective is λ-strongly convex and smooth; ~10 are typical)
MAX_NEWTON_STEPS = 100


@dataclass(frozen=True)
class FittedModel:
    """ŵ for one λ, with ‖∇O_λ(ŵ)‖₂ (the distance to the exact minimiser is at most that over λ)."""

    lam: float
    weights: np.ndarray
    gradient_norm: float


def clip_to_unit_ball(X: np.ndarray) -> np.ndarray:
    """Scale every row with ‖x‖₂ > 1 onto the unit sphere (a per-record map: one record's change moves one row)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or not np.all(np.isfinite(X)):
        raise InvalidParameter("features must be a finite 2-d array")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.maximum(norms, 1.0)


def signed_labels(y: np.ndarray) -> np.ndarray:
    """Map labels in {0, 1} to {−1, +1}; anything else is an error."""
    y = np.asarray(y, dtype=np.float64).ravel()
    if not np.all((y == 0.0) | (y == 1.0)):
        raise InvalidParameter("labels must be 0 or 1")
    return 2.0 * y - 1.0


def _gradient(w: np.ndarray, X: np.ndarray, ys: np.ndarray, lam: float) -> np.ndarray:
    return lam * w - X.T @ (ys * expit(-ys * (X @ w))) / len(ys)


def _objective(w: np.ndarray, X: np.ndarray, ys: np.ndarray, lam: float) -> float:
    return 0.5 * lam * float(w @ w) + float(np.mean(np.logaddexp(0.0, -ys * (X @ w))))


def fit_logistic(X: np.ndarray, y: np.ndarray, lam: float, *, tolerance: float) -> FittedModel:
    """Minimise eq. (10) with the logistic loss until ‖∇O_λ(ŵ)‖₂ ≤ ``tolerance``.

    Args:
        X: n × d features, each row of norm ≤ 1 (use :func:`clip_to_unit_ball`).
        y: n labels in {0, 1}.
        lam: λ > 0.
        tolerance: the gradient norm to reach (the sensitivity bound's solver slack τ).

    Raises:
        InvalidParameter: rows outside the unit ball, bad labels, λ ≤ 0, or the tolerance not reached.
    """
    lam = check_positive("lam", lam)
    tol = check_positive("tolerance", tolerance)
    X = np.asarray(X, dtype=np.float64)
    check_count("training rows", X.shape[0])
    if np.max(np.linalg.norm(X, axis=1)) > 1.0 + 1e-12:
        raise InvalidParameter("training rows must have L2 norm ≤ 1 (the loss is then 1-Lipschitz)")
    ys = signed_labels(y)
    w = np.zeros(X.shape[1])
    g = _gradient(w, X, ys, lam)
    for _ in range(MAX_NEWTON_STEPS):
        if np.linalg.norm(g) <= tol:
            break
        p = expit(ys * (X @ w))
        hessian = lam * np.eye(X.shape[1]) + (X.T * (p * (1.0 - p))) @ X / len(ys)
        step = np.linalg.solve(hessian, g)
        t, f0 = 1.0, _objective(w, X, ys, lam)
        while _objective(w - t * step, X, ys, lam) > f0 - 0.25 * t * float(g @ step) and t > 1e-10:
            t *= 0.5  # Armijo backtracking
        w = w - t * step
        g = _gradient(w, X, ys, lam)
    norm = float(np.linalg.norm(g))
    if norm > tol:
        raise InvalidParameter(f"Newton's method reached ‖∇O_λ‖ = {norm:.3g} > tolerance {tol:.3g} at λ = {lam}")
    return FittedModel(lam=lam, weights=w, gradient_norm=norm)
