"""Privacy-loss-distribution accountant: dp_accounting's PLD with pessimistic discretisation (an upper bound).

Koskela, Jälkö & Honkela 2020; Meiser & Mohammadi 2018 ("privacy buckets"); Doroshenko, Ghazi, Kamath, Kumar &
Manurangsi 2022 ("connect the dots"). With ``pessimistic_estimate=True`` dp_accounting rounds every privacy loss
up and moves truncated tail mass to +∞, so the hockey-stick divergence it computes, and hence ε at δ, is an
upper bound on the true one.

Leaves modelled (``dp_accounting.pld.privacy_loss_distribution``):

* Poisson-subsampled Gaussian, add/remove: ``from_gaussian_mechanism(σ, sampling_prob=q)``, which keeps both the
  add and the remove privacy-loss distributions and reports the worse.
* 1-D discrete Laplace: ``from_discrete_laplace_mechanism(1/t, Δ_γ)``, exact (t the scale and Δ_γ the integer L1
  sensitivity, both in grid units).
* Other pure ε-DP leaves (multi-dimensional Laplace, AboveThreshold, exponential): ``from_privacy_parameters(ε,
  0)``, the PLD of randomized response, which dominates every ε-DP mechanism (Kairouz, Oh & Viswanath 2015).
* A leaf known only through an (ε, δ) (a sensitivity that holds with probability 1 − δ_s):
  ``from_privacy_parameters(ε, δ)``, the (ε, δ) randomized-response pair, which dominates every (ε, δ)-DP
  mechanism (the same theorem).
* 1-D discrete Gaussian: ``from_discrete_gaussian_mechanism(σ, Δ_γ)``. dp_accounting truncates the noise at
  ⌈11.6σ⌉, dropping mass τ ≤ 1e-30 per release (its docstring, from Canonne et al.'s tail bound). A mechanism at
  total-variation distance T = Σ τ from the truncated one that is (ε, δ_t)-DP is (ε, δ_t + T(1 + e^ε))-DP, so ε
  is read at δ_t = δ(1 − 10⁻⁶) and the accountant checks T(1 + e^ε) ≤ 10⁻⁶·δ.
* Multi-dimensional discrete Gaussian (the 1-D PLD does not cover an L2 ball in d > 1), sampling without
  replacement (no PLD in dp_accounting 0.6) and repeat-and-select (its bounds are RDP statements): unsupported.
* A leaf whose PLD would be too large to build (:func:`leaf_size_reason`, sized from its parameters: a discrete
  Laplace's Δ, a discrete Gaussian's support, a subsampled Gaussian's connect-the-dots points, any leaf's loss span)
  or whose ε overflows exp (:data:`MAX_GENERIC_EPSILON`): unsupported, so the tightest accountant takes it with its
  other members (docs/accounting.md, "Size limit").

Regime (docs/accounting.md, "Regime"): the FFT composition's rounding error in δ(ε) is estimated
(:func:`fft_noise`); ε is read at δ less ten times the estimate, and the accountant refuses
(:class:`~dpaudit.accounting.base.OutsideControlledRegime`) where that reserve exceeds 1 % of δ (tiny δ, many steps):
there dp_accounting's ε fell below an independent lower bound (:mod:`dpaudit.accounting.hockey_stick`).

Discretisation: :data:`VALUE_DISCRETIZATION_INTERVAL` = 2·10⁻⁴ (10⁵ DP-SGD steps at q = 256/60000, σ = 1.1 take
about 0.3 s with cold caches; 10⁻⁴ changes ε by about 0.01 %).

Composition order (docs/accounting.md, section "pld"): the PLD of a composed event is the left fold, in the
event's order, over its *runs*, maximal stretches of consecutive parts with the same tally; a run of length n enters
the fold as one composition per binary digit d of n, largest first, each with the run's tally self-composed d times
(the fold of its self-composed specs, first-appearance order, with counts times d). It is a function of the event
alone, and it is what the budget filter computes incrementally (the previous fold is kept, so a new part costs one
composition, also inside a run: :class:`Fold`, :class:`FoldCache`), what the certificate computes from the ledger's
charges and what ``dpaudit verify`` recomputes: the same floating-point operations in the same order, hence the same
ε, bit for bit. A tally alone (:meth:`PldAccountant.composed`) is one run of length 1. That is version ``pld/3`` of
the fold on one grid; ``pld/2`` entered a run as one self-composition of its whole length, ``pld/4`` reads the fold on
two grids ("Two grids" below; :data:`FOLDS`). All are pessimistic upper bounds that differ in the last digits, so
verify recomputes a certificate with the fold its recorded accountant version names (:func:`recorded_fold`), bit for
bit.

Two grids (fold ``pld/4``; docs/accounting.md, "pld"): the canonical fold is computed on the fine grid and on a grid
16 times coarser (:data:`ADMISSION_INTERVAL`, connect-the-dots leaves built at that interval, so about 16 times fewer
loss values, each composition about 16 times cheaper), and ε is the smaller of the two readings, each a sound upper
bound (:func:`smallest_reading`). The coarse reading alone is the budget filter's admission bound
(:meth:`PldAccountant.admission_bound`): it is at least ε by construction (ε is the minimum over both grids, the
coarse one computed by the same operations), so admitting on it never lets the certified ε exceed the budget; only
when it is over the budget does the filter compute ε itself. ``pld/3`` is the fine grid alone.

ε is read off a composed PLD by :class:`HockeyStick` (the same hockey-stick formula as dp_accounting's
``get_epsilon_for_delta``, vectorised with numpy instead of a Python loop over the loss grid).

Caching: one PLD per leaf spec, per (spec, count) self-composition and per (tally, digit) run (module level), and
per accountant and grid the last fold and the one it resumed from (:class:`FoldCache`: a refused candidate's
successor resumes from the latter).
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import fft as sp_fft
from scipy import signal

from dpaudit.accounting.base import Accountant, DeltaUnreachable, OutsideControlledRegime, package_versions
from dpaudit.accounting.charges import (
    ApproximateSpec,
    DiscreteGaussianSpec,
    LeafSpec,
    PoissonGaussianSpec,
    PureSpec,
    RepeatSelectSpec,
    event_counts,
    tally,
)
from dpaudit.errors import AccountingError, UnsupportedEvent
from dpaudit.events import ComposedEvent, PrivacyEvent
from dpaudit.validation import check_delta

VALUE_DISCRETIZATION_INTERVAL = 2e-4
#: The coarser grid of fold ``pld/4`` (module docstring, "Two grids"): 16 intervals of the fine one.
ADMISSION_INTERVAL = 16 * VALUE_DISCRETIZATION_INTERVAL
#: Noise mass dp_accounting's discrete Gaussian PLD drops per release (truncation at ⌈11.6σ⌉).
DISCRETE_GAUSSIAN_TAIL = 1e-30
#: Fraction of δ reserved for the discrete Gaussian truncation.
TRUNCATION_DELTA_SHARE = 1e-6
#: The PLD answers only while NOISE_RESERVE times its estimated FFT rounding error in δ (:func:`fft_noise`), which
#: is reserved from δ, is at most this share of δ.
FFT_NOISE_SHARE = 1e-2
#: Multiple of the estimated rounding error reserved from δ (the estimate may be low by this factor).
NOISE_RESERVE = 10.0
#: Observed negative mass is multiplied by this to cover the positive rounding noise of the same size.
NEGATIVE_MASS_FACTOR = 4.0
#: Probability mass each composition may cut from the tails of the composed PMF (dp_accounting's default): the left
#: tail is added to the smallest loss kept and the right tail to the infinite loss, so the estimate stays pessimistic.
TAIL_MASS_TRUNCATION = 1e-15
#: Spectra kept of recent compositions' second operands (:func:`_convolve`).
SPECTRA_KEPT = 8
#: Largest grid sensitivity Δ_γ of a 1-D discrete Laplace leaf: dp_accounting's discrete Laplace PLD enumerates the
#: Δ_γ + 1 outputs between the two centres (about 110 bytes and 1 µs each), so a hostile or extreme ledger could
#: otherwise make the PLD (and ``dpaudit verify``'s recomputation) allocate gigabytes; the other accountants take it.
MAX_LAPLACE_SENSITIVITY = 2**22
#: Largest ε of a generic pure or (ε, δ) leaf: dp_accounting builds its PLD from exp(ε), which overflows a float
#: beyond ln(float max) ≈ 709.78 (an OverflowError that would end a session's close); the other accountants take it.
MAX_GENERIC_EPSILON = 700.0
#: Largest noise support of a 1-D discrete Gaussian leaf: dp_accounting truncates it at T = ⌈11.6σ⌉ and enumerates the
#: 2T + 1 outputs (arrays, then a Python loop over them: σ = 1.8·10⁵, 4.2·10⁶ outputs, took 5.3 s and 0.55 GB; σ =
#: 10¹⁰ asked for 1.74 TiB); the other accountants take it.
MAX_DISCRETE_GAUSSIAN_SUPPORT = 2**22
#: Largest loss span of a leaf, in grid points of the finest grid (the dense array it becomes in a composition, 8
#: bytes a point: 64 MiB at the limit; a generic leaf of ε ≤ MAX_GENERIC_EPSILON spans at most 7·10⁶).
MAX_LOSS_POINTS = 2**23
#: Largest number of loss grid points of one direction of a Poisson-subsampled Gaussian leaf: the connect-the-dots
#: builder evaluates δ at each (measured on the shared 2-core machine, q = 0.5: σ = 0.1, 7.4·10⁵ points, 5 s; σ = 0.07,
#: 1.2·10⁶ points, 9.5 s and 377 MB; σ = 0.03, 4.4·10⁶ points, 43 s and 1 GB); the other accountants take it.
MAX_CONNECT_DOTS_POINTS = 2**20


def leaf_size_reason(spec: LeafSpec, interval: float | None = None) -> str | None:
    """Why one leaf's PLD is too large to build on the grid ``interval`` (None: the finest of :data:`FOLDS`), or
    None if it is not, from its parameters alone, before anything is allocated: a discrete Gaussian's enumerated
    support 2⌈11.6σ⌉ + 2, a subsampled Gaussian's grid points (its loss range as dp_accounting's own tail bounds give
    it, per direction: the connect-the-dots builder and the optimistic privacy-buckets one both walk it), a discrete
    Laplace's Δ_γ + 1 enumerated outputs (on every grid: :data:`MAX_LAPLACE_SENSITIVITY`), and every leaf's loss span
    w (discrete Gaussian Δ(2T + Δ)/σ², discrete Laplace 2aΔ) as w/h + 3 grid points (the two ends rounded outwards,
    plus one). A non-finite size counts as above the limit."""
    if interval is None:
        interval = min(i for scheme in FOLDS.values() for i in scheme.intervals)
    if isinstance(spec, PureSpec) and spec.laplace_sensitivity > MAX_LAPLACE_SENSITIVITY:
        return (f"a discrete Laplace leaf of grid sensitivity {spec.laplace_sensitivity} is above "
                f"MAX_LAPLACE_SENSITIVITY = {MAX_LAPLACE_SENSITIVITY} (its PLD enumerates every grid unit)")
    span, what = None, ""
    if isinstance(spec, DiscreteGaussianSpec):
        reach = math.ceil(11.6 * spec.sigma) if math.isfinite(spec.sigma) else math.inf
        if not 2.0 * reach + 2.0 <= MAX_DISCRETE_GAUSSIAN_SUPPORT:
            return (f"a discrete Gaussian leaf of sigma {spec.sigma:g} grid units enumerates {2.0 * reach + 2.0:.4g} "
                    f"outputs, above MAX_DISCRETE_GAUSSIAN_SUPPORT = {MAX_DISCRETE_GAUSSIAN_SUPPORT}")
        if spec.sensitivity > reach:
            # beyond T the two truncated laws barely overlap: nearly all the mass is at an infinite loss, which broke
            # the composition (an IndexError at a session's close for ε ≥ 280 at δ = 1e-6); beyond 2T dp_accounting
            # raises a ValueError. Δ > T = 11.6σ means a per-release ε above 67: the other accountants take it
            return (f"a discrete Gaussian leaf of sensitivity {spec.sensitivity:g} beyond its truncation bound {reach} "
                    "(dp_accounting's PLD truncates the noise at 11.6 sigma)")
        span, what = spec.sensitivity * (2.0 * reach + spec.sensitivity) / spec.sigma**2, "discrete Gaussian"
    elif isinstance(spec, PureSpec) and spec.laplace_parameter is not None:
        span, what = 2.0 * spec.laplace_parameter * spec.laplace_sensitivity, "discrete Laplace"
    elif isinstance(spec, PoissonGaussianSpec):
        span = max(_connect_dots_span(spec, adjacency) for adjacency in ("ADD", "REMOVE"))
        if not span / interval + 3.0 <= MAX_CONNECT_DOTS_POINTS:
            return (f"a subsampled Gaussian leaf (q = {spec.sample_rate:g}, sigma = {spec.noise_multiplier:g}) needs "
                    f"{span / interval + 3.0:.4g} connect-the-dots points, above MAX_CONNECT_DOTS_POINTS = "
                    f"{MAX_CONNECT_DOTS_POINTS}")
    if span is not None and not span / interval + 3.0 <= MAX_LOSS_POINTS:
        return (f"a {what} leaf spans {span / interval + 3.0:.4g} loss grid points, above "
                f"MAX_LOSS_POINTS = {MAX_LOSS_POINTS}")
    return None


@functools.lru_cache(maxsize=1024)
def _connect_dots_span(spec: PoissonGaussianSpec, adjacency: str) -> float:
    """The width of the loss range dp_accounting's connect-the-dots builder covers for one direction of ``spec``
    (its own tail bounds, computed without building anything: about a millisecond, hence the cache, since the budget
    filter asks at every admission); inf where it cannot say."""
    try:
        bounds = privacy_loss_mechanism.GaussianPrivacyLoss(
            spec.noise_multiplier, sensitivity=1, sampling_prob=spec.sample_rate,
            adjacency_type=getattr(privacy_loss_mechanism.AdjacencyType, adjacency)).connect_dots_bounds()
        return float(bounds.epsilon_upper) - float(bounds.epsilon_lower)
    except (ValueError, OverflowError, ZeroDivisionError, TypeError):
        return math.inf


def unsupported_reason(counts: dict[LeafSpec, int], pessimistic: bool = True, sized: bool = True) -> str | None:
    """Why the PLD cannot bound this tally (None if it can); the optimistic estimate needs exact leaf PLDs. With
    ``sized`` False the leaves' sizes on the accountant's grids are not checked (:func:`leaf_size_reason`: a caller
    that builds on another grid sizes them there)."""
    for spec in counts:
        if isinstance(spec, RepeatSelectSpec):
            return "repeat-and-select has no PLD here (Papernot & Steinke's bounds are RDP; use rdp)"
        if isinstance(spec, DiscreteGaussianSpec) and (spec.dimension != 1 or not spec.sensitivity.is_integer()):
            return "the discrete Gaussian PLD covers one-dimensional releases only"
        if isinstance(spec, PureSpec) and spec.laplace_parameter is None and not pessimistic:
            return "a generic pure-DP leaf has no exact PLD, so no optimistic (lower) estimate"
        if (isinstance(spec, ApproximateSpec) or (isinstance(spec, PureSpec) and spec.laplace_parameter is None)) \
                and not spec.epsilon <= MAX_GENERIC_EPSILON:
            return (f"a generic leaf of epsilon {spec.epsilon:g} is above MAX_GENERIC_EPSILON = "
                    f"{MAX_GENERIC_EPSILON:g} (dp_accounting's PLD computes exp(epsilon))")
        if isinstance(spec, ApproximateSpec) and not pessimistic:
            return "a generic (epsilon, delta) leaf has no exact PLD, so no optimistic (lower) estimate"
        if not isinstance(spec, (PureSpec, DiscreteGaussianSpec, ApproximateSpec, PoissonGaussianSpec)):
            return f"{type(spec).__name__}: dp_accounting has no PLD for sampling without replacement"
        size = leaf_size_reason(spec) if sized else None
        if size is not None:
            return size
    return None


@functools.lru_cache(maxsize=4096)
def leaf_pld(spec: LeafSpec, pessimistic: bool, interval: float) -> pld_lib.PrivacyLossDistribution:
    """The PLD of one application of ``spec`` (see the module docstring for the constructor used)."""
    if isinstance(spec, PoissonGaussianSpec):
        return pld_lib.from_gaussian_mechanism(
            spec.noise_multiplier, sensitivity=1, pessimistic_estimate=pessimistic,
            value_discretization_interval=interval, sampling_prob=spec.sample_rate, use_connect_dots=pessimistic,
            neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        )
    if isinstance(spec, DiscreteGaussianSpec):
        return pld_lib.from_discrete_gaussian_mechanism(
            spec.sigma, sensitivity=int(spec.sensitivity), pessimistic_estimate=pessimistic,
            value_discretization_interval=interval,
        )
    if isinstance(spec, PureSpec) and spec.laplace_parameter is not None:
        return pld_lib.from_discrete_laplace_mechanism(
            spec.laplace_parameter, sensitivity=spec.laplace_sensitivity, pessimistic_estimate=pessimistic,
            value_discretization_interval=interval,
        )
    delta = spec.delta if isinstance(spec, ApproximateSpec) else 0.0
    return pld_lib.from_privacy_parameters(
        dp_accounting.pld.common.DifferentialPrivacyParameters(spec.epsilon, delta), interval
    )


@functools.lru_cache(maxsize=256)
def self_composed(spec: LeafSpec, count: int, pessimistic: bool, interval: float) -> pld_lib.PrivacyLossDistribution:
    """``count``-fold composition of :func:`leaf_pld` (dp_accounting's FFT self-composition)."""
    single = leaf_pld(spec, pessimistic, interval)
    return single if count == 1 else single.self_compose(count)


def fold(start: pld_lib.PrivacyLossDistribution | None, items: list[tuple[LeafSpec, int]], pessimistic: bool,
         interval: float) -> pld_lib.PrivacyLossDistribution:
    """Left fold of the self-composed PLDs of ``items`` onto ``start``."""
    out = start
    for spec, count in items:
        part = self_composed(spec, count, pessimistic, interval)
        out = part if out is None else out.compose(part)
    if out is None:
        raise AccountingError("pld: nothing to compose")
    return out


def _prefix_within(probs: np.ndarray, threshold: float) -> int:
    """The longest prefix of ``probs`` whose running sum stays ≤ ``threshold`` (dp_accounting's
    ``_find_prefix_to_truncate``: the same sequential sums, by ``np.cumsum`` instead of a Python loop)."""
    for window in (probs[:FIRST_LOSSES], probs):  # the cut is usually short: the head's running sums come first
        over = np.cumsum(window) > threshold
        if over.any():
            return int(np.argmax(over))
    return len(probs)


class _Spectra:
    """The real FFTs of recent compositions' second operands, by (PMF, FFT length): a fold composes the same leaf or
    the same binary digit of a run again and again, so its transform is computed once per length. An entry holds
    its PMF, so the id in its key is never reused while it is kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[int, int], tuple[object, np.ndarray]] = OrderedDict()

    def of(self, pmf, probs: np.ndarray, length: int) -> np.ndarray:
        """``rfft(probs, length)``, where ``probs`` are ``pmf``'s dense probabilities."""
        key = (id(pmf), length)
        with self._lock:
            entry = self._kept.get(key)
            if entry is not None and entry[0] is pmf:
                self._kept.move_to_end(key)
                return entry[1]
        spectrum = sp_fft.rfft(probs, length)
        with self._lock:
            self._kept[key] = (pmf, spectrum)
            while len(self._kept) > SPECTRA_KEPT:
                self._kept.popitem(last=False)
        return spectrum


_SPECTRA = _Spectra()


def _convolve(first: np.ndarray, second: np.ndarray, second_pmf) -> np.ndarray:
    """``scipy.signal.fftconvolve(first, second)`` by the same transforms (a real FFT of the 5-smooth length at least
    the full output's, the product, the inverse, cut to the full output), the second operand's transform cached."""
    size = len(first) + len(second) - 1
    if min(len(first), len(second)) == 1:  # fftconvolve multiplies without a transform
        return signal.fftconvolve(first, second)
    length = sp_fft.next_fast_len(size, True)
    return sp_fft.irfft(sp_fft.rfft(first, length) * _SPECTRA.of(second_pmf, second, length), length)[:size]


def _compose_pmfs(first, second):
    """dp_accounting's ``compose_pmfs`` with pessimistic tail truncation (:data:`TAIL_MASS_TRUNCATION`), vectorised.

    Small sparse PMFs are composed by dp_accounting itself; dense ones by the FFT convolution of
    ``DensePLDPmf.compose`` (:func:`_convolve`: the same transforms), then the longest prefix and suffix of mass ≤
    half the truncation each are cut: the prefix's mass is added to the first loss kept (losses only rounded up) and
    the suffix's to the infinite loss.
    """
    if isinstance(first, pld_pmf.SparsePLDPmf) and isinstance(second, pld_pmf.SparsePLDPmf) \
            and first.size * second.size <= pld_pmf._MAX_PMF_SPARSE_SIZE:
        return first.compose(second, TAIL_MASS_TRUNCATION)
    original = second
    first, second = first.to_dense_pmf(), second.to_dense_pmf()
    first.validate_composable(second)
    probs = _convolve(first._probs, second._probs, original)
    left = _prefix_within(probs, TAIL_MASS_TRUNCATION / 2)
    right = max(len(probs) - _prefix_within(probs[::-1], TAIL_MASS_TRUNCATION / 2), left + 1)
    left_mass, right_mass = np.sum(probs[:left]), np.sum(probs[right:])
    kept = probs[left:right]
    kept[0] += left_mass
    infinity = first._infinity_mass + second._infinity_mass - first._infinity_mass * second._infinity_mass
    return pld_pmf.DensePLDPmf(first._discretization, first._lower_loss + second._lower_loss + left, kept,
                               infinity + right_mass, True)


def compose(first: pld_lib.PrivacyLossDistribution,
            second: pld_lib.PrivacyLossDistribution) -> pld_lib.PrivacyLossDistribution:
    """``first.compose(second)`` of dp_accounting (remove and add PMFs composed separately unless both PLDs are
    symmetric), through :func:`_compose_pmfs`."""
    remove = _compose_pmfs(first._pmf_remove, second._pmf_remove)
    if first._symmetric and second._symmetric:
        return pld_lib.PrivacyLossDistribution(remove)
    return pld_lib.PrivacyLossDistribution(remove, _compose_pmfs(first._pmf_add, second._pmf_add))


#: One run: the tally of a part of a composition, as (spec, count) pairs, and how many consecutive parts have it.
Run = tuple[tuple[tuple[LeafSpec, int], ...], int]


@functools.lru_cache(maxsize=128)
def run_pld(run: Run, interval: float = VALUE_DISCRETIZATION_INTERVAL) -> pld_lib.PrivacyLossDistribution:
    """The pessimistic PLD of one run on the grid ``interval``: its tally's specs, each self-composed count × length
    times, folded in order (cached: the same binary digit of a growing run recurs, :class:`Fold`)."""
    items, length = run
    return fold(None, [(spec, count * length) for spec, count in items], True, interval)


def digits(length: int) -> tuple[int, ...]:
    """The powers of two that sum to ``length`` (its binary digits), largest first (fold ``pld/3``)."""
    return tuple(1 << j for j in range(length.bit_length() - 1, -1, -1) if length >> j & 1)


def whole(length: int) -> tuple[int, ...]:
    """``length`` as one part: a run is one self-composition (fold ``pld/2``)."""
    return (length,)


@dataclass(frozen=True)
class FoldScheme:
    """A version of the canonical fold (module docstring, "Composition order").

    Attributes:
        version: the version its accountant records (``"pld/4"``).
        description: how runs enter the fold, in the accountant's version string.
        split: the lengths, in order, of the self-compositions a run of a given length enters the fold as.
        intervals: the discretisation grids the fold is computed on; ε is the smallest of their readings, and the
            last grid's reading alone is the budget filter's admission bound when there are several (module
            docstring, "Two grids").
    """

    version: str
    description: str
    split: Callable[[int], tuple[int, ...]]
    intervals: tuple[float, ...] = (VALUE_DISCRETIZATION_INTERVAL,)


#: Every fold a certificate may have been closed under, by version; the last is the current one.
FOLDS = {scheme.version: scheme for scheme in (
    FoldScheme("pld/2", "run fold", whole),
    FoldScheme("pld/3", "run fold by binary digits", digits),
    FoldScheme("pld/4", "run fold by binary digits", digits, (VALUE_DISCRETIZATION_INTERVAL, ADMISSION_INTERVAL)),
)}
CURRENT_FOLD = "pld/4"


def recorded_fold(accountant_version: object) -> str:
    """The fold version a certificate's ``accountant_version`` names (the PLD accountant's own, or the PLD member's
    inside the tightest's); the current one when it names none (or is None).

    Raises:
        AccountingError: it is not a string, or names a version this code has no fold for, or two versions.
    """
    if accountant_version is not None and not isinstance(accountant_version, str):
        raise AccountingError(f"the certificate's accountant version is not a string: {accountant_version!r}")
    named = set(re.findall(r"(?<![\w/-])pld/\d+\b", accountant_version or ""))
    if len(named) > 1:
        raise AccountingError(f"accountant version names several pld versions: {', '.join(sorted(named))}")
    version = named.pop() if named else CURRENT_FOLD
    if version not in FOLDS:
        raise AccountingError(f"the certificate's accountant version is {version}, which this verifier cannot "
                              f"recompute (known pld folds: {', '.join(FOLDS)})")
    return version


def parts(event: PrivacyEvent) -> tuple[PrivacyEvent, ...]:
    """What the canonical fold runs over: a composed event's events in order, any other event alone."""
    return event.events if isinstance(event, ComposedEvent) else (event,)


class Fold:
    """The canonical fold of the first ``length`` parts of a composition (module docstring, "Composition order").

    Its PLD is ``before`` (the PLD of every run but the last; None when there is none) composed, one after the
    other, with the last run's tally self-composed d times for each d in ``split`` of the run's length (:func:`digits`
    for ``pld/3``: its binary digits, largest first; :func:`whole` for ``pld/2``; :func:`run_pld`). It keeps the PLDs
    after each of those (``partials``, as far as computed): the fold one part longer in the same run shares those of
    the common prefix of the two splits (with digits: every one above the new length's lowest digit), so it costs
    one composition (and a cached self-composition), and a fold from scratch costs one composition per binary digit
    of each run, not one per part. Its own PLD is composed only when asked for (:meth:`pld`). Every PLD it hands out is
    composed by the same operations whichever way the fold was reached.
    """

    def __init__(self, length: int, before: pld_lib.PrivacyLossDistribution | None, run: Run,
                 partials: tuple[pld_lib.PrivacyLossDistribution, ...] = (),
                 split: Callable[[int], tuple[int, ...]] = digits,
                 interval: float = VALUE_DISCRETIZATION_INTERVAL) -> None:
        self.length = length
        self.before = before
        self.run = run
        self._partials = partials
        self.split = split
        self.interval = interval

    def pld(self) -> pld_lib.PrivacyLossDistribution:
        """The PLD of the parts folded (composed on first use; two threads asking at once compute the same)."""
        items, length = self.run
        partials = list(self._partials)
        for power in self.split(length)[len(partials):]:
            part = run_pld((items, power), self.interval)
            previous = partials[-1] if partials else self.before
            partials.append(part if previous is None else compose(previous, part))
        self._partials = tuple(partials)
        return partials[-1]

    def extended(self, items: tuple[tuple[LeafSpec, int], ...], count: int = 1) -> Fold:
        """The fold with ``count`` more parts, each with the tally ``items``: the fold ``extended(items)`` called
        ``count`` times reaches, by one step (a run of equal parts costs bookkeeping once, not once per part).

        A partial depends only on ``before``, the tally and the prefix of the split up to it, so the fold keeps those
        whose prefix the old and the new run length share; the ones it drops are recomposed by the same operations.
        """
        if count < 1:
            raise AccountingError(f"pld: a fold is extended by at least one part, not {count}")
        if items != self.run[0]:
            first = Fold(self.length + 1, self.pld(), (items, 1), split=self.split, interval=self.interval)
            return first if count == 1 else first.extended(items, count - 1)
        length = self.run[1] + count
        longer, shorter = self.split(length), self.split(self.run[1])
        shared = next((i for i, (a, b) in enumerate(zip(longer, shorter, strict=False)) if a != b),
                      min(len(longer), len(shorter)))
        return Fold(self.length + count, self.before, (items, length), self._partials[:shared], self.split,
                    self.interval)


def start_fold(items: tuple[tuple[LeafSpec, int], ...], split: Callable[[int], tuple[int, ...]] = digits,
               interval: float = VALUE_DISCRETIZATION_INTERVAL) -> Fold:
    """The fold of a first part whose tally is ``items``, runs entering it as ``split`` says, on the grid
    ``interval``."""
    return Fold(1, None, (items, 1), split=split, interval=interval)


class FoldCache:
    """An accountant's last fold and the fold it resumed from, so that a growing composition (the budget filter)
    composes only what was appended: the next candidate extends the last fold once that was committed, or the fold
    before it when the last candidate was refused.

    The entries (the parts and their folds) are read and replaced under a lock; threads folding different
    compositions only replace each other's entries (costing speed, never correctness: a fold's PLD does not depend
    on where it resumed).
    """

    def __init__(self, split: Callable[[int], tuple[int, ...]] = digits,
                 interval: float = VALUE_DISCRETIZATION_INTERVAL) -> None:
        self._lock = threading.Lock()
        self._entries: tuple[tuple[tuple[PrivacyEvent, ...], Fold], ...] = ()
        self._split = split
        self._interval = interval

    def fold(self, events: tuple[PrivacyEvent, ...]) -> Fold:
        """The fold of ``events``, resuming from the longest cached fold whose parts are a prefix of ``events``.

        A stretch of consecutive parts that are one object (a ledger's equal charges decode to one, so verify's
        49 999 equal charges are one stretch) is tallied once and entered by one :meth:`Fold.extended`: the
        bookkeeping costs one step per stretch, not per part, and the PLD is the part-by-part fold's, bit for bit.

        Raises:
            AccountingError: nothing to compose.
        """
        with self._lock:
            entries = self._entries
        resumed = None
        for cached, last in entries:
            if last.length <= len(events) and (resumed is None or last.length > resumed[1].length) \
                    and events[: last.length] == cached[: last.length]:
                resumed = (cached, last)
        state = None if resumed is None else resumed[1]
        if state is not None and state.length == len(events):  # asked again (admission bound, then ε): entries stand
            return state
        index = 0 if state is None else state.length
        while index < len(events):  # by stretches of one event object (a ledger's equal charges decode to one)
            event, end = events[index], index + 1
            while end < len(events) and events[end] is event:
                end += 1
            items = tuple(event_counts(event).items())
            if state is None:
                state = start_fold(items, self._split, self._interval)
                index += 1
            if end > index:
                state = state.extended(items, end - index)
            index = end
        if state is None:
            raise AccountingError("pld: nothing to compose")
        kept = ((events, state),) + ((resumed,) if resumed is not None and resumed[1] is not state else ())
        with self._lock:
            self._entries = kept
        return state


#: The hockey-stick search first looks at this many of the largest losses, then four times as many, and so on.
FIRST_LOSSES = 4096


class _Tails:
    """One PMF seen from its largest loss down: ℓ_0 > ℓ_1 > … and the masses above each, U_k = P_∞ + Σ_{j<k} p_j and
    L_k = Σ_{j<k} e^{−ℓ_j} p_j (k = 0 … n), computed for a prefix of the losses at a time (:data:`FIRST_LOSSES`).

    A prefix's running sums are those of the whole array (``np.cumsum`` adds in order), so the answer does not depend
    on how far the search had to look.
    """

    def __init__(self, pmf) -> None:
        dense = pmf.to_dense_pmf()
        self._probs = np.asarray(dense._probs, dtype=float)[::-1]
        self._top = dense._lower_loss + len(self._probs) - 1
        self._step = dense._discretization
        self._infinity = float(dense._infinity_mass)
        self._prefix: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _masses(self, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ℓ_0 … ℓ_{m−1}, U_0 … U_m, L_0 … L_m)."""
        if self._prefix is None or len(self._prefix[0]) < m:
            probs = self._probs[:m]
            losses = (self._top - np.arange(len(probs))) * self._step
            upper = np.cumsum(np.concatenate(([self._infinity], probs)))
            lower = np.cumsum(np.concatenate(([0.0], np.exp(-losses) * probs)))
            self._prefix = (losses, upper, lower)
        losses, upper, lower = self._prefix
        return losses[:m], upper[: m + 1], lower[: m + 1]

    def epsilon(self, delta: float) -> float:
        """The smallest ε ≥ 0 with δ(ε) = Σ_{ℓ_j > ε} p_j (1 − e^{ε−ℓ_j}) + P_∞ ≤ δ (inf when P_∞ > δ).

        dp_accounting's ``_get_epsilon_for_delta``, vectorised: walking down the losses, it stops before adding ℓ_k
        when the solution of U_k − e^ε L_k = δ lies at or above ℓ_k (check C_k), or after adding it when the masses
        reach δ with L still 0 (check Z_k: losses so large that e^{−ℓ} underflows; the answer is ℓ_k).
        """
        if self._infinity > delta:
            return math.inf
        n = len(self._probs)
        # a second reading (at a smaller δ: a larger ε, found no deeper) starts from the window the first reached
        m = min(n, max(FIRST_LOSSES, 0 if self._prefix is None else len(self._prefix[0])))
        while True:
            losses, upper, lower = self._masses(m)
            with np.errstate(divide="ignore", invalid="ignore"):
                solution = np.log((upper - delta) / lower)
            stop = (upper[:-1] > delta) & (lower[:-1] > 0) & (solution[:-1] >= losses)
            underflow = (upper[1:] >= delta) & (lower[1:] == 0)
            k_stop = int(np.argmax(stop)) if stop.any() else m
            k_under = int(np.argmax(underflow)) if underflow.any() else m
            if k_under < k_stop:
                return max(0.0, float(losses[k_under]))
            if k_stop < m or m == n:
                break
            m = min(n, 4 * m)
        if upper[k_stop] <= lower[k_stop] + delta:
            return 0.0
        return float(solution[k_stop])


@dataclass(frozen=True)
class HockeyStick:
    """ε(δ) of a PLD: the larger over its remove and add PMFs (one PMF when the PLD is symmetric)."""

    tails: tuple[_Tails, ...]

    @classmethod
    def of(cls, pld: pld_lib.PrivacyLossDistribution) -> HockeyStick:
        pmfs = {id(pmf): pmf for pmf in (pld._pmf_remove, pld._pmf_add) if pmf is not None}
        return cls(tuple(_Tails(pmf) for pmf in pmfs.values()))

    def epsilon(self, delta: float) -> float:
        """The smallest ε ≥ 0 at which both hockey-stick divergences are at most δ."""
        return max(t.epsilon(delta) for t in self.tails)


def fft_noise(pld: pld_lib.PrivacyLossDistribution, applications: int, epsilon: float) -> float:
    """Estimated absolute floating-point error of δ(ε) computed from a composed PLD (module docstring, "Regime").

    The larger, over the add and remove PMFs, of (a) :data:`NEGATIVE_MASS_FACTOR` times the negative mass in the
    PMF (pure rounding noise: a probability cannot be negative, so its size measures the noise floor directly; the
    factor covers the positive noise it cannot see) and (b) the a-priori estimate (k − 1)·u·log₂N·max(p)·√N_ε: the
    FFT of a k-fold composition carries relative error about (k − 1)·u·log₂N (the transform's error raised to the
    k-th power; a single leaf is built without FFT), i.e. about that
    times max(p) per entry, of either sign, over the N_ε entries above ε that δ(ε) adds up. A sparse PMF (pure-DP
    leaves composed by dictionary) has no FFT and contributes 0.

    Raises:
        OutsideControlledRegime: this dp_accounting version does not expose the PMFs, so the error is unknown.
    """
    remove, add = getattr(pld, "_pmf_remove", None), getattr(pld, "_pmf_add", None)
    if remove is None or add is None:
        raise OutsideControlledRegime("pld outside its controlled regime: this dp_accounting version does not "
                                      "expose its PMFs, so the FFT rounding error cannot be checked")
    noise = 0.0
    for pmf in {id(remove): remove, id(add): add}.values():
        probs = getattr(pmf, "_probs", None)
        if probs is None:
            continue
        losses = (pmf._lower_loss + np.arange(len(probs))) * pmf._discretization
        above = int(np.count_nonzero(losses > epsilon))
        observed = NEGATIVE_MASS_FACTOR * float(-np.sum(probs[probs < 0]))
        a_priori = ((applications - 1) * np.finfo(float).eps * math.log2(max(len(probs), 2)) * float(np.max(probs))
                    * math.sqrt(above))
        noise = max(noise, observed, a_priori)
    return noise


def epsilon_from_pld(pld: pld_lib.PrivacyLossDistribution, counts: dict[LeafSpec, int], delta: float) -> float:
    """ε at δ, with parts of δ reserved for the discrete Gaussian's truncated tails and the FFT rounding error.

    ε is first read at δ_t (δ less the truncation share, module docstring); then, with r = :data:`NOISE_RESERVE`
    times the estimated rounding error of δ(ε) (:func:`fft_noise`), it is read again at δ_t − r, so that an error
    up to r in the computed δ(·) cannot bring ε below the truth. When r exceeds :data:`FFT_NOISE_SHARE`·δ the
    rounding error is not small against δ and the PLD refuses to answer (module docstring, "Regime").

    Raises:
        OutsideControlledRegime: r > :data:`FFT_NOISE_SHARE`·δ.
        DeltaUnreachable: the discrete Gaussian truncation does not fit in δ.
    """
    tail = DISCRETE_GAUSSIAN_TAIL * sum(k for s, k in counts.items() if isinstance(s, DiscreteGaussianSpec))
    target = delta * (1.0 - TRUNCATION_DELTA_SHARE) if tail else delta
    profile = HockeyStick.of(pld)
    eps = profile.epsilon(target)
    if math.isfinite(eps):
        reserve = NOISE_RESERVE * fft_noise(pld, sum(counts.values()), eps)
        if not reserve <= FFT_NOISE_SHARE * delta:
            raise OutsideControlledRegime(
                f"pld outside its controlled regime: FFT rounding error in delta about {reserve / NOISE_RESERVE:.2g}, "
                f"not small against delta = {delta:.3g} (limit {FFT_NOISE_SHARE / NOISE_RESERVE:g} * delta)")
        if reserve > 0:
            eps = profile.epsilon(target - reserve)
    if tail and not tail * (1.0 + math.exp(min(eps, 700.0))) <= TRUNCATION_DELTA_SHARE * delta:
        raise DeltaUnreachable(f"pld: the discrete Gaussian truncation ({tail:g}) does not fit in delta = {delta!r}")
    return eps


def smallest_reading(readings: Sequence[Callable[[], float]]) -> float:
    """The smallest ε of ``readings`` (one per grid, module docstring "Two grids"), each a sound upper bound; a grid
    that refuses (:class:`~dpaudit.accounting.base.OutsideControlledRegime`,
    :class:`~dpaudit.accounting.base.DeltaUnreachable`) is left out, and only when every grid refuses is the first
    grid's refusal raised.

    Raises:
        AccountingError: a grid's reading is NaN (failed numerics are never hidden behind another grid's answer).
    """
    answers, refusals = [], []
    for read in readings:
        try:
            answers.append(read())
        except (OutsideControlledRegime, DeltaUnreachable) as exc:
            refusals.append(exc)
    if any(math.isnan(eps) for eps in answers):
        raise AccountingError("pld accountant produced NaN on one of its grids")
    if not answers:
        raise refusals[0]
    return min(answers)


class PldAccountant(Accountant):
    """dp_accounting PLD, pessimistic estimate, on the interval(s) of fold version ``fold_version`` (a key of
    :data:`FOLDS`; the current one unless recomputing an older certificate), composed in the canonical order (module
    docstring, "Composition order"): ``pld/4`` takes the smaller of the readings on
    :data:`VALUE_DISCRETIZATION_INTERVAL` and :data:`ADMISSION_INTERVAL`, and offers the latter alone as the budget
    filter's admission bound (:meth:`admission_bound`).

    Raises:
        AccountingError: an unknown fold version.
    """

    name = "pld"

    def __init__(self, fold_version: str = CURRENT_FOLD) -> None:
        self._scheme = FOLDS.get(fold_version)
        if self._scheme is None:
            raise AccountingError(f"unknown pld fold version {fold_version!r} (known: {', '.join(FOLDS)})")
        self._folds = tuple(FoldCache(self._scheme.split, interval) for interval in self._scheme.intervals)

    def version(self) -> str:
        intervals = self._scheme.intervals
        grids = f"interval {intervals[0]:g}" if len(intervals) == 1 else \
            f"intervals {' and '.join(f'{i:g}' for i in intervals)}, the smaller epsilon"
        return f"{self._scheme.version} ({grids}, pessimistic, {self._scheme.description}; " \
               f"{package_versions('dp-accounting')})"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        return unsupported_reason(counts)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        run = (tuple(counts.items()), 1)
        return smallest_reading([functools.partial(epsilon_from_pld, run_pld(run, i), counts, delta)
                                 for i in self._scheme.intervals])

    def _epsilon_for_event(self, event: PrivacyEvent, counts: dict[LeafSpec, int], delta: float) -> float:
        return smallest_reading([functools.partial(fold_epsilon, folds, event, counts, delta) for folds in self._folds])

    def admission_bound(self, event: PrivacyEvent, delta: float) -> tuple[float, str] | None:
        """The reading on the coarse grid alone (fold ``pld/4``; module docstring, "Two grids"): at least
        :meth:`epsilon`, which is the smaller of it and the fine grid's, bit for bit; None when the fold has one
        grid, or the coarse grid refuses or has no finite ε here.

        Raises:
            UnsupportedEvent: the PLD does not model the event.
        """
        if len(self._folds) == 1:
            return None
        delta = check_delta(delta)
        _, counts = tally(event)
        reason = self._unsupported_reason(counts)
        if reason is not None:
            raise UnsupportedEvent(f"{self.name} accountant: {reason}")
        try:
            eps = fold_epsilon(self._folds[-1], event, counts, delta)
        except (OutsideControlledRegime, DeltaUnreachable):
            return None
        return (eps, self.name) if 0.0 <= eps < math.inf else None

    def composed(self, counts: dict[LeafSpec, int]) -> pld_lib.PrivacyLossDistribution:
        """The pessimistic PLD of a tally on the fine grid: one run of length 1 (the PLD of any single event with
        this tally)."""
        return run_pld((tuple(counts.items()), 1))


def fold_epsilon(folds: FoldCache, event: PrivacyEvent, counts: dict[LeafSpec, int], delta: float) -> float:
    """ε at δ of the canonical fold of ``event`` on ``folds``' grid."""
    return epsilon_from_pld(folds.fold(parts(event)).pld(), counts, delta)
