"""Privacy-random-variable accountant: Opacus 1.6's implementation of Gopi, Lee & Wutschitz 2021.

Only the Poisson-subsampled Gaussian (add/remove) is modelled: it is the only PRV Opacus implements
(``PoissonSubsampledGaussianPRV``, Gopi et al. Props. B1 and B4). The composed PRV is discretised on a mesh chosen
from the error targets ε_err = 0.01 and δ_err = δ/1000 (Opacus's defaults) and
``DiscretePRV.compute_epsilon`` returns (ε_lower, ε_estimate, ε_upper), with

    ε_upper = ε̂(δ − δ_err) + ε_err,   ε_lower = ε̂(δ + δ_err) − ε_err    (Gopi et al. 2021, Thm. 5.5).

Only ε_upper is returned (Opacus's own ``PRVAccountant.get_epsilon`` does the same); ε_lower serves the verifier
as a lower bound (:mod:`dpaudit.accounting.recheck`).

Large ε. ``DiscretePRV.compute_epsilon`` forms d₂(i) = Σ_{j≥i} p_j e^{−t_j} and e^{t_i}·d₂(i) on a domain of
±(L_max + 3), L_max an RDP bound on the composed loss: beyond |t| ≈ 709 the factors e^{±t} overflow or underflow in
float64, so for a composed ε above about 700 its three values came out +∞ (an infinite *lower* bound: not
conservative but wrong, and verify rejected every such claim). :func:`discrete_epsilons` evaluates the same
formula, ε̂(δ') = ln(d₁(i) − δ') − ln(e^{t_i} d₂(i)) at the first grid point i with δ(t_i) ≤ δ', with
e^{t_i} d₂(i) = Σ_{j≥i} p_j e^{−(t_j − t_i)} summed by the backward recurrence s_i = p_i + e^{−Δt} s_{i+1} (every
factor at most 1), and raises instead of returning a non-finite value.

Opacus's PRV itself is float-limited too: its CDF forms (e^t + q − 1)/q, which overflows above
T_q = ln(float max) + ln q, where the CDF then reads 1, so the mass of one step's loss above T_q is moved down into
the cell at T_q. Moving mass down only lowers the computed δ(ε), so ε_lower stays a lower bound, but ε_upper could
fall below the true ε (one step at q = 1, σ = 1/36: 709.79 against the exact 800.59 of the Gaussian mechanism,
Balle & Wang 2018, Thm. 8). The moved law differs from the true one with probability at most
s = Σ_i k_i·P(L_i > T_{q_i}) (:func:`overflow_mass`; a union bound over the steps), and δ(ε) = E[(1 − e^{ε−L})₊]
takes values in [0, 1], so the true δ(ε) exceeds the computed one by at most s: ε_upper is read at δ − δ_err − s
(+∞ when that is below the grid's float resolution: the accountant then states no bound, while ε_lower stays
available to the verifier). s is 0 in float for every step whose loss stays far below 700.

Both directions. Opacus's PRV is the privacy loss of the *remove* direction only. Under add/remove neighbours
the worst case is the larger of the composed remove-direction and add-direction bounds (a given neighbouring
pair is one or the other for every step), and we know of no proof that the remove direction always dominates
after composition. So this accountant returns max(PRV ε_upper of the remove direction, dp_accounting's
pessimistic PLD ε of the add direction): an upper bound in both directions. Opacus's domain-size rule is the one
from the authors' code, which Opacus flags as differing subtly from Remark 5.6 of the paper for ε_err ≥ 1 (we
use ε_err = 0.01). The tightest accountant does not include this accountant (it would never beat the PLD
accountant it already runs by more than the discretisation error, and it costs ten times more); ε_lower of the
remove direction is a valid lower bound on the true ε and serves the verifier (:mod:`dpaudit.accounting.recheck`).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from scipy import signal, special

from dpaudit.accounting.base import Accountant, DeltaUnreachable, package_versions
from dpaudit.accounting.charges import LeafSpec, PoissonGaussianSpec
from dpaudit.accounting.opacus_analysis import prv_analysis
from dpaudit.errors import AccountingError

EPS_ERROR = 0.01
DELTA_ERROR_FRACTION = 1e-3


@functools.lru_cache(maxsize=64)
def prv_bounds(history: tuple[tuple[float, float, int], ...], delta: float) -> tuple[float, float, float]:
    """(ε_lower, ε_estimate, ε_upper) for (sample rate, noise multiplier, steps) triples at ``delta`` > 0.

    The construction is that of Opacus's ``PRVAccountant._get_dprv`` through the public
    ``opacus.accountants.analysis.prv`` functions, loaded without Opacus's training stack
    (:func:`dpaudit.accounting.opacus_analysis.prv_analysis`).

    Raises:
        AccountingError: Opacus's discretisation or root search failed.
    """
    opacus = prv_analysis()  # Opacus's own files, without opacus/__init__ (torch)
    delta_error = delta * DELTA_ERROR_FRACTION
    prvs = [opacus.PoissonSubsampledGaussianPRV(q, sigma) for q, sigma, _ in history]
    steps = [k for _, _, k in history]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Opacus's "optimal order is the largest alpha" note
            size = opacus.compute_safe_domain_size(prvs=prvs, max_self_compositions=steps, eps_error=EPS_ERROR,
                                                   delta_error=delta_error)
        mesh = EPS_ERROR / np.sqrt(sum(steps) * np.log(12 / delta_error) / 2)
        domain = opacus.Domain.create_aligned(-size, size, mesh)
        dprvs = [opacus.discretize(opacus.TruncatedPrivacyRandomVariable(p, domain.t_min, domain.t_max), domain)
                 for p in prvs]
        composed = opacus.compose_heterogeneous(dprvs=dprvs, num_self_compositions=steps)
    except (ValueError, RuntimeError, FloatingPointError, OverflowError) as exc:
        raise AccountingError(f"prv: Opacus's PRV computation failed: {exc}") from exc
    return discrete_epsilons(composed.domain.ts, composed.domain.dt, composed.pmf, delta, delta_error,
                             overflow_mass(history))


def overflow_mass(history: tuple[tuple[float, float, int], ...]) -> float:
    """s = Σ k·P(L > T_q): the mass that Opacus's PRV CDF moves down from above T_q = ln(float max) + ln q − 1 (one
    nat below its overflow; module docstring), L the remove-direction loss of one step, whose first distribution is
    (1 − q)N(0, σ²) + qN(1, σ²): L > T ⇔ x > σ²(T + ln(1 + (q − 1)e^{−T}) − ln q) + ½ (Gopi et al. 2021, Prop. B4).
    """
    mass = 0.0
    for q, sigma, k in history:
        top = math.log(np.finfo(float).max) + math.log(q) - 1.0
        x = sigma**2 * (top + math.log1p((q - 1.0) * math.exp(-top)) - math.log(q)) + 0.5
        mass += k * float((1.0 - q) * special.ndtr(-x / sigma) + q * special.ndtr(-(x - 1.0) / sigma))
    return mass


def discrete_epsilons(ts: np.ndarray, dt: float, pmf: np.ndarray, delta: float, delta_error: float,
                      overflow: float = 0.0) -> tuple[float, float, float]:
    """(ε̂(δ + δ_err) − ε_err, ε̂(δ), ε̂(δ − δ_err − s) + ε_err) of a discrete PRV (Gopi et al. 2021, Thm. 5.5), s
    the ``overflow`` mass (:func:`overflow_mass`).

    Opacus's ``DiscretePRV.compute_epsilon``, the same formula, without its overflow at |t| > 709 (module
    docstring): ε̂(δ') = ln(d₁(i) − δ') − ln(s_i) + t_i at the first i with δ(t_i) = d₁(i) − s_i ≤ δ', where
    d₁(i) = Σ_{j≥i} p_j and s_i = Σ_{j≥i} p_j e^{−(t_j − t_i)}.

    Args:
        ts: the grid, ascending with step ``dt``.
        dt: the grid step.
        pmf: the masses on ``ts``.
        delta: δ > δ_err.
        delta_error: δ_err.
        overflow: s ≥ 0.

    Returns:
        The triple; its last entry is +∞ when δ − δ_err − s is below the floating-point resolution of the grid.

    Raises:
        AccountingError: δ − δ_err is below the floating-point resolution of the grid (Opacus's own check), δ'
            is not reached on the grid, or a value is not finite.
    """
    resolution = np.finfo(np.longdouble).eps * len(pmf)
    if resolution > delta - delta_error:
        raise AccountingError("prv: floating-point errors dominate at this delta for this domain size")
    tail = np.flip(np.flip(pmf).cumsum())  # d₁
    # s_i = p_i + e^{−Δt} s_{i+1}: a first-order recursive filter over the reversed masses
    scaled = np.flip(signal.lfilter([1.0], [1.0, -np.exp(-dt)], np.flip(pmf)))
    neg_delta = scaled - tail  # −δ(t_i), non-decreasing

    def epsilon_at(target: float) -> float:
        i = int(np.searchsorted(neg_delta, -target, side="left"))
        if not 0 < i < len(pmf):
            raise AccountingError(f"prv: delta {target:g} is not reached on the PRV's domain")
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(np.log(tail[i] - target) - np.log(scaled[i]) + ts[i])
        if not np.isfinite(value):
            raise AccountingError(f"prv: the PRV's epsilon at delta {target:g} is not finite")
        return value

    upper = epsilon_at(delta - delta_error - overflow) + EPS_ERROR if resolution <= delta - delta_error - overflow \
        else math.inf
    return epsilon_at(delta + delta_error) - EPS_ERROR, epsilon_at(delta), upper


def history_of(counts: dict[LeafSpec, int]) -> tuple[tuple[float, float, int], ...]:
    """The tally as Opacus's (sample rate, noise multiplier, steps) history."""
    return tuple((s.sample_rate, s.noise_multiplier, k) for s, k in counts.items())


def unsupported_reason(counts: dict[LeafSpec, int]) -> str | None:
    """None when every leaf is a Poisson-subsampled Gaussian (the only PRV Opacus implements)."""
    for spec in counts:
        if not isinstance(spec, PoissonGaussianSpec):
            return f"Opacus implements the PRV of the Poisson-subsampled Gaussian only, not {type(spec).__name__}"
    return None


def add_direction_epsilon(counts: dict[LeafSpec, int], delta: float) -> float:
    """Pessimistic PLD ε of the add direction alone (dp_accounting keeps both directions of the subsampled
    Gaussian; ``_pmf_add`` is the add-direction privacy-loss PMF of the composed distribution)."""
    from dpaudit.accounting.pld import PldAccountant

    pmf_add = getattr(PldAccountant().composed(counts), "_pmf_add", None)
    if pmf_add is None:
        raise AccountingError("prv: this dp_accounting version does not expose the add-direction PLD")
    return float(pmf_add.get_epsilon_for_delta(delta))


class PrvAccountant(Accountant):
    """Opacus PRV accountant (remove direction) combined with the add direction's PLD bound; returns the max."""

    name = "prv"

    def version(self) -> str:
        # prv/2: ε read without Opacus's overflow, ε_upper with the overflow mass (module docstring)
        return f"prv/2 (eps_error {EPS_ERROR:g}, delta_error delta/{1 / DELTA_ERROR_FRACTION:g}; " \
               f"{package_versions('opacus')})"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        return unsupported_reason(counts)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        if delta == 0:
            raise DeltaUnreachable("prv: the subsampled Gaussian has no finite epsilon at delta = 0")
        upper = prv_bounds(history_of(counts), delta)[2]
        return upper if math.isinf(upper) else max(upper, add_direction_epsilon(counts, delta))
