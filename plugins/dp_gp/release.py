"""DP release of GP predictions at public test points: the standard and the cloaking mechanism (Smith et al. 2018,
Sec. 2 and 3), each a whitened Gaussian release through the session's exact discrete Gaussian.

A release has two stages, so that a plan the budget cannot pay for is refused before any private computation:

1. :func:`plan_cloaking` / :func:`plan_standard` compute everything public: the noise covariance shape M and its
   Cholesky factor L (LLᵀ = M), and the sensitivity Δ of the whitened mean w = L⁻¹(f* − m) as a registered formula
   (:mod:`dpaudit_plugins.dp_gp.formulas`), whose public inputs (X, X*, the kernel, the output rule, λ and τ) go into
   the charge record so that ``dpaudit verify`` recomputes Δ. :meth:`ReleasePlan.event` is the event that will be
   charged, for ``view.check_affordable``.
2. :func:`release` asks the budget (``check_affordable``), then computes the private posterior mean on GPyTorch
   (:func:`dpaudit_plugins.dp_gp.gp.posterior_mean`), whitens it, releases w̃ = w + N_Z(0, σ²) per coordinate with
   ``view.gaussian`` (charged, ledgered, σ calibrated by the exact δ(ε) of the discrete Gaussian for any ε, grid
   rounding included), and maps back f̃* = m + L·w̃ (post-processing), which is f* + N(0, σ²M) up to the grid.

The noise added to the predictions is therefore N(0, σ²M): for the cloaking method M is the optimal cloaking
covariance (:mod:`dpaudit_plugins.dp_gp.cloaking`); for the standard method M = K_** + jI, a scaled GP prior sample at
the test points (the paper's eq. (1)), with Δ the exact RKHS sensitivity instead of the paper's d·b(K⁻¹).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.linalg import cholesky, solve_triangular

from dpaudit.errors import InvalidParameter
from dpaudit.events import GaussianEvent
from dpaudit.mechanisms.gaussian import gaussian_event
from dpaudit.registry import DATASET_SIZE_PUBLIC
from dpaudit.sensitivity import Assumption, Neighbouring, Sensitivity, from_formula
from dpaudit.validation import check_finite, check_positive
from dpaudit_plugins.dp_gp.cloaking import (
    DEFAULT_FLOOR_RATIO,
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_TOLERANCE,
    CloakingDesign,
    solve_cloaking,
)
from dpaudit_plugins.dp_gp.formulas import (
    CLOAKING_FORMULA,
    STANDARD_FORMULA,
    as_inputs,
    as_lengthscale,
    cloaking_matrix,
    eq_kernel,
    output_bound,
)

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession

CLOAKING, STANDARD = "cloaking", "standard"
METHODS = (CLOAKING, STANDARD)
#: the grid of the discrete Gaussian is γ = Δ/GRID_DIVISOR (whitened units); rounding inflates Δ by √P·γ
GRID_DIVISOR = 2**16
#: the default public jitter of the standard method's M = K_** + jI, relative to the kernel variance
DEFAULT_JITTER_RATIO = 1e-6

PUBLIC_INPUTS = Assumption(
    id="dp-gp-public-inputs",
    statement="The training inputs X (hence their number) and the test inputs X* are public; only the outputs y are "
    "protected, under replace-one neighbours with every output clipped to the recorded public interval.",
    conditional=True,
    source="Smith, Álvarez, Zwiessele & Lawrence 2018, Sec. 1-2 (inputs public, outputs private)",
)
SIZE_PUBLIC = Assumption(
    id=DATASET_SIZE_PUBLIC,
    statement="The number n of training records is public: it is the number of public inputs X, which fix the "
    "cloaking matrix C = K_*f K⁻¹ and the sensitivity recorded with every dp-gp charge.",
    conditional=True,
    source="Smith et al. 2018, Sec. 2 (K is computed from the public inputs)",
)
#: what every dp-gp charge rests on; pass as ``from_formula(..., assumptions=ASSUMPTIONS)``
ASSUMPTIONS = (PUBLIC_INPUTS, SIZE_PUBLIC)


@dataclass(frozen=True)
class GpModel:
    """The public GP: training inputs and fixed hyperparameters, in normalised output units.

    Attributes:
        X: (n, D) public training inputs.
        lengthscale: the EQ kernel's ℓ, one value or one per input dimension.
        variance: the kernel variance v.
        noise: the noise variance σ_n².
        prior_mean: the public constant prior mean m (normalised units).
    """

    X: np.ndarray
    lengthscale: float | tuple[float, ...]
    variance: float
    noise: float
    prior_mean: float = 0.0

    def __post_init__(self) -> None:
        X = as_inputs(self.X, "X")
        X.setflags(write=False)
        object.__setattr__(self, "X", X)
        ell = as_lengthscale(self.lengthscale, X.shape[1])
        object.__setattr__(self, "lengthscale", float(ell[0]) if np.size(self.lengthscale) == 1 else
                           tuple(float(v) for v in ell))
        object.__setattr__(self, "variance", check_positive("variance", self.variance))
        object.__setattr__(self, "noise", check_positive("noise", self.noise))
        object.__setattr__(self, "prior_mean", check_finite("prior_mean", self.prior_mean))

    def formula_inputs(self) -> dict[str, Any]:
        """The kernel's public inputs as plain JSON (as the formulas read them)."""
        ell = self.lengthscale if isinstance(self.lengthscale, float) else list(self.lengthscale)
        return {"X": self.X.tolist(), "lengthscale": ell, "variance": self.variance, "noise": self.noise}


@dataclass(frozen=True)
class OutputRule:
    """The fixed public rule applied to the private outputs: clip to [clip_lower, clip_upper], then
    (y − centre)/scale. Every constant is public and fixed before any data is read (never computed from y); how many
    outputs the clipping changes is data-dependent and is never recorded or released.
    """

    clip_lower: float
    clip_upper: float
    centre: float
    scale: float

    def __post_init__(self) -> None:
        output_bound(self.clip_lower, self.clip_upper, self.scale, self.centre, Neighbouring.REPLACE_ONE)

    def apply(self, y: np.ndarray) -> np.ndarray:
        """clip(y) normalised, float64 (NaN outputs become ``centre``, i.e. 0 after normalisation)."""
        y = np.nan_to_num(np.asarray(y, dtype=np.float64), nan=self.centre)
        return (np.clip(y, self.clip_lower, self.clip_upper) - self.centre) / self.scale

    def to_original(self, f: np.ndarray) -> np.ndarray:
        """Normalised predictions back in the outputs' units (post-processing)."""
        return self.centre + self.scale * np.asarray(f, dtype=np.float64)

    def formula_inputs(self) -> dict[str, float]:
        return {"clip_lower": self.clip_lower, "clip_upper": self.clip_upper, "centre": self.centre,
                "scale": self.scale}


@dataclass(frozen=True)
class ReleasePlan:
    """Everything public about one release, computed before the data is read.

    Attributes:
        method: "cloaking" or "standard".
        model: the public GP.
        rule: the public output rule.
        X_star: (P, D) test inputs.
        covariance: M (P×P), the shape of the noise added to the normalised predictions (before σ²).
        factor: L, lower-triangular with LLᵀ = M.
        sensitivity: Δ of the whitened mean, a registered formula verify recomputes.
        summary: M's public description (method-specific), for the results and the ledger.
        design: the cloaking design (None for the standard method).
        neighbouring: the relation Δ was computed for; :func:`release` refuses a session with another one.
    """

    method: str
    model: GpModel
    rule: OutputRule
    X_star: np.ndarray
    covariance: np.ndarray = field(repr=False)
    factor: np.ndarray = field(repr=False)
    sensitivity: Sensitivity = field(repr=False)
    summary: dict[str, Any]
    design: CloakingDesign | None = field(default=None, repr=False)
    neighbouring: Neighbouring = Neighbouring.REPLACE_ONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "neighbouring", Neighbouring(self.neighbouring))

    def grid(self) -> float:
        """The discrete Gaussian's grid spacing γ = Δ/:data:`GRID_DIVISOR`."""
        return self.sensitivity.value / GRID_DIVISOR

    def event(self, neighbouring: Neighbouring | str, epsilon: float, delta: float, label: str = "") -> GaussianEvent:
        """The calibrated event :func:`release` charges (for ``check_affordable`` before anything is computed)."""
        return gaussian_event(Neighbouring(neighbouring), self.sensitivity, epsilon, delta,
                              dimension=len(self.X_star), label=label, grid=self.grid())

    def noise_sd(self, sigma: float) -> np.ndarray:
        """The standard deviation of the noise at each test point, in the outputs' units: scale·σ·sqrt(M_jj)."""
        return self.rule.scale * sigma * np.sqrt(np.diag(self.covariance))


@dataclass(frozen=True)
class Release:
    """One DP release of GP predictions.

    Attributes:
        plan: the public plan it was made under.
        predictions: f̃* in the outputs' units (P,).
        sigma: σ, the noise multiplier in whitened units (the noise on the normalised predictions is N(0, σ²M)).
        epsilon, delta: the charge's (ε, δ).
    """

    plan: ReleasePlan
    predictions: np.ndarray
    sigma: float
    epsilon: float
    delta: float

    def to_public(self) -> dict[str, Any]:
        """The public JSON results: predictions, method, Δ, the noise scale and M's summary."""
        return {"method": self.plan.method, "test_points": self.plan.X_star.tolist(),
                "predictions": self.predictions.tolist(), "sensitivity": self.plan.sensitivity.value,
                "sensitivity_formula": self.plan.sensitivity.formula, "sigma": self.sigma,
                "noise_sd": self.plan.noise_sd(self.sigma).tolist(), "epsilon": self.epsilon, "delta": self.delta,
                "covariance": self.plan.summary}


def _factor(M: np.ndarray, what: str) -> np.ndarray:
    try:
        return cholesky(M, lower=True)
    except np.linalg.LinAlgError:
        raise InvalidParameter(f"{what} is not numerically positive definite (raise the jitter or floor)") from None


def plan_cloaking(model: GpModel, rule: OutputRule, X_star: Any, neighbouring: Neighbouring | str, *,
                  tolerance: float = DEFAULT_TOLERANCE, floor_ratio: float = DEFAULT_FLOOR_RATIO,
                  max_iterations: int = DEFAULT_MAX_ITERATIONS) -> ReleasePlan:
    """The cloaking plan: C = K_*f K⁻¹, the optimal feasible M (:func:`~dpaudit_plugins.dp_gp.cloaking.solve_cloaking`)
    and Δ = d·max_i sqrt(c_iᵀM⁻¹c_i) (Smith et al. 2018, Sec. 3, eq. (6)-(9), square root restored).

    Raises:
        InvalidParameter: bad test points, add/remove neighbours, an ill-conditioned problem.
    """
    X_star = as_inputs(X_star, "X_star")
    C, _ = cloaking_matrix(model.X, X_star, model.lengthscale, model.variance, model.noise)
    design = solve_cloaking(C, tolerance=tolerance, floor_ratio=floor_ratio, max_iterations=max_iterations)
    M = design.covariance(C)
    sensitivity = from_formula(CLOAKING_FORMULA, neighbouring, assumptions=ASSUMPTIONS,
                               **model.formula_inputs(), **rule.formula_inputs(), X_star=X_star.tolist(),
                               lambdas=design.lambdas.tolist(), floor=design.floor)
    return ReleasePlan(CLOAKING, model, rule, X_star, M, _factor(M, "the cloaking covariance"), sensitivity,
                       design.summary(), design, neighbouring=Neighbouring(neighbouring))


def plan_standard(model: GpModel, rule: OutputRule, X_star: Any, neighbouring: Neighbouring | str, *,
                  jitter: float | None = None) -> ReleasePlan:
    """The standard plan (Hall et al. 2013 via Smith et al. 2018, Sec. 2): M = K_** + jI, the GP prior at the test
    points, and the exact RKHS sensitivity Δ = d·max_n sqrt(e_nᵀK⁻¹K_fK⁻¹e_n), valid for every X* and j ≥ 0.

    Args:
        jitter: j, public (default :data:`DEFAULT_JITTER_RATIO`·v); only makes M invertible, Δ does not depend on it.

    Raises:
        InvalidParameter: bad test points, add/remove neighbours, an ill-conditioned problem.
    """
    X_star = as_inputs(X_star, "X_star")
    if X_star.shape[1] != model.X.shape[1]:
        raise InvalidParameter(f"X has {model.X.shape[1]} input dimensions but X_star has {X_star.shape[1]}")
    jitter = DEFAULT_JITTER_RATIO * model.variance if jitter is None else check_positive("jitter", jitter)
    M = eq_kernel(X_star, X_star, model.lengthscale, model.variance) + jitter * np.eye(len(X_star))
    sensitivity = from_formula(STANDARD_FORMULA, neighbouring, assumptions=ASSUMPTIONS,
                               **model.formula_inputs(), **rule.formula_inputs(), X_star=X_star.tolist(),
                               jitter=jitter)
    return ReleasePlan(STANDARD, model, rule, X_star, M, _factor(M, "K_** + jitter·I"), sensitivity,
                       {"jitter": jitter, "prior_variance": model.variance}, neighbouring=Neighbouring(neighbouring))


def plan(method: str, model: GpModel, rule: OutputRule, X_star: Any, neighbouring: Neighbouring | str,
         **options: Any) -> ReleasePlan:
    """:func:`plan_cloaking` or :func:`plan_standard` by name."""
    if method == CLOAKING:
        return plan_cloaking(model, rule, X_star, neighbouring, **options)
    if method == STANDARD:
        return plan_standard(model, rule, X_star, neighbouring, **options)
    raise InvalidParameter(f"method must be one of {list(METHODS)}, got {method!r}")


def whiten(plan: ReleasePlan, mean: np.ndarray) -> np.ndarray:
    """w = L⁻¹(f* − m): the vector whose L2 sensitivity is the plan's Δ."""
    return solve_triangular(plan.factor, np.asarray(mean, dtype=np.float64) - plan.model.prior_mean, lower=True)


def unwhiten(plan: ReleasePlan, w: np.ndarray) -> np.ndarray:
    """m + L·w, normalised units (post-processing of the released w̃)."""
    return plan.model.prior_mean + plan.factor @ np.asarray(w, dtype=np.float64)


def release(view: PluginSession, plan: ReleasePlan, y: Sequence[float] | np.ndarray, epsilon: float, delta: float,
            *, label: str = "") -> Release:
    """Release the plan's predictions with (ε, δ)-DP for the outputs ``y`` (module docstring, stage 2).

    The budget is asked first (``view.check_affordable``): a refusal raises before the posterior mean is computed.

    Args:
        view: the plugin's view of the session.
        plan: a plan from :func:`plan_cloaking` or :func:`plan_standard`.
        y: the private outputs, one per row of ``plan.model.X``, in original units (the plan's rule is applied).
        epsilon, delta: this release's budget.
        label: the charge's label.

    Raises:
        BudgetExceeded: the release does not fit the budget (nothing computed or charged).
        InvalidParameter: the plan was made for another neighbouring relation than the session's (nothing charged).
    """
    from dpaudit_plugins.dp_gp.gp import posterior_mean  # torch and GPyTorch only when a release is made

    if Neighbouring(view.neighbouring) != plan.neighbouring:
        raise InvalidParameter(f"the dp-gp plan was made for {plan.neighbouring.value} neighbours but the session "
                               f"uses {Neighbouring(view.neighbouring).value}; plan it again for the session")
    label = label or f"dp-gp {plan.method} release at {len(plan.X_star)} test points"
    event = plan.event(view.neighbouring, epsilon, delta, label)
    view.check_affordable([event])
    model = plan.model
    mean = posterior_mean(model.X, plan.rule.apply(np.asarray(y)), plan.X_star, lengthscale=model.lengthscale,
                          variance=model.variance, noise=model.noise, prior_mean=model.prior_mean,
                          device=view.device)
    noisy = view.gaussian(whiten(plan, mean), plan.sensitivity, epsilon, delta, label=label, grid=plan.grid())
    predictions = plan.rule.to_original(unwhiten(plan, np.atleast_1d(noisy)))
    return Release(plan, predictions, event.sigma, epsilon, delta)
