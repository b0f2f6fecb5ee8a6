"""An independent LOWER bound on ε(δ): optimistic discretisation and exponentially tilted composition.

The verifier needs, next to every accountant's upper bound, a number that the true ε of the accounted model can
never be below, computed by code that shares no numerics with dp_accounting's PLD or Opacus's PRV. This module
computes the hockey-stick divergence of the composed privacy loss directly:

    δ(ε) = P_∞ + Σ_l p(l) (1 − e^{ε − l})₊        (Meiser & Mohammadi 2018; Sommer, Meiser & Mohammadi 2019)

where p is the law of the composed privacy loss L = Σ L_i under the first distribution of the pair and P_∞ its
mass at +∞ (Zhu, Dong & Wang 2022, Lemma 5: δ(ε) = E_P[(1 − e^{ε−L})₊]). Three steps, each of which can only
*lower* δ(ε), so ε_lower(δ) = sup{ε : δ_lower(ε) > δ} ≤ the true ε(δ):

1. **Optimistic discretisation.** Every privacy loss is rounded *down* to the grid h·Z, and mass below the window is
   dropped (δ is non-decreasing in every loss, so E[(1 − e^{ε−⌊L⌋})₊] ≤ E[(1 − e^{ε−L})₊]); rounding loses at most
   h per application, so ε_lower ≥ ε_true − h·(applications) − (truncation).
2. **Exponential tilting.** The probabilities are multiplied by e^{λl} before composition and divided after
   (tilting commutes with convolution). With λ at the saddle point (the tilted composed law centred on the ε being
   sought) the probabilities that decide δ at tiny δ are the *largest* entries of the tilted arrays, so floating
   point error is relative to them, not to the bulk of the law (which is what an untilted FFT loses at δ ≈ 10⁻¹¹).
3. **Certified FFT error.** Each FFT convolution of non-negative arrays a, b has entrywise error at most
   c·u·log₂N·(‖a‖₂‖b‖₁ + ‖a‖₁‖b‖₂) (Higham 2002, Thm. 24.2, carried through the pointwise product and the inverse
   transform; c = 16 here, generous). That bound is *subtracted* from every entry and negatives are set to 0, so each
   computed entry stays below the exact convolution of the (already lower) inputs; entries that only noise could
   make positive vanish, which also truncates the tails.

Pairs modelled (the dominating pair every accountant here uses, or a pair of neighbouring data sets that the
mechanism really produces, so the true ε of the accounted model is at least what is computed):

* Poisson-subsampled Gaussian, add/remove: ((1 − q)N(0, σ²) + qN(1, σ²), N(0, σ²)) and the reverse order; both
  directions are composed separately and the larger ε is returned (a neighbouring pair is one or the other).
* Fixed-size batches without replacement, replace-one (b of n, γ = b/n, σ relative to the replace-one sensitivity):
  the same pair with q = γ, *realised* by two data sets (all other records' clipped gradients −C, the replaced
  record's +C in one and −C in the other: the noisy sum differs by 2C exactly when the record is drawn, probability
  γ). Replace-one is symmetric, so both orders count.
* 1-D discrete Laplace (scale t, integer sensitivity Δ in grid units): the exact pair (loss (|z − Δ| − |z|)/t).
* 1-D discrete Gaussian (σ, integer Δ in grid units): the exact pair (loss (Δ² − 2zΔ)/(2σ²)).
* Other pure ε-DP leaves that are not bounded-range: binary randomized response (±ε), which every accountant here
  treats them as; a leaf known only through (ε, δ) (``ApproximateSpec``): the (ε, δ) randomized-response pair
  (+∞ with probability δ, ±ε otherwise; Kairouz, Oh & Viswanath 2015).
* Left out (a sub-composition still gives a lower bound: dropping outputs is post-processing): exponential-mechanism
  leaves (bounded range: the RDP accountant's curve for them is below randomized response's), multi-dimensional
  discrete Gaussians and repeat-and-select.

Size: each leaf's array (one entry per grid step of its loss support; the discrete Laplace also enumerates its Δ − 1
middle outputs) is sized before it is built and refused above :data:`MAX_LEAF_POINTS` with an
:class:`~dpaudit.errors.AccountingError` naming the leaf (docs/accounting.md, "Size limit"), and so is every
convolution step's result above :data:`MAX_COMPOSED_POINTS` (a huge count): a hostile or extreme ledger cannot make
the verifier die with a MemoryError (a step peaks near 0.8 GB at the limit, about 1.5 GB with its inputs held), and
the leaf is not quietly left out (which would check the claim against a weaker bound). Where only the default grid is
too fine for a randomized-response or discrete Laplace span, the grid is coarsened instead (:func:`fitting_interval`:
still a lower bound, step 1). A 1-D discrete Gaussian above the limit is left out (:func:`discrete_gaussian_pmf`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
from scipy import fft as sp_fft
from scipy import special

from dpaudit.accounting.charges import (
    ApproximateSpec,
    DiscreteGaussianSpec,
    LeafSpec,
    PoissonGaussianSpec,
    PureSpec,
    WorGaussianSpec,
)
from dpaudit.errors import AccountingError, InvalidParameter

#: Default loss grid h = BIAS_TARGET / (applications), clamped to [MIN_INTERVAL, MAX_INTERVAL]: the rounding then
#: costs at most BIAS_TARGET in ε (more only where the clamp binds).
BIAS_TARGET = 0.02
MIN_INTERVAL = 1e-5
MAX_INTERVAL = 1e-3
#: Tilted log-masses more than this many nats below a leaf's largest are dropped (far below FFT resolution).
LOG_MASS_WINDOW = 60.0
#: Constant c of the FFT error bound (module docstring, step 3).
FFT_ERROR_CONSTANT = 16.0
#: Standard deviations of Gaussian noise kept on each side of the window in x.
GAUSSIAN_SPAN = 40.0
#: Largest array one leaf's law may need: its grid points (subsampled Gaussian, randomized response, discrete Laplace
#: on the float grid) or the outputs it enumerates (the Δ − 1 middle outputs of a discrete Laplace). A larger leaf
#: raises :class:`~dpaudit.errors.AccountingError` naming this limit (the verifier then reports the lower bound as
#: not computed), except a discrete Gaussian, which is left out (a sub-composition still gives a lower bound).
MAX_LEAF_POINTS = 20_000_000
#: Largest array one convolution step may produce (:func:`_convolve`, sized before its transforms are allocated, about
#: 48 bytes a point at the peak: 0.8 GB at the limit); a larger step raises :class:`~dpaudit.errors.AccountingError`
#: naming this limit. The composed law of k applications of a leaf spans up to k times the leaf's (less the tails the
#: error bound trims), so a huge count is refused here instead of failing with a MemoryError.
MAX_COMPOSED_POINTS = 2**24
#: Newton steps on the tilt λ (each a full composition at a coarse grid).
TILT_ITERATIONS = 6
#: Grid used while searching for the tilt.
COARSE_INTERVAL = 1e-2
#: Aligned grids (:func:`lattice_of`): the composed law's target span in grid points, its spread per √k cells, and
#: the most grid points per atom.
LATTICE_POINTS = 2**19
LATTICE_SPREAD = 22
MAX_CELLS = 1024


@dataclass(frozen=True)
class LossPmf:
    """The law of one privacy loss under the first distribution of a pair, rounded down to the grid h·Z.

    Attributes:
        offset: grid index of ``log_probs[0]`` (the loss value is (offset + i)·h).
        log_probs: natural logarithms of the masses (``-inf`` allowed).
        infinity: the mass at loss +∞.
    """

    offset: int
    log_probs: np.ndarray
    infinity: float = 0.0


@dataclass(frozen=True)
class LowerBound:
    """Outcome of :func:`epsilon_lower_bound`.

    Attributes:
        epsilon: a lower bound on ε(δ) of the modelled part of the composition.
        delta: the δ it is for.
        interval: the loss grid h used.
        tilt: the exponential tilt λ used.
        modelled: number of applications modelled; ``left_out`` of the tally were left out (sub-composition).
        coarsened: the default grid was coarsened so that every leaf's span fits :data:`MAX_LEAF_POINTS`
            (:func:`fitting_interval`).
    """

    epsilon: float
    delta: float
    interval: float
    tilt: float
    modelled: int
    left_out: int
    coarsened: bool = False


def _log_diff_ndtr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ln(Φ(b) − Φ(a)) for a ≤ b elementwise, accurate in both tails."""
    upper = a > 0
    hi = np.where(upper, special.log_ndtr(-a), special.log_ndtr(b))
    lo = np.where(upper, special.log_ndtr(-b), special.log_ndtr(a))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = hi + np.log1p(-np.exp(np.minimum(lo - hi, 0.0)))
    return np.where(b > a, out, -np.inf)


def _check_points(points: float, what: str) -> None:
    """Refuse a leaf whose law needs more than :data:`MAX_LEAF_POINTS` entries, before anything is allocated.

    ``points`` is a float so that a span that overflows (or is NaN) is refused too, never passed to ``math.floor``.

    Raises:
        AccountingError: ``points`` is above the limit or not finite.
    """
    _refuse_above(points, what, "MAX_LEAF_POINTS", MAX_LEAF_POINTS)


def _refuse_above(points: float, what: str, name: str, limit: int) -> None:
    """Raise :class:`~dpaudit.errors.AccountingError` naming the limit ``name`` = ``limit`` unless ``points`` is at
    most ``limit`` (a NaN or infinite size is above it)."""
    if not points <= limit:
        raise AccountingError(f"hockey-stick lower bound not computed: {what} needs {points:.4g} points, more than "
                              f"{name} = {limit}")


def _mixture_inverse(y: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """x with g(x) = y for g(x) = ln((1 − q) + q·e^{(2x − 1)/(2σ²)}), −∞ where y ≤ ln(1 − q)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        # ln(e^y − (1 − q)): expm1(y) + q for y ≤ 0, y + ln(1 − (1 − q)e^{−y}) above (e^y overflows beyond 709)
        above = y + np.log1p(-(1.0 - q) * np.exp(-np.maximum(y, 0.0)))
        inner = np.where(y > 0, above, np.log(np.maximum(np.expm1(np.minimum(y, 0.0)) + q, 0.0))) - math.log(q)
    return np.where(y > math.log1p(-q) if q < 1 else np.ones_like(y, dtype=bool), sigma**2 * inner + 0.5, -np.inf)


def _mixture_g(x: float, q: float, sigma: float) -> float:
    return float(np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + (2 * x - 1) / (2 * sigma**2)))


def subsampled_gaussian_pmf(q: float, sigma: float, h: float, tilt: float, remove: bool) -> LossPmf:
    """Loss law of ((1 − q)N(0, σ²) + qN(1, σ²), N(0, σ²)) (``remove``) or of the reversed pair, rounded down.

    The loss of an output x is g(x) = ln((1 − q) + q·e^{(2x − 1)/(2σ²)}) (remove; increasing in x) or −g(x) (add),
    so each grid cell of the loss is an interval of x whose mass is a difference of normal CDFs, computed in log
    space. The window in x is [−40σ, 1 + max(λ, 0) + 40σ], which holds the tilted law's bulk; mass above it is
    lumped into the top cell (its loss is at least that cell's), mass below it dropped unless the loss is bounded
    below there (remove: g ≥ ln(1 − q), lumped into the bottom cell).
    """
    span = GAUSSIAN_SPAN * sigma
    x_lo, x_hi = -span, 1.0 + max(tilt, 0.0) + span
    if remove:
        j_lo = math.floor(_mixture_g(x_lo, q, sigma) / h)
        j_hi = math.ceil(_mixture_g(x_hi, q, sigma) / h)
    else:
        j_lo = math.floor(-_mixture_g(x_hi, q, sigma) / h)
        j_hi = math.floor(-_mixture_g(x_lo, q, sigma) / h)
    _check_points(j_hi - j_lo + 1.0, f"a subsampled Gaussian (q = {q:g}, sigma = {sigma:g}) at interval {h:g}")
    j = np.arange(j_lo, j_hi + 1, dtype=float)
    if remove:
        # cell j: x in (g⁻¹(jh), g⁻¹((j+1)h)]; the top cell runs to +∞, the bottom one from g⁻¹(j_lo·h)
        left = _mixture_inverse(j * h, q, sigma)
        right = np.append(left[1:], np.inf)
        first = np.logaddexp(math.log1p(-q) + _log_diff_ndtr(left / sigma, right / sigma) if q < 1 else -np.inf,
                             math.log(q) + _log_diff_ndtr((left - 1) / sigma, (right - 1) / sigma))
        return LossPmf(j_lo, first)
    # add: loss −g(x) in [jh, (j+1)h)  ⇔  x in [g⁻¹(−(j+1)h), g⁻¹(−jh)); the top cell takes every x below
    right = _mixture_inverse(-j * h, q, sigma)
    left = _mixture_inverse(-(j + 1) * h, q, sigma)
    left[-1] = -np.inf
    return LossPmf(j_lo, _log_diff_ndtr(left / sigma, right / sigma))


def randomized_response_pmf(epsilon: float, delta: float, h: float) -> LossPmf:
    """The (ε, δ) randomized-response pair: +∞ w.p. δ, +ε w.p. (1 − δ)e^ε/(1 + e^ε), −ε w.p. (1 − δ)/(1 + e^ε).

    Raises:
        AccountingError: the span 2ε/h is more than :data:`MAX_LEAF_POINTS` grid points.
    """
    _check_points(2.0 * epsilon / h + 2.0, f"randomized response at epsilon = {epsilon:g} on the interval {h:g}")
    hi, lo = math.floor(epsilon / h), math.floor(-epsilon / h)
    log_rest = math.log1p(-delta) if delta < 1 else -math.inf
    log_probs = np.full(hi - lo + 1, -np.inf)
    log_probs[0] = log_rest - float(np.logaddexp(0.0, epsilon))
    log_probs[-1] = log_rest - float(np.logaddexp(0.0, -epsilon))
    return LossPmf(lo, log_probs, delta)


def _binned(losses: np.ndarray, log_mass: np.ndarray, h: float) -> LossPmf:
    """Masses at real losses, summed into the grid cells that round each loss down."""
    index = np.floor(losses / h).astype(np.int64)
    lo = int(index.min())
    top = float(np.max(log_mass))
    sums = np.bincount(index - lo, weights=np.exp(log_mass - top))
    with np.errstate(divide="ignore"):
        return LossPmf(lo, np.log(sums) + top)


def discrete_laplace_pmf(parameter: float, sensitivity: int, h: float) -> LossPmf:
    """The discrete Laplace pair: P(z) ∝ e^{−a|z|} vs the same shifted by Δ; loss a(|z − Δ| − |z|) under P.

    The loss is aΔ for z ≤ 0 (mass 1/(1 + e^{−a})), −aΔ for z ≥ Δ (mass e^{−aΔ}/(1 + e^{−a})), a(Δ − 2z) between.

    Raises:
        AccountingError: Δ or the span 2aΔ/h is more than :data:`MAX_LEAF_POINTS` points.
    """
    a, d = parameter, sensitivity
    _check_discrete_laplace(d)
    _check_points(2.0 * a * d / h + 2.0, f"a discrete Laplace of loss a*Delta = {a * d:g} on the interval {h:g}")
    log_norm = math.log(-math.expm1(-a)) - float(np.logaddexp(0.0, -a))
    z = np.arange(1, d, dtype=float)
    losses = np.concatenate(([a * d, -a * d], a * (d - 2 * z)))
    log_mass = np.concatenate(([-float(np.logaddexp(0.0, -a)), -a * d - float(np.logaddexp(0.0, -a))],
                               log_norm - a * z))
    return _binned(losses, log_mass, h)


def _check_discrete_laplace(sensitivity: int) -> None:
    """Refuse a discrete Laplace whose Δ − 1 middle outputs (enumerated by the two builders below) are too many."""
    _check_points(float(sensitivity), f"a discrete Laplace of sensitivity Delta = {sensitivity} grid units")


def discrete_laplace_lattice_pmf(parameter: float, sensitivity: int, cells: int) -> LossPmf:
    """The discrete Laplace pair of :func:`discrete_laplace_pmf` on the grid h = aΔ/``cells`` aligned with its atoms.

    The loss a(Δ − 2z) is ``cells``·(Δ − 2z)/Δ grid units, rounded down by integer arithmetic, so the atoms ±aΔ
    (together at least half of the mass) sit exactly on ±``cells`` and only the middle cells 0 < z < Δ are rounded
    (by less than h each); a float grid instead rounds the atoms down by up to h in every application whenever aΔ/h
    falls just below an integer. With ``cells`` = Δ the law is exact.

    Raises:
        AccountingError: Δ is more than :data:`MAX_LEAF_POINTS`.
    """
    a, d = parameter, sensitivity
    _check_discrete_laplace(d)
    log_norm = math.log(-math.expm1(-a)) - float(np.logaddexp(0.0, -a))
    z = np.arange(1, d, dtype=np.int64)
    index = np.concatenate(([cells, -cells], (cells * (d - 2 * z)) // d))
    log_mass = np.concatenate(([-float(np.logaddexp(0.0, -a)), -a * d - float(np.logaddexp(0.0, -a))],
                               log_norm - a * z.astype(float)))
    top = float(np.max(log_mass))
    sums = np.bincount(index + cells, weights=np.exp(log_mass - top))
    with np.errstate(divide="ignore"):
        return LossPmf(-cells, np.log(sums) + top)


def discrete_gaussian_pmf(sigma: float, sensitivity: int, h: float) -> LossPmf | None:
    """The 1-D discrete Gaussian pair N_Z(0, σ²) vs N_Z(Δ, σ²); loss (Δ² − 2zΔ)/(2σ²) under the first.

    Support |z| ≤ 40σ + Δ (mass beyond is below 10⁻³⁰⁰ and dropped); None when that is more than
    :data:`MAX_LEAF_POINTS` points (the leaf is then left out).
    """
    reach = math.ceil(GAUSSIAN_SPAN * sigma) + sensitivity
    if 2 * reach + 1 > MAX_LEAF_POINTS:
        return None
    z = np.arange(-reach, reach + 1, dtype=float)
    log_w = -z * z / (2 * sigma**2)
    log_mass = log_w - float(special.logsumexp(log_w))
    return _binned((sensitivity**2 - 2 * z * sensitivity) / (2 * sigma**2), log_mass, h)


def leaf_pmfs(spec: LeafSpec, h: float, tilt: float) -> tuple[LossPmf, LossPmf] | None:
    """(remove-direction, add-direction) loss laws of one application of ``spec``; None when it is left out."""
    if isinstance(spec, (PoissonGaussianSpec, WorGaussianSpec)):
        q = spec.sample_rate if isinstance(spec, PoissonGaussianSpec) else spec.batch_size / spec.dataset_size
        return (subsampled_gaussian_pmf(q, spec.noise_multiplier, h, tilt, True),
                subsampled_gaussian_pmf(q, spec.noise_multiplier, h, tilt, False))
    if isinstance(spec, ApproximateSpec):
        pmf = randomized_response_pmf(spec.epsilon, spec.delta, h)
    elif isinstance(spec, PureSpec) and spec.laplace_parameter is not None:
        pmf = discrete_laplace_pmf(spec.laplace_parameter, spec.laplace_sensitivity, h)
    elif isinstance(spec, PureSpec) and not spec.bounded_range:
        pmf = randomized_response_pmf(spec.epsilon, 0.0, h)
    elif isinstance(spec, DiscreteGaussianSpec) and spec.dimension == 1 and spec.sensitivity.is_integer():
        found = discrete_gaussian_pmf(spec.sigma, int(spec.sensitivity), h)
        if found is None:
            return None
        pmf = found
    else:
        return None
    return pmf, pmf


@dataclass(frozen=True)
class _Tilted:
    """Masses p_i = exp(scale − λ·(offset + i)·h)·w_i, w ≥ 0 with max 1 (the tilted law, rescaled)."""

    offset: int
    w: np.ndarray
    scale: float


def _tilt(pmf: LossPmf, h: float, tilt: float) -> _Tilted:
    log_t = pmf.log_probs + tilt * h * (pmf.offset + np.arange(len(pmf.log_probs)))
    top = float(np.max(log_t))
    if not math.isfinite(top):
        raise AccountingError("hockey-stick lower bound: a leaf has no finite mass")
    keep = np.nonzero(log_t >= top - LOG_MASS_WINDOW)[0]
    first, last = int(keep[0]), int(keep[-1])
    return _Tilted(pmf.offset + first, np.exp(log_t[first:last + 1] - top), top)


def _fft_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The linear convolution of ``a`` and ``b`` by real FFTs of the next fast length, as
    ``scipy.signal.fftconvolve`` computes it (same transforms, same product, same result), with one forward
    transform instead of two when ``b`` is ``a`` (the squarings of :func:`_power`)."""
    n = len(a) + len(b) - 1
    size = sp_fft.next_fast_len(n, True)
    fa = sp_fft.rfft(a, size)
    fb = fa if b is a else sp_fft.rfft(b, size)
    return sp_fft.irfft(fa * fb, size)[:n]


def _norm(w: np.ndarray) -> float:
    """‖w‖₂ of the non-negative array ``w`` for the error bound of :func:`_convolve`, in this thread (the BLAS dot
    behind ``np.linalg.norm`` ran on every core: 4-5x the CPU time on a shared machine). A sum of n non-negative
    squares carries a relative error of at most n·u (about 10⁻⁹ for the longest arrays here), far inside the bound's
    generous constant (:data:`FFT_ERROR_CONSTANT`)."""
    return math.sqrt(float(np.einsum("i,i->", w, w)))


def _convolve(a: _Tilted, b: _Tilted) -> _Tilted:
    """Lower bound on the convolution: FFT result minus its certified error, clipped at 0, trimmed, rescaled.

    Raises:
        AccountingError: the result would have more than :data:`MAX_COMPOSED_POINTS` entries (checked first).
    """
    n = len(a.w) + len(b.w) - 1
    _refuse_above(float(n), f"a composed law of {len(a.w)} + {len(b.w)} - 1 grid points", "MAX_COMPOSED_POINTS",
                  MAX_COMPOSED_POINTS)
    if min(len(a.w), len(b.w)) <= 64:
        out = np.convolve(a.w, b.w)  # direct sums of non-negative products: relative error ≤ n·u, covered below
        bound = 2.0 * n * np.finfo(float).eps * out
    else:
        out = _fft_convolve(a.w, b.w)
        # a squaring (:func:`_power`): the two terms of the bound are one product twice
        norms = (2.0 * (_norm(a.w) * np.sum(a.w)) if a.w is b.w
                 else _norm(a.w) * np.sum(b.w) + np.sum(a.w) * _norm(b.w))
        bound = FFT_ERROR_CONSTANT * np.finfo(float).eps * math.log2(max(n, 2)) * norms
    # in place (``out`` is this call's own array): the same operations on the same numbers, without a copy of up to
    # 10⁷ entries for each step
    out -= bound
    np.maximum(out, 0.0, out=out)
    positive = out > 0.0
    if not positive.any():
        raise AccountingError("hockey-stick lower bound: the composition lost all its mass to rounding error")
    first, last = int(positive.argmax()), len(out) - 1 - int(positive[::-1].argmax())
    out = out[first:last + 1]
    top = float(out.max())
    out /= top
    return _Tilted(a.offset + b.offset + first, out, a.scale + b.scale + math.log(top))


def _power(x: _Tilted, k: int) -> _Tilted:
    result: _Tilted | None = None
    while True:
        if k & 1:
            result = x if result is None else _convolve(result, x)
        k >>= 1
        if not k:
            assert result is not None
            return result
        x = _convolve(x, x)


def _epsilon_of(t: _Tilted, infinity: float, h: float, tilt: float, delta: float) -> float:
    """sup{ε ≥ 0 : δ_lower(ε) > δ} by bisection (0 when δ_lower(0) ≤ δ); δ_lower is non-increasing in ε.

    δ_lower(ε) = P_∞ + Σ_{l > ε} p(l)(1 − e^{ε − l}) (module docstring). The grid losses increase with the index,
    so the terms with l > ε are a suffix of the array, found by binary search; the masses p(l) are computed once.
    """
    if infinity > delta:
        return math.inf
    losses = (t.offset + np.arange(len(t.w))) * h
    with np.errstate(divide="ignore", under="ignore"):
        masses = np.exp(t.scale - tilt * losses + np.log(t.w))

    # a relative 1e-9 below each computed δ absorbs the float error of the summation itself
    def exceeds(e: float) -> bool:
        start = int(np.searchsorted(losses, e, side="right"))
        above = float(np.sum(masses[start:] * -np.expm1(e - losses[start:])))
        return (infinity + above) * (1.0 - 1e-9) > delta
    if not exceeds(0.0):
        return 0.0
    lo, hi = 0.0, (t.offset + len(t.w)) * h
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if exceeds(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return lo


def _compose(items: list[tuple[LossPmf, int]], h: float, tilt: float) -> tuple[_Tilted, float]:
    total: _Tilted | None = None
    finite = 1.0
    for pmf, k in items:
        part = _power(_tilt(pmf, h, tilt), k)
        total = part if total is None else _convolve(total, part)
        finite *= (1.0 - pmf.infinity) ** k
    assert total is not None
    return total, 1.0 - finite


def _tilted_moments(t: _Tilted, h: float) -> tuple[float, float]:
    losses = (t.offset + np.arange(len(t.w))) * h
    mass = float(np.sum(t.w))
    mean = float(np.sum(t.w * losses)) / mass
    var = float(np.sum(t.w * (losses - mean) ** 2)) / mass
    return mean, math.sqrt(max(var, h * h))


def _direction_items(counts: dict[LeafSpec, int], h: float, tilt: float, direction: int) -> list[tuple[LossPmf, int]]:
    items = []
    for spec, k in counts.items():
        pmfs = leaf_pmfs(spec, h, tilt)
        if pmfs is not None:
            items.append((pmfs[direction], k))
    return items


def _find_tilt(items_at: Callable[[float], list[tuple[LossPmf, int]]], delta: float, h: float) -> float:
    """Damped Newton steps on λ at a coarse grid until the tilted composed law is centred (within 3 s.d.) on ε.

    The tilted mean is K'(λ) and its variance K''(λ), K the cumulant generating function of the composed loss, so
    λ ← λ + (ε − K'(λ))/K''(λ) moves the centre onto ε (the saddle point). Every λ gives a valid bound; the search
    only makes it tight.
    """
    tilt = 1.0
    for _ in range(TILT_ITERATIONS):
        composed, infinity = _compose(items_at(tilt), h, tilt)
        eps = _epsilon_of(composed, infinity, h, tilt, delta)
        mean, sd = _tilted_moments(composed, h)
        if not math.isfinite(eps) or abs(eps - mean) <= 3.0 * sd:
            break
        tilt = min(4.0 * tilt + 1.0, max(tilt / 4.0, tilt + (eps - mean) / sd**2))
    return tilt


@dataclass(frozen=True)
class _Lattice:
    """A composition of one discrete Laplace or randomized-response spec, on a grid aligned with its atoms.

    Attributes:
        spec: the spec; ``applications`` its count.
        atom: the loss of its atoms (aΔ for the discrete Laplace, ε for randomized response), ``cells`` grid points.
    """

    spec: LeafSpec
    applications: int
    atom: float
    cells: int

    def pmf(self, cells: int) -> LossPmf:
        """One application's loss law on the grid h = atom/``cells`` (randomized response: ±ε, exact at any cells)."""
        if isinstance(self.spec, PureSpec) and self.spec.laplace_parameter is not None:
            return discrete_laplace_lattice_pmf(self.spec.laplace_parameter, self.spec.laplace_sensitivity, cells)
        pmfs = leaf_pmfs(self.spec, self.atom / cells, 0.0)
        assert pmfs is not None  # randomized response is always modelled
        return pmfs[0]


def lattice_of(counts: dict[LeafSpec, int]) -> _Lattice | None:
    """The aligned grid of a composition of a single discrete Laplace or randomized-response spec, else None.

    Its cells per atom are chosen so that the tilted composed law (about :data:`LATTICE_SPREAD`·√k·cells points for
    k applications) stays near :data:`LATTICE_POINTS`, at most :data:`MAX_CELLS` and at most Δ (the exact law);
    randomized response needs one (its losses ±ε are the atoms).
    """
    if len(counts) != 1:
        return None
    ((spec, k),) = counts.items()
    if isinstance(spec, PureSpec) and spec.laplace_parameter is not None:
        atom = spec.laplace_parameter * spec.laplace_sensitivity
        cells = max(1, min(MAX_CELLS, spec.laplace_sensitivity,
                           LATTICE_POINTS // (LATTICE_SPREAD * math.isqrt(k) + 1)))
    elif isinstance(spec, ApproximateSpec) or (isinstance(spec, PureSpec) and not spec.bounded_range):
        atom, cells = spec.epsilon, 1
    else:
        return None
    return _Lattice(spec, k, atom, cells) if atom > 0 and math.isfinite(atom) else None


def _lattice_bound(lattice: _Lattice, delta: float, tilt: float | None) -> LowerBound:
    """The lower bound of :func:`epsilon_lower_bound` on ``lattice``'s aligned grid (the tilt searched on a grid 16
    times coarser, also aligned)."""
    k = lattice.applications
    if tilt is None:
        coarse = max(1, lattice.cells // 16)
        law = [(lattice.pmf(coarse), k)]
        tilt = _find_tilt(lambda _tilt: law, delta, lattice.atom / coarse)
    h = lattice.atom / lattice.cells
    composed, infinity = _compose([(lattice.pmf(lattice.cells), k)], h, tilt)
    return LowerBound(_epsilon_of(composed, infinity, h, tilt, delta), delta, h, tilt, k, 0)


def models(spec: LeafSpec) -> bool:
    """Whether :func:`leaf_pmfs` models ``spec`` (else it is left out of the composition)."""
    if isinstance(spec, (PoissonGaussianSpec, WorGaussianSpec, ApproximateSpec)):
        return True
    if isinstance(spec, PureSpec):
        return spec.laplace_parameter is not None or not spec.bounded_range
    return (isinstance(spec, DiscreteGaussianSpec) and spec.dimension == 1 and spec.sensitivity.is_integer()
            and 2 * (math.ceil(GAUSSIAN_SPAN * spec.sigma) + int(spec.sensitivity)) + 1 <= MAX_LEAF_POINTS)


def default_interval(applications: int) -> float:
    """The loss grid for ``applications`` composed applications (:data:`BIAS_TARGET`)."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, BIAS_TARGET / max(applications, 1)))


def fitting_interval(counts: dict[LeafSpec, int], interval: float) -> float:
    """``interval``, or the finest coarser grid on which the span 2w/h + 2 of every randomized-response (w = ε) and
    discrete Laplace (w = aΔ) leaf fits :data:`MAX_LEAF_POINTS`.

    Rounding every loss down to a coarser grid is still rounding down, so the bound stays a lower bound (module
    docstring, step 1); it only loosens, by at most h per application. A span that is not finite is left to the
    leaf's own check (which refuses it), as are the subsampled Gaussians (their span depends on the tilt).
    """
    widths = [spec.epsilon if not isinstance(spec, PureSpec) or spec.laplace_parameter is None
              else spec.laplace_parameter * spec.laplace_sensitivity
              for spec in counts if isinstance(spec, (ApproximateSpec, PureSpec))]
    # 2w/h + 2 ≤ MAX_LEAF_POINTS at h = 2w/(MAX_LEAF_POINTS − 4): two points of room for the division's rounding
    needed = max((2.0 * w / (MAX_LEAF_POINTS - 4) for w in widths if math.isfinite(w)), default=0.0)
    return max(interval, needed)


def epsilon_lower_bound(counts: dict[LeafSpec, int], delta: float, interval: float | None = None,
                        tilt: float | None = None) -> LowerBound:
    """A lower bound on ε at ``delta`` of the composition ``counts`` (module docstring).

    Args:
        counts: a tally (:func:`dpaudit.accounting.charges.tally`).
        delta: δ in (0, 1).
        interval: the loss grid h; the rounding costs at most h·(applications). None: the grid aligned with the
            atoms where the modelled part is one discrete Laplace or randomized-response spec (:func:`lattice_of`),
            else :func:`default_interval`, coarsened where a leaf's span would not fit :data:`MAX_LEAF_POINTS`
            (:func:`fitting_interval`).
        tilt: the exponential tilt λ ≥ 0; None: found by Newton steps at a coarse grid.

    Raises:
        InvalidParameter: δ outside (0, 1), a non-positive interval or a negative tilt.
        AccountingError: the composition lost its mass to rounding (grid far too coarse or fine for the regime), or
            an array would exceed :data:`MAX_LEAF_POINTS` (a discrete Laplace's Δ, a subsampled Gaussian's span) or
            :data:`MAX_COMPOSED_POINTS` (a convolution step).
    """
    if not 0 < delta < 1:
        raise InvalidParameter(f"delta must be in (0, 1), got {delta!r}")
    if tilt is not None and not tilt >= 0:
        raise InvalidParameter(f"tilt must be >= 0, got {tilt!r}")
    modelled_counts = {s: k for s, k in counts.items() if models(s)}
    lattice = lattice_of(modelled_counts) if interval is None else None
    if lattice is not None:
        found = _lattice_bound(lattice, delta, tilt)
        return replace(found, left_out=sum(counts.values()) - lattice.applications)
    coarsened = False
    if interval is None:
        default = default_interval(sum(modelled_counts.values()))
        interval = fitting_interval(modelled_counts, default)
        coarsened = interval > default
    if not interval > 0:
        raise InvalidParameter(f"interval must be positive, got {interval!r}")
    left_out = sum(counts.values()) - sum(modelled_counts.values())
    best = LowerBound(0.0, delta, interval, 0.0, sum(modelled_counts.values()), left_out, coarsened)
    # only the subsampled Gaussians have two directions; for every other leaf both are one law (:func:`leaf_pmfs`),
    # so the second direction would repeat the first computation exactly
    two_way = any(isinstance(s, (PoissonGaussianSpec, WorGaussianSpec)) for s in modelled_counts)
    for direction in ((0, 1) if two_way else (0,) if modelled_counts else ()):
        coarse = max(interval, min(COARSE_INTERVAL, 10.0 * interval))  # never finer than the (fitting) grid
        lam = _find_tilt(partial(_direction_items, modelled_counts, coarse, direction=direction), delta, coarse) \
            if tilt is None else tilt
        composed, infinity = _compose(_direction_items(modelled_counts, interval, lam, direction), interval, lam)
        eps = _epsilon_of(composed, infinity, interval, lam, delta)
        if eps > best.epsilon:
            best = replace(best, epsilon=eps, tilt=lam)
    return best
