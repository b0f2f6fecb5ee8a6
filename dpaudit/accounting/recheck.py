"""The verifier's recomputation of a certified ε, with an independent implementation where one exists.

Two checks (docs/accounting.md, "Independent recheck"):

1. Recompute the claim with the accountant that attained it: the claim must be ≥ recomputed·(1 − 10⁻⁹).
2. Recompute with an *independent* implementation of a bound in the same family, and fail when the claim is below
   what it proves:

   ======== ==================================================== =========================================
   claim    independent                                          fails when
   ======== ==================================================== =========================================
   pld      the larger of Opacus PRV ε_lower of the Poisson-     claim < the larger (both lower bounds
            subsampled-Gaussian part and the tilted hockey-      on ε; tolerance 0)
            stick lower bound (:mod:`.hockey_stick`) of the
            other leaves ((ε, δ) units as (ε, δ) randomized
            response, Laplace / 1-D discrete Gaussian exact)
   prv      dp_accounting PLD, optimistic estimate               claim < ε_optimistic (a lower bound on ε)
   rdp      dp_accounting RDP curves + ``compute_epsilon`` on     our RDP ε on the same orders <
            the integer orders of the grid; with without-        independent·(1 − 10⁻⁶), or claim < the
            replacement leaves also the hockey-stick lower       without-replacement lower bound
            bound of that part (its realising pair of data sets)
   basic    exact ``Fraction`` sums of the charges               claim < exact·(1 − 10⁻¹²) or Σδ_i > δ
   advanced ``Fraction`` sums, KOV Thm. 3.5 in another form      claim < value·(1 − 10⁻⁹)
   ======== ==================================================== =========================================

   A repeat-and-select event (Papernot & Steinke 2022) is recomputed with dp_accounting's
   ``_compute_rdp_repeat_and_select`` (the implementation behind its ``RepeatAndSelectDpEvent``) on dp_accounting's
   base curve, and ours with the same integer orders as the grid of its λ̂ minimum.

   The rdp pairing compares integer orders only: dp_accounting 0.6 evaluates fractional orders of the
   subsampled Gaussian with a series that over-estimates (by 2.4 % at α = 1.1 for q = 256/60000, σ = 1.1,
   against a 40-digit quadrature), while Opacus's series matches the quadrature; at integer orders both are
   exact binomial sums and agree to ~10⁻⁹.

When no independent implementation models the event, check 2 is skipped, ``independent`` is ``"none"``, the
independent value is 0 (the only lower bound known) and the reason says so. When the independent implementation
fails (e.g. a leaf whose law would need more than :data:`~dpaudit.accounting.hockey_stick.MAX_LEAF_POINTS` entries,
or a convolution step more than :data:`~dpaudit.accounting.hockey_stick.MAX_COMPOSED_POINTS`), ``independent`` is
``"failed"``, the recheck is not ok and the reason says why ("NOT RECHECKED"): the claim is neither confirmed nor
silently checked against a weaker bound. A lower bound of 0 holds for every claim: it passes, and the reason calls it
UNINFORMATIVE; a lower bound computed on a grid coarsened to fit the leaf limit says so.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from fractions import Fraction

import dp_accounting
import numpy as np

from dpaudit.accounting.advanced import AdvancedComposition
from dpaudit.accounting.base import Accountant
from dpaudit.accounting.basic import approximate_dp_charge
from dpaudit.accounting.charges import (
    DiscreteGaussianSpec,
    LeafSpec,
    PoissonGaussianSpec,
    PureSpec,
    RepeatSelectSpec,
    WorGaussianSpec,
    descriptions_kept,
    tally,
)
from dpaudit.accounting.hockey_stick import epsilon_lower_bound, models
from dpaudit.accounting.pld import fold, leaf_size_reason
from dpaudit.accounting.pld import unsupported_reason as pld_unsupported
from dpaudit.accounting.prv import history_of, prv_bounds
from dpaudit.accounting.prv import unsupported_reason as prv_unsupported
from dpaudit.accounting.rdp import ORDERS, composed_rdp, rdp_to_epsilon
from dpaudit.accounting.registry import get_accountant
from dpaudit.accounting.repeat_select import truncated_negative_binomial_mean
from dpaudit.accounting.tightest import TightestAccountant, member_name
from dpaudit.errors import AccountingError, DPAuditError
from dpaudit.events import PrivacyEvent
from dpaudit.validation import check_delta, check_nonnegative

RECOMPUTE_REL_TOL = 1e-9
RDP_REL_TOL = 1e-6
EXACT_SUM_REL_TOL = 1e-12
ADVANCED_REL_TOL = 1e-9
#: Finer than the accountant's interval: the optimistic estimate loses up to one interval per composition.
OPTIMISTIC_INTERVAL = 1e-4


@dataclass(frozen=True)
class Recheck:
    """Outcome of :func:`recheck`.

    Attributes:
        ok: both checks passed (or check 1 passed and no independent implementation applies).
        method: the accountant that attained the claim (for a ``"tightest"`` claim, the member it resolved to).
        claimed: the certified ε.
        recomputed: ε recomputed with ``method``.
        independent: what the independent implementation computed, or ``"none"``.
        independent_value: its value (0 when there is none).
        tolerance: the relative tolerance of the independent comparison.
        reason: the decision in words.
    """

    ok: bool
    method: str
    claimed: float
    recomputed: float
    independent: str
    independent_value: float
    tolerance: float
    reason: str


@dataclass(frozen=True)
class _Independent:
    name: str
    value: float
    tolerance: float
    ok: bool
    detail: str


def _pld_vs_lower_bounds(counts: dict[LeafSpec, int], delta: float, claimed: float,
                         ours: float) -> _Independent | None:
    """The larger of two lower bounds on ε, each of a sub-composition (its outputs are a post-processing of the
    whole, so the ε of the composition at δ is at least the sub-composition's):

    * Opacus PRV's ε_lower of the Poisson-subsampled-Gaussian part (when Opacus's computation fails, e.g. a step
      whose loss reaches its float limit, :mod:`dpaudit.accounting.prv`, that part joins the next bound instead);
    * the tilted hockey-stick lower bound (:mod:`dpaudit.accounting.hockey_stick`) of the other leaves: the
      (ε, δ) randomized-response pairs of leaves known only through (ε, δ), randomized response for other pure-DP
      leaves, the exact discrete Laplace and 1-D discrete Gaussian pairs (exponential-mechanism leaves left out).
    """
    if delta == 0:
        return None
    found: list[tuple[float, str]] = []
    part = {spec: k for spec, k in counts.items() if isinstance(spec, PoissonGaussianSpec)}
    if part and prv_unsupported(part) is not None:
        part = {}
    failed = ""
    if part:
        scope = "" if len(part) == len(counts) else " of the DP-SGD part alone (a sub-composition)"
        try:
            found.append((prv_bounds(history_of(part), delta)[0], f"opacus PRV eps_lower{scope}"))
        except AccountingError as exc:  # e.g. a step's loss beyond Opacus's float range: the hockey-stick models it
            part, failed = {}, f" (opacus PRV failed: {exc})"
    rest = {spec: k for spec, k in counts.items() if spec not in part and models(spec)}
    if rest:
        modelled, total = sum(rest.values()), sum(counts.values())
        scope = ("" if modelled == total else f" of a sub-composition ({modelled} of {total} applications)") + failed
        bound = epsilon_lower_bound(rest, delta)
        if bound.coarsened:
            scope += f" (on a grid coarsened to {bound.interval:.3g} so that every leaf fits MAX_LEAF_POINTS)"
        found.append((bound.epsilon, f"tilted hockey-stick lower bound{scope}"))
    if not found:
        return None
    lower, name = max(found)
    others = "; ".join(f"{n} {v:.9g}" for v, n in found)
    return _Independent(name, lower, 0.0, claimed >= lower,
                        f"claim {claimed:.9g} vs lower bounds: {others}{_uninformative(lower)}")


def _uninformative(lower: float) -> str:
    """A note for a lower bound of 0, which holds for every claim and so checks nothing (the grid or the tilt could
    not resolve the composition); empty otherwise."""
    return "; the lower bound is 0, UNINFORMATIVE: only the recomputation checked the claim" if lower <= 0 else ""


def _prv_vs_pld(counts: dict[LeafSpec, int], delta: float, claimed: float, ours: float) -> _Independent | None:
    """dp_accounting's optimistic PLD (a lower bound on ε) on :data:`OPTIMISTIC_INTERVAL`, finer than the PLD
    accountant's grid, so the leaves are sized on it: a leaf too large there (every limit of
    :func:`~.pld.leaf_size_reason`, a discrete Laplace's Δ included) raises (NOT RECHECKED), it is never passed over
    as unmodelled; only a tally with a leaf that has no exact PLD is not modelled (None).

    Raises:
        AccountingError: a leaf's PLD is too large to build on that grid (:func:`~.pld.leaf_size_reason`).
    """
    if pld_unsupported(counts, pessimistic=False, sized=False) is not None:
        return None
    for spec in counts:
        too_large = leaf_size_reason(spec, OPTIMISTIC_INTERVAL)
        if too_large is not None:
            raise AccountingError(f"dp_accounting's optimistic PLD not computed on the interval "
                                  f"{OPTIMISTIC_INTERVAL:g}: {too_large}")
    optimistic = fold(None, list(counts.items()), False, OPTIMISTIC_INTERVAL)
    lower = float(optimistic.get_epsilon_for_delta(delta))
    return _Independent(f"dp_accounting PLD optimistic (interval {OPTIMISTIC_INTERVAL:g})", lower, 0.0,
                        claimed >= lower, f"claim {claimed:.9g} vs dp_accounting optimistic PLD {lower:.9g}")


def _dpa_mean_and_shape(spec: RepeatSelectSpec) -> tuple[float, float]:
    """dp_accounting's (mean, shape) parameters of the law of K (``RepeatAndSelectDpEvent``)."""
    p = spec.parameter_map()
    if spec.distribution == "poisson":
        return p["mu"], math.inf
    eta = 1.0 if spec.distribution == "geometric" else p["eta"]
    return truncated_negative_binomial_mean(eta, p["gamma"]), eta


def _dpa_repeat_and_select(spec: RepeatSelectSpec, orders: list[float]) -> np.ndarray:
    """dp_accounting's repeat-and-select RDP on its own base curve."""
    implementation = getattr(dp_accounting.rdp.rdp_privacy_accountant, "_compute_rdp_repeat_and_select", None)
    if implementation is None:
        raise AccountingError("this dp_accounting version has no _compute_rdp_repeat_and_select")
    base = sum(k * _dpa_curve(s, orders) for s, k in spec.base)
    mean, shape = _dpa_mean_and_shape(spec)
    return np.asarray(implementation(orders, base, mean, shape), dtype=float)


def _dpa_curve(spec: LeafSpec, orders: list[float]) -> np.ndarray:
    """dp_accounting's RDP of one application of ``spec`` at ``orders``."""
    relation = dp_accounting.NeighboringRelation
    if isinstance(spec, RepeatSelectSpec):
        return _dpa_repeat_and_select(spec, orders)
    if isinstance(spec, PureSpec):
        acc = dp_accounting.rdp.RdpAccountant(orders, relation.REPLACE_ONE)
        # 2 / (1 + e^ε), written so that e^ε cannot overflow (an ε beyond 709.78 is a legal if absurd charge)
        acc.compose(dp_accounting.RandomizedResponseDpEvent(
            noise_parameter=2.0 * math.exp(-spec.epsilon) / (1.0 + math.exp(-spec.epsilon)), num_buckets=2))
        # an ε-DP mechanism is (α, ε)-RDP at every order α (Mironov 2017, Prop. 3): the cap is the curve where
        # e^{−ε} underflows (ε above about 745), making dp_accounting's randomized response of noise 0 infinite
        curve = np.minimum(acc.rdp, spec.epsilon)
        if spec.bounded_range:
            zcdp = dp_accounting.rdp.RdpAccountant(orders)
            zcdp.compose(dp_accounting.ZCDpEvent(rho=spec.epsilon**2 / 8.0))
            curve = np.minimum(curve, zcdp.rdp)
        return curve
    if isinstance(spec, DiscreteGaussianSpec):
        acc = dp_accounting.rdp.RdpAccountant(orders)
        acc.compose(dp_accounting.ZCDpEvent(rho=spec.sensitivity**2 / (2.0 * spec.sigma**2)))
        return acc.rdp
    if isinstance(spec, PoissonGaussianSpec):
        acc = dp_accounting.rdp.RdpAccountant(orders)
        acc.compose(dp_accounting.PoissonSampledDpEvent(spec.sample_rate,
                                                        dp_accounting.GaussianDpEvent(spec.noise_multiplier)))
        return acc.rdp
    acc = dp_accounting.rdp.RdpAccountant(orders, relation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        spec.dataset_size, spec.batch_size, dp_accounting.GaussianDpEvent(spec.noise_multiplier)))
    return acc.rdp


def _rdp_vs_dp_accounting(counts: dict[LeafSpec, int], delta: float, claimed: float,
                          ours: float) -> _Independent | None:
    mask = np.array([a.is_integer() for a in ORDERS])
    orders = [a for a in ORDERS if a.is_integer()]
    total = sum(k * _dpa_curve(spec, orders) for spec, k in counts.items())
    pure = all(isinstance(s, PureSpec) for s in counts)
    exact_inf = float(sum(Fraction(s.epsilon) * k for s, k in counts.items())) if pure else math.inf
    independent = min(float(dp_accounting.rdp.compute_epsilon(orders, total, delta)[0]) if delta > 0 else math.inf,
                      exact_inf)
    our_rdp, our_inf = composed_rdp(counts, mask)
    ours_same_orders = rdp_to_epsilon(np.array(orders), our_rdp, our_inf, delta)[0]
    ok = ours_same_orders >= independent * (1.0 - RDP_REL_TOL)
    detail = f"our RDP on the integer orders {ours_same_orders:.12g} vs dp_accounting {independent:.12g}"
    name = "dp_accounting RDP, integer orders"
    wor = {s: k for s, k in counts.items() if isinstance(s, WorGaussianSpec)}
    if wor and delta > 0:
        # the without-replacement curve is dp_accounting's in both, so it is also checked against a lower bound
        lower = epsilon_lower_bound(wor, delta).epsilon
        ok = ok and claimed >= lower
        name += "; tilted hockey-stick lower bound of the without-replacement part"
        detail += (f"; claim {claimed:.12g} vs lower bound {lower:.12g} of the without-replacement part (the pair "
                   "of neighbouring data sets that realises it; the RDP curve is dp_accounting's in both)"
                   f"{_uninformative(lower)}")
    return _Independent(name, independent, RDP_REL_TOL, ok, detail)


def _exact_charges(counts: dict[LeafSpec, int]) -> tuple[list[tuple[Fraction, int]], Fraction]:
    charges = [(approximate_dp_charge(s), k) for s, k in counts.items()]
    return [(Fraction(c[0]), k) for c, k in charges], sum((Fraction(c[1]) * k for c, k in charges), Fraction(0))


def _basic_vs_fraction(counts: dict[LeafSpec, int], delta: float, claimed: float, ours: float) -> _Independent:
    eps, spent = _exact_charges(counts)
    exact = float(sum((e * k for e, k in eps), Fraction(0)))
    ok = spent <= Fraction(delta) and claimed >= exact * (1.0 - EXACT_SUM_REL_TOL)
    return _Independent("exact Fraction sum", exact, EXACT_SUM_REL_TOL, ok,
                        f"claim {claimed:.12g} vs exact sum {exact:.12g}; delta spent {float(spent):.3g} <= {delta:g}")


def _advanced_vs_fraction(counts: dict[LeafSpec, int], delta: float, claimed: float, ours: float) -> _Independent:
    eps, spent = _exact_charges(counts)
    delta_prime = Fraction(delta) - spent
    basic = sum((e * k for e, k in eps), Fraction(0))
    if delta_prime < 0:
        return _Independent("exact Fraction sums", math.inf, ADVANCED_REL_TOL, False, "leaves spend more than delta")
    value = float(basic)
    if delta_prime > 0:
        square = float(sum((e * e * k for e, k in eps), Fraction(0)))
        # ε(e^ε − 1)/(e^ε + 1) = ε·tanh(ε/2): the same number without exp(ε), which overflows beyond ε ≈ 709.78
        mean = math.fsum(k * float(e) * math.tanh(float(e) / 2.0) for e, k in eps)
        value = min(value, mean + math.sqrt(-2.0 * math.log(float(delta_prime)) * square))
    return _Independent("exact Fraction sums, KOV Thm. 3.5", value, ADVANCED_REL_TOL,
                        claimed >= value * (1.0 - ADVANCED_REL_TOL),
                        f"claim {claimed:.12g} vs independent advanced composition {value:.12g}")


_INDEPENDENT = {
    "pld": _pld_vs_lower_bounds,
    "prv": _prv_vs_pld,
    "rdp": _rdp_vs_dp_accounting,
    "basic": _basic_vs_fraction,
    AdvancedComposition.name: _advanced_vs_fraction,
}


def recheck(claim_source: str, event: PrivacyEvent, delta: float, claimed_epsilon: float,
            accountant_version: str | None = None) -> Recheck:
    """Re-derive a claimed ε for ``event`` at ``delta`` (module docstring).

    Args:
        claim_source: the accountant that attained the claim (the tightest accountant's reported source, possibly
            with a fallback note: ``"rdp (pld outside its controlled regime: ...)"``).
        event: the composed event the claim is about.
        delta: the δ of the claim.
        claimed_epsilon: the certified ε.
        accountant_version: the claim's recorded ``accountant_version``: a PLD claim (or a tightest one) is
            recomputed with the PLD fold it names (:func:`~dpaudit.accounting.pld.recorded_fold`); None: the current.

    Raises:
        InvalidParameter: unknown ``claim_source``, δ outside [0, 1), a negative or non-finite claim.
        UnsupportedEvent, AccountingError: the named accountant cannot recompute the claim, or the recorded version
            names a PLD fold this code does not have.
    """
    delta = check_delta(delta)
    claimed = check_nonnegative("claimed epsilon", claimed_epsilon)
    accountant = get_accountant(member_name(claim_source), accountant_version)
    # an accountant that composes the parts in its own order (the PLD's fold; the tightest, whose members include it)
    # describes each charge again after the tally: keep the tally's descriptions (elsewhere they would cost time)
    again = type(accountant)._epsilon_for_event is not Accountant._epsilon_for_event
    with descriptions_kept() if again else contextlib.nullcontext():
        _, counts = tally(event)
        if isinstance(accountant, TightestAccountant):
            recomputed, source = accountant.epsilon_with_source(event, delta)
        else:
            recomputed, source = accountant.epsilon_of_tally(counts, delta, event), claim_source
    method = member_name(source)
    recompute_ok = claimed >= recomputed * (1.0 - RECOMPUTE_REL_TOL)
    first = f"claim {claimed:.12g} {'>=' if recompute_ok else '<'} {source} recomputation {recomputed:.12g}"
    try:
        independent = _INDEPENDENT[method](counts, delta, claimed, recomputed)
    except DPAuditError as exc:  # e.g. a leaf too large for the lower bound's arrays (:mod:`.hockey_stick`)
        independent = _Independent("failed", 0.0, 0.0, False, f"independent recomputation failed: {exc}")
    except MemoryError:  # the sum of arrays no single limit bounds (many large leaves): not rechecked, not a crash
        independent = _Independent("failed", 0.0, 0.0, False, "independent recomputation failed: out of memory")
    if independent is None:
        return Recheck(recompute_ok, method, claimed, recomputed, "none", 0.0, 0.0,
                       f"{first}; no independent implementation models this event, so only the recomputation "
                       "was checked")
    ok = recompute_ok and independent.ok
    verdict = "agrees" if independent.ok else "NOT RECHECKED" if independent.name == "failed" else "DISAGREES"
    return Recheck(ok, method, claimed, recomputed, independent.name, independent.value, independent.tolerance,
                   f"{first}; independent: {independent.detail} ({verdict})")
