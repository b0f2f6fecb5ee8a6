"""Kusner et al. 2015, Algorithms 1 (noisy observations) and 2 (exact observations): GP-UCB, then λ̃ by the
exponential mechanism on μ_T and the best value by the Laplace mechanism, both through the Session.

The guarantee is **conditional** (docs/plugins/kusner-bo.md, "What the certificate of Algorithms 1-2 rests on"):
each release is (ε, δ_s)-DP for the validation set only if Assumption 1 holds with the stated k1 and k2, where δ_s
is the failure probability of its sensitivity bound over that GP prior: δ for λ̃, δ for Algorithm 2's value, 5δ/3
for Algorithm 1's value (the union over the events of Theorem 3's proof; docs/constants.md). The training set is
public. Releasing both composes to (2ε, δ + δ_s) (Sec. 3.3); the session's accountant certifies the composition
(PLD gives slightly less than 2ε at δ_B ≥ δ + δ_s). Both charges are
checked against the budget before GP-UCB evaluates anything (:meth:`Session.check_affordable`), and T is fixed up
front.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Assumption, Sensitivity, from_formula
from dpaudit.validation import check_count, check_delta, check_epsilon, check_positive
from dpaudit_plugins.kusner_bo.constants import check_k1
from dpaudit_plugins.kusner_bo.gp import GpPosterior, KernelSpec, candidate_array, gp_ucb
from dpaudit_plugins.kusner_bo.gp_sensitivity import BEST_VALUE_NOISE_FREE_ID, BEST_VALUE_NOISY_ID, POSTERIOR_MEAN_ID

if TYPE_CHECKING:
    from dpaudit.session import Session

SOURCE = "Kusner, Gardner, Garnett & Weinberger 2015 (ICML), Assumption 1"


@dataclass(frozen=True)
class GpModel:
    """What Assumption 1 takes as known, fixed before any validation data is read.

    Attributes:
        kernel: k2 on the public coordinates of Λ (normalised, k2(λ, λ) = 1).
        k1: the assumed lower bound on k1(V, V') for neighbouring V, V' (a correlation in [0, 1]).
        gain: in words, what f_V is (e.g. the public affine map of validation accuracy the plugin applies).
    """

    kernel: KernelSpec
    k1: float
    gain: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "k1", check_k1(self.k1))


@dataclass(frozen=True)
class NoisyObservations:
    """Algorithm 1: v_t = f_V(λ_t) + α_t, α_t i.i.d. N(0, σ²) with a known σ > 0."""

    sigma: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))


@dataclass(frozen=True)
class ExactObservations:
    """Algorithm 2: v_t = f_V(λ_t), and GP-UCB's simple regret is at most A·exp(−Tτ/(log T)^{d/4}) on every
    validation set (de Freitas, Smola & Zoghi 2012, Thm. 2), with the user's A ≥ 0 and τ > 0."""

    A: float
    tau: float

    def __post_init__(self) -> None:
        if not (isinstance(self.A, (int, float)) and self.A >= 0):
            raise InvalidParameter(f"A must be a number >= 0, got {self.A!r}")
        object.__setattr__(self, "tau", check_positive("tau", self.tau))


Observations = NoisyObservations | ExactObservations


@dataclass(frozen=True)
class GpRelease:
    """The public outcome of Algorithm 1 or 2.

    Attributes:
        algorithm: 1 or 2.
        index: λ̃ as an index into Λ (exponential mechanism on μ_T).
        value: ṽ (Algorithm 1) or f̃ (Algorithm 2), in the units of f_V.
        epsilon, delta: the per-release ε and the δ of the constants (each sensitivity's ``failure_probability`` is
            what is charged as δ: δ, or 5δ/3 for Algorithm 1's value).
        index_sensitivity, value_sensitivity: the two conditional sensitivities, with their derivations.
    """

    algorithm: int
    index: int
    value: float
    epsilon: float
    delta: float
    index_sensitivity: Sensitivity
    value_sensitivity: Sensitivity


def gp_assumptions(model: GpModel, observations: Observations, delta: float, neighbouring: str) -> tuple[
        Assumption, ...]:
    """The statements each release's certificate rests on (conditional ones first)."""
    k = model.kernel
    out = [Assumption(
        id="kusner-assumption-1",
        statement=(f"The gains f_V ({model.gain}) of all validation sets V are jointly distributed as "
                   f"GP(0, k1(V, V') ⊗ k2(λ, λ')) with k2 = {k.name} kernel of lengthscale {k.lengthscale:g} on the "
                   f"public coordinates of Λ (k2(λ, λ) = 1) and k1(V, V') >= {model.k1:g} for every pair of "
                   f"{neighbouring} neighbours. The sensitivity bounds hold with probability >= 1 - {delta:g} over "
                   "this GP prior (not over the mechanism's coins): the (epsilon, delta) guarantee is conditional on "
                   "the model, not a worst case over all data sets."),
        conditional=True, source=SOURCE)]
    if isinstance(observations, NoisyObservations):
        out.append(Assumption(
            id="kusner-gaussian-observation-noise",
            statement=(f"Each evaluation returns f_V(λ) + α with α ~ N(0, {observations.sigma:g}^2) independent of "
                       "everything else (Kusner et al. eq. (2); enters q and C1)."),
            conditional=True, source="Kusner et al. 2015, Sec. 2 and Algorithm 1"))
    else:
        out.append(Assumption(
            id="de-freitas-regret-bound",
            statement=(f"On every validation set, GP-UCB with exact observations attains simple regret "
                       f"f(λ*) - max_(2<=t<=T) f(λ_t) <= A·exp(-Tτ/(log T)^(d/4)) with A = {observations.A:g}, "
                       f"τ = {observations.tau:g} (de Freitas, Smola & Zoghi 2012, Thm. 2, proved there for their "
                       "branch-and-bound UCB under smoothness conditions on f; user-supplied, not checked here)."),
            conditional=True, source="Kusner et al. 2015, Algorithm 2 and Theorem 5"))
    out.append(Assumption(
        id="kusner-training-set-public",
        statement="Only the validation set is protected: the training data and the models trained on it are public.",
        conditional=False, source="Kusner et al. 2015, Sec. 1 and Sec. 7"))
    return tuple(out)


def gp_sensitivities(model: GpModel, observations: Observations, candidates: object, T: int, delta: float,
                     neighbouring: str) -> tuple[Sensitivity, Sensitivity]:
    """(the exponential mechanism's Δ on μ_T, the Laplace sensitivity of the best value), both registered formulas
    with failure probability δ (5δ/3 for Algorithm 1's value) and the assumptions of :func:`gp_assumptions`."""
    X = candidate_array(candidates)
    n, d = X.shape
    T = check_count("T", T)
    delta = check_delta(delta, allow_zero=False)
    assumptions = gp_assumptions(model, observations, delta, neighbouring)
    index_sens = from_formula(POSTERIOR_MEAN_ID, neighbouring, assumptions=assumptions, n_candidates=n, T=T,
                              delta=delta, k1=model.k1)
    if isinstance(observations, NoisyObservations):
        value_sens = from_formula(BEST_VALUE_NOISY_ID, neighbouring, assumptions=assumptions,
                                  kernel=model.kernel.name, lengthscale=model.kernel.lengthscale,
                                  candidates=X.tolist(), T=T, delta=delta, k1=model.k1, sigma=observations.sigma)
    else:
        value_sens = from_formula(BEST_VALUE_NOISE_FREE_ID, neighbouring, assumptions=assumptions, n_candidates=n,
                                  T=T, delta=delta, k1=model.k1, A=observations.A, tau=observations.tau,
                                  dimension=d)
    return index_sens, value_sens


def run_gp_algorithm(session: Session, objective: Callable[[int], float], candidates: object, *, model: GpModel,
                     observations: Observations, T: int, epsilon: float, delta: float,
                     label: str = "kusner-bo") -> GpRelease:
    """Algorithm 1 (``NoisyObservations``) or 2 (``ExactObservations``) on a finite public Λ.

    Args:
        session: the audited session; its device runs the GP.
        objective: f_V (plus noise for Algorithm 1) at an index of Λ; reads the protected validation set.
        candidates: Λ in the kernel's coordinates, shape (|Λ|, d).
        model: k2, k1 and what the gain is (Assumption 1).
        observations: the noise model (and, for Algorithm 2, the regret constants).
        T: GP-UCB steps (≥ 2 for Algorithm 2, which releases max over 2 ≤ t ≤ T).
        epsilon, delta: each release's ε and the δ of the constants (see :class:`GpRelease`).
        label: prefix of the ledger labels.

    Raises:
        InvalidParameter: bad parameters. BudgetExceeded: the two releases do not fit (nothing charged or run).
    """
    epsilon = check_epsilon(epsilon)
    exact = isinstance(observations, ExactObservations)
    T = check_count("T", T, minimum=2 if exact else 1)
    index_sens, value_sens = gp_sensitivities(model, observations, candidates, T, delta, session.neighbouring.value)
    X = candidate_array(candidates)
    algorithm = 2 if exact else 1
    what = "best exact value max_(2<=t<=T) f(λ_t)" if exact else "best noisy observation max_t v_t"
    index_label = f"{label} algorithm {algorithm}: λ̃ by the exponential mechanism on μ_T"
    value_label = f"{label} algorithm {algorithm}: {what}"
    session.check_affordable([session.exponential_event(index_sens, epsilon, n_candidates=len(X), label=index_label),
                              session.laplace_event(value_sens, epsilon, label=value_label)])
    noise_variance = 0.0 if exact else observations.sigma ** 2
    trace = gp_ucb(objective, GpPosterior(model.kernel, X, noise_variance, session.device), T, delta)
    index = session.exponential(trace.final_mean.tolist(), index_sens, epsilon, label=index_label)
    best = max(trace.values[1:] if exact else trace.values)
    value = float(session.laplace(best, value_sens, epsilon, label=value_label))
    return GpRelease(algorithm, int(index), value, epsilon, delta, index_sens, value_sens)
