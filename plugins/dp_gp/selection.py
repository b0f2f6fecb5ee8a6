"""DP hyperparameter selection for dp-gp (Smith et al. 2018, Sec. 4 and supplement, "Hyperparameter selection").

The exponential mechanism (McSherry & Talwar 2007) picks one (lengthscale, noise variance) pair from a public grid,
scoring each by minus its K-fold cross-validation sum of squared errors, each squared error truncated at a public
b²: u(θ) = −Σ_k Σ_{t in fold k} min((ŷ_{k,t}(θ) − y_t)², b²), with ŷ_k = C_k y_{train k} the fold's GP posterior
mean (zero prior mean, normalised outputs). The folds are public (:func:`~dpaudit_plugins.dp_gp.formulas.cv_folds`:
a hash of each record's position and a public salt). The score's sensitivity under replace-one of one output is
re-derived here, because the paper's supplementary bound is not sound (docs/plugins/dp-gp.md, "DP hyperparameter
selection"), and registered as the formula ``dp_gp_cv_truncated_sse`` so that ``dpaudit verify`` recomputes it from
the public inputs. The selection is charged through the session (``view.exponential``); the release that uses the
chosen hyperparameters is charged separately, and the session composes the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Neighbouring, Sensitivity, from_formula
from dpaudit.validation import check_count, check_epsilon, check_finite, check_positive
from dpaudit_plugins.dp_gp.formulas import CV_SSE_FORMULA, as_inputs, cv_folds, fold_smoother
from dpaudit_plugins.dp_gp.release import PUBLIC_INPUTS, OutputRule

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession

@dataclass(frozen=True)
class SelectionGrid:
    """The public grid and cross-validation setting of a DP hyperparameter selection.

    Attributes:
        lengthscales: candidate EQ lengthscales (input units; each a number or one number per input dimension).
        noises: candidate noise variances σ_n² (normalised output units).
        variance: the EQ kernel variance (normalised units), fixed.
        folds: K, the number of cross-validation folds.
        error_bound: b, each fold's squared errors are truncated at b² (normalised units); public.
        fold_salt: the public salt of the fold assignment.
        prior_mean: the public constant prior mean m (normalised units): ŷ_k = m + C_k(y_train − m).
    """

    lengthscales: tuple[Any, ...]
    noises: tuple[float, ...]
    variance: float
    folds: int
    error_bound: float
    fold_salt: str = "dp-gp"
    prior_mean: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengthscales", tuple(self.lengthscales))
        object.__setattr__(self, "noises", tuple(float(check_positive("noise variance", v)) for v in self.noises))
        if not self.lengthscales or not self.noises:
            raise InvalidParameter("the selection grid needs at least one lengthscale and one noise variance")
        check_positive("variance", self.variance)
        check_count("folds", self.folds, minimum=2)
        check_positive("error_bound", self.error_bound)
        check_finite("prior_mean", self.prior_mean)

    @property
    def candidates(self) -> list[list[Any]]:
        """The [lengthscale, noise variance] pairs, lengthscale-major (candidate i of the selection)."""
        return [[ell, noise] for ell in self.lengthscales for noise in self.noises]


Predictor = tuple[np.ndarray, np.ndarray, np.ndarray]
"""One fold's (C_k, training rows, test rows): its predictions at its test inputs are C_k·y[training rows]."""


def fold_predictors(X: np.ndarray, fold: np.ndarray, candidates: Sequence[Sequence[Any]],
                    variance: float) -> list[list[Predictor]]:
    """For every candidate, every fold's :data:`Predictor` (public: a function of X, the folds and the grid)."""
    return [[fold_smoother(X, fold, k, lengthscale, variance, noise)[:3] for k in range(int(fold.max()) + 1)]
            for lengthscale, noise in candidates]


def truncated_sse(predictors: Sequence[Sequence[Predictor]], y: np.ndarray, error_bound: float,
                  prior_mean: float = 0.0) -> np.ndarray:
    """Σ_k Σ_{t in fold k} min((ŷ_{k,t} − y_t)², b²), ŷ_k = m + C_k(y_train − m), for every candidate (private: never
    released unnoised).

    Args:
        predictors: :func:`fold_predictors`; y: (n,) normalised outputs; error_bound: b; prior_mean: m.
    """
    square, r = float(error_bound) ** 2, np.asarray(y, dtype=np.float64) - prior_mean
    return np.array([sum(float(np.sum(np.minimum((C @ r[train] - r[test]) ** 2, square))) for C, train, test in folds)
                     for folds in predictors])


def selection_sensitivity(grid: SelectionGrid, X: Any, rule: OutputRule,
                          neighbouring: Neighbouring | str) -> Sensitivity:
    """The registered sensitivity of the truncated CV SSE over ``grid`` (public inputs only)."""
    points = as_inputs(X, "X")
    return from_formula(CV_SSE_FORMULA, neighbouring, assumptions=(PUBLIC_INPUTS,), X=points.tolist(),
                        candidates=grid.candidates, variance=float(grid.variance), folds=grid.folds,
                        fold_salt=grid.fold_salt, error_bound=float(grid.error_bound), **rule.formula_inputs())


@dataclass(frozen=True)
class Selection:
    """The released choice (public).

    Attributes:
        index: the chosen candidate's position in ``grid.candidates``.
        lengthscale, noise: the chosen hyperparameters.
        sensitivity: Δ of the scores, as charged.
    """

    index: int
    lengthscale: Any
    noise: float
    sensitivity: float


def select_hyperparameters(view: PluginSession, grid: SelectionGrid, X: Any, y: Any, rule: OutputRule,
                           epsilon: float) -> Selection:
    """Choose one grid point by the exponential mechanism on −(truncated CV SSE), charged ε through ``view``.

    Args:
        view: the plugin's session view (its ``exponential`` charges, samples and records the choice).
        grid: the public grid and cross-validation setting.
        X: (n, D) public inputs; y: (n,) raw private outputs (clipped and normalised here by ``rule``).
        rule: the public output rule.
        epsilon: the selection's ε.

    Raises:
        InvalidParameter: a bad grid, rule or ε (before anything is charged).
        BudgetExceeded: the selection does not fit the budget (asked before the outputs are read).
    """
    check_epsilon(epsilon)
    points = as_inputs(X, "X")
    sensitivity = selection_sensitivity(grid, points, rule, view.neighbouring)
    label = f"dp-gp hyperparameters: {len(grid.candidates)} candidates, {grid.folds}-fold truncated SSE"
    view.check_affordable([view.exponential_event(sensitivity, epsilon, n_candidates=len(grid.candidates),
                                                  label=label)])
    values = rule.apply(np.asarray(y))
    if values.shape != (len(points),):
        raise InvalidParameter(f"y must hold one output per input point ({len(points)}), got shape {values.shape}")
    fold = cv_folds(len(points), grid.folds, grid.fold_salt)
    scores = truncated_sse(fold_predictors(points, fold, grid.candidates, grid.variance), values, grid.error_bound,
                           grid.prior_mean)
    index = view.exponential([-float(s) for s in scores], sensitivity, epsilon, label=label)
    lengthscale, noise = grid.candidates[index]
    return Selection(int(index), lengthscale, float(noise), sensitivity.value)
