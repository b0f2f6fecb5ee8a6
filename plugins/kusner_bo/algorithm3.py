"""Kusner et al. 2015, Algorithm 3: the best validation score of BO over L2-regularised ERM, released with ε-DP.

Unconditional (no GP assumption): the training set is public, the validation set is protected (add/remove or
replace-one neighbours; the score is taken over a fixed public number m₀ of records, see
:mod:`dpaudit_plugins.kusner_bo.validation_set`), λ ranges over a finite public Λ ⊂ [λ_min, λ_max], and any proposer of
the next λ may be used, even one that looks at the validation scores, because the sensitivity bound holds for every
pair λ, λ' (Theorem 7).
Only the noisy best score f̃_L leaves this module: the λ's tried and their scores depend on the validation set and
are never returned, logged or recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.sensitivity import Sensitivity, from_formula
from dpaudit.validation import check_count, check_epsilon, check_positive
from dpaudit_plugins.kusner_bo.constants import beta_t
from dpaudit_plugins.kusner_bo.erm import FittedModel, clip_to_unit_ball, fit_logistic, signed_labels
from dpaudit_plugins.kusner_bo.gp import GpPosterior, KernelSpec, ucb_index
from dpaudit_plugins.kusner_bo.losses import ValidationLoss, validation_score
from dpaudit_plugins.kusner_bo.sensitivity import FORMULA_ID
from dpaudit_plugins.kusner_bo.validation_set import fixed_size

if TYPE_CHECKING:
    from dpaudit.session import Session

#: (λ, f_V(ŵ_λ)) pairs seen so far -> the next λ, which must lie in Λ
Proposer = Callable[[Sequence[tuple[float, float]]], float]

DEFAULT_SOLVER_TOLERANCE = 1e-9


def grid_proposer(lambdas: Sequence[float]) -> Proposer:
    """Propose the points of Λ in the given order (cycling): a non-adaptive baseline."""
    grid = tuple(float(v) for v in lambdas)

    def propose(history: Sequence[tuple[float, float]]) -> float:
        return grid[len(history) % len(grid)]

    return propose


#: GP-UCB proposer's kernel on log10 λ scaled to [0, 1], its observation-noise variance and the δ of its β_t: only
#: the acquisition uses them, and Theorem 7 holds for any acquisition, so they do not enter the guarantee.
GP_UCB_KERNEL = KernelSpec("matern52", 0.3)
GP_UCB_NOISE_VARIANCE = 1e-4
GP_UCB_DELTA = 0.1


def gp_ucb_proposer(lambdas: Sequence[float], device: object = "cpu") -> Proposer:
    """GP-UCB over Λ (Srinivas et al. 2010) on log10 λ scaled to [0, 1], as Algorithm 3's acquisition function."""
    grid = _grid(lambdas)
    logs = np.log10(np.array(grid))
    span = logs.max() - logs.min()
    posterior = GpPosterior(GP_UCB_KERNEL, (logs - logs.min()) / (span if span > 0 else 1.0),
                            GP_UCB_NOISE_VARIANCE, device)

    def propose(history: Sequence[tuple[float, float]]) -> float:
        indices = [grid.index(lam) for lam, _ in history]
        mean, std = posterior.mean_and_std(indices, [score for _, score in history])
        return grid[ucb_index(mean, std, beta_t(len(grid), len(history) + 1, GP_UCB_DELTA))]

    return propose


PROPOSERS = ("grid", "gp-ucb")


@dataclass(frozen=True)
class Algorithm3Release:
    """The public outcome: the noisy best validation score and the public parameters of its release."""

    value: float
    sensitivity: Sensitivity
    epsilon: float
    steps: int


def algorithm3_sensitivity_for(lambdas: Sequence[float], loss: ValidationLoss, m: int, neighbouring: str,
                               solver_tolerance: float) -> Sensitivity:
    """The registered Theorem-7 sensitivity for a public Λ, loss and m₀ (λ_min, λ_max = min, max Λ)."""
    grid = _grid(lambdas)
    return from_formula(FORMULA_ID, neighbouring, lambda_min=min(grid), lambda_max=max(grid),
                        lipschitz=loss.lipschitz, g_max=loss.upper, m=check_count("m", m),
                        solver_tolerance=solver_tolerance)


def run_algorithm3(session: Session, X_train: np.ndarray, y_train: np.ndarray, X_val: np.ndarray,
                   y_val: np.ndarray, lambdas: Sequence[float], *, loss: ValidationLoss, epsilon: float, T: int,
                   validation_size: int, proposer: Proposer | None = None,
                   solver_tolerance: float = DEFAULT_SOLVER_TOLERANCE,
                   label: str = "kusner-bo algorithm 3") -> Algorithm3Release:
    """Run T steps of BO over Λ and release f̃_L = max_t f_V(ŵ_λt) + Lap(Δ_f/ε) through ``session.laplace``.

    Args:
        session: the audited session (either neighbouring; the validation set among its protected data).
        X_train, y_train: the public training set (labels 0/1); rows are scaled into the unit ball.
        X_val, y_val: the protected validation set (labels 0/1) in a canonical order fixed by each record's own
            key (e.g. record id); rows are scaled into the unit ball.
        lambdas: the public finite Λ, all > 0.
        loss: the L-Lipschitz validation loss.
        epsilon: ε of the release.
        T: BO steps.
        validation_size: the public m₀: the score averages the loss over the first m₀ records, padded with the
            dummy record (0, +1) (:func:`~dpaudit_plugins.kusner_bo.validation_set.fixed_size`); |V| is never used.
        proposer: chooses λ_t from the history; default :func:`grid_proposer` over Λ.
        solver_tolerance: τ, the gradient norm every fitted model must reach (enters the sensitivity).

    Raises:
        InvalidParameter: bad parameters, or the solver missing τ (decided on public data only).
        PluginError: the proposer returned a λ outside Λ.
    """
    grid = _grid(lambdas)
    epsilon = check_epsilon(epsilon)
    T = check_count("T", T)
    sensitivity = algorithm3_sensitivity_for(grid, loss, validation_size, session.neighbouring, solver_tolerance)
    Xt, yt = clip_to_unit_ball(X_train), np.asarray(y_train)
    Xv, ys_val = fixed_size(clip_to_unit_ball(X_val), signed_labels(y_val), validation_size)
    propose = proposer or grid_proposer(grid)
    models: dict[float, FittedModel] = {}
    history: list[tuple[float, float]] = []
    for _ in range(T):
        lam = float(propose(tuple(history)))
        if lam not in grid:
            raise PluginError(f"kusner-bo: the proposer returned λ = {lam}, which is not in Λ")
        if lam not in models:
            models[lam] = fit_logistic(Xt, yt, lam, tolerance=solver_tolerance)
        history.append((lam, validation_score(models[lam].weights, Xv, ys_val, loss)))
    best = max(score for _, score in history)
    value = session.laplace(best, sensitivity, epsilon, label=label)
    return Algorithm3Release(value=float(value), sensitivity=sensitivity, epsilon=epsilon, steps=T)


def _grid(lambdas: Sequence[float]) -> tuple[float, ...]:
    grid = tuple(check_positive("lambda", v) for v in lambdas)
    if not grid:
        raise InvalidParameter("Λ is empty")
    return grid
