"""The independent lower bound (tilted hockey-stick) and the PLD regime it exposed.

Extreme regime (reproduced by the sweep in docs/accounting.md, "Regime"): Poisson-subsampled Gaussian, q = 0.05,
σ = 0.311, 1000 steps, δ = 2.507e-12. dp_accounting's pessimistic PLD (as the PLD accountant composed it before the
regime check) certifies 332.8848, below the lower bound 332.9449 that this module proves; the PLD accountant now
refuses there and the tightest accountant falls back to RDP and says so.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.accounting import get_accountant, hockey_stick, recheck
from dpaudit.accounting.base import OutsideControlledRegime
from dpaudit.accounting.charges import ApproximateSpec, PoissonGaussianSpec, PureSpec
from dpaudit.accounting.hockey_stick import (
    MAX_LEAF_POINTS,
    discrete_laplace_pmf,
    epsilon_lower_bound,
    lattice_of,
    randomized_response_pmf,
    subsampled_gaussian_pmf,
)
from dpaudit.accounting.pld import PldAccountant
from dpaudit.errors import AccountingError, InvalidParameter
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.sensitivity import from_formula

EXTREME = PoissonGaussianSpec(0.05, 0.311)
EXTREME_STEPS = 1000
EXTREME_DELTA = 2.507e-12


def _extreme_event() -> PoissonSubsampledGaussianEvent:
    return PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=EXTREME.sample_rate, noise_multiplier=EXTREME.noise_multiplier, steps=EXTREME_STEPS)


@pytest.fixture(scope="module")
def extreme_lower() -> float:
    return epsilon_lower_bound({EXTREME: EXTREME_STEPS}, EXTREME_DELTA, interval=2e-4, tilt=0.19).epsilon


def test_pld_fft_falls_below_the_lower_bound_in_the_extreme_regime(extreme_lower):
    """The failure itself: dp_accounting's composed PLD read at δ (what the accountant returned) is below the truth."""
    raw = float(PldAccountant().composed({EXTREME: EXTREME_STEPS}).get_epsilon_for_delta(EXTREME_DELTA))
    assert raw < extreme_lower


def test_pld_refuses_outside_its_controlled_regime():
    with pytest.raises(OutsideControlledRegime, match="outside its controlled regime"):
        PldAccountant().epsilon(_extreme_event(), EXTREME_DELTA)


def test_tightest_falls_back_to_rdp_above_the_lower_bound_and_says_so(extreme_lower):
    eps, source = get_accountant("tightest").epsilon_with_source(_extreme_event(), EXTREME_DELTA)
    assert eps >= extreme_lower
    assert source.startswith("rdp (pld outside its controlled regime: FFT rounding error")
    # the verifier recomputes the annotated claim, shows the note, and refuses a PLD claim in this regime
    result = recheck(source, _extreme_event(), EXTREME_DELTA, eps)
    assert result.ok and result.method == "rdp" and "pld outside its controlled regime" in result.reason
    with pytest.raises(OutsideControlledRegime):
        recheck("pld", _extreme_event(), EXTREME_DELTA, extreme_lower)


def test_ordinary_regime_is_unchanged():
    """MNIST tutorial setting at δ = 1e-5: the PLD answers (ε read at δ less 10 x its rounding-error estimate)."""
    eps, source = get_accountant("tightest").epsilon_with_source(
        PoissonSubsampledGaussianEvent(
            neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
            sample_rate=256 / 60000, noise_multiplier=1.1, steps=14040), 1e-5)
    assert source == "pld" and eps == pytest.approx(2.37991, abs=1e-5)


def test_lower_bound_is_below_and_close_to_the_pld_in_the_ordinary_regime():
    counts = {PoissonGaussianSpec(0.02, 1.0): 400}
    lower = epsilon_lower_bound(counts, 1e-5)
    upper = PldAccountant().epsilon_of_tally(counts, 1e-5)
    assert upper - 400 * lower.interval <= lower.epsilon <= upper


def test_randomized_response_composition_matches_the_exact_formula():
    """k-fold (ε, δ₀) randomized response: δ(ε') = 1 − (1 − δ₀)^k + (1 − δ₀)^k Σ_i C(k, i) p^{k−i}(1 − p)^i
    (1 − e^{ε' − (k − 2i)ε})₊ with p = e^ε/(1 + e^ε) (Kairouz, Oh & Viswanath 2015); the lower bound is at most the
    exact ε and within the grid's rounding (k·h) of it."""
    eps0, delta0, k, delta = 0.5, 1e-7, 20, 1e-4
    p = math.exp(eps0) / (1 + math.exp(eps0))
    i = np.arange(k + 1)
    weights = stats.binom.pmf(k - i, k, p)

    def exact_delta(e: float) -> float:
        return 1 - (1 - delta0) ** k + (1 - delta0) ** k * float(
            np.sum(weights * np.maximum(0.0, -np.expm1(e - (k - 2 * i) * eps0))))

    lo, hi = 0.0, k * eps0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if exact_delta(mid) > delta else (lo, mid)
    lower = epsilon_lower_bound({ApproximateSpec(eps0, delta0): k}, delta, interval=1e-4)
    assert hi - k * 1e-4 - 1e-9 <= lower.epsilon <= hi


def _exact_epsilon(losses: np.ndarray, masses: np.ndarray, delta: float) -> float:
    """sup{ε : Σ p(l)(1 − e^{ε − l})₊ > δ} of a finite loss law, by bisection."""
    lo, hi = 0.0, float(losses.max())
    for _ in range(200):
        mid = (lo + hi) / 2
        above = losses > mid
        lo, hi = (mid, hi) if float(np.sum(masses[above] * -np.expm1(mid - losses[above]))) > delta else (lo, mid)
    return lo


def _discrete_laplace_composed(a: float, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact loss law of k discrete Laplace pairs (scale 1/a, sensitivity Δ): losses a(Δ − 2z) on the lattice
    of spacing 2a, composed by exact direct convolution (the support cut where e^{−a|z|} is below e^{−60})."""
    reach = math.ceil(60 / a)
    z = np.arange(-reach - d, reach + 2 * d)
    p = np.exp(-a * np.abs(z))
    p /= p.sum()
    index = np.abs(z - d) - np.abs(z) + d  # loss a(|z − Δ| − |z|) = a(index − Δ), index in 0..2Δ
    one = np.bincount(index, weights=p, minlength=2 * d + 1)
    law = np.array([1.0])
    for _ in range(k):
        law = np.convolve(law, one)
    return a * (np.arange(len(law)) - k * d), law


@pytest.mark.parametrize(("a", "d", "k"), [(0.25, 4, 5), (0.05, 8, 12), (0.5, 1, 40), (3.0, 1, 1), (2.0, 3, 2)])
def test_the_aligned_discrete_laplace_grid_is_exact_when_cells_reach_the_sensitivity(a, d, k):
    """With cells = Δ (small Δ) the aligned grid holds the exact law: the bound equals the exact ε to the
    bisection; it is at most the exact ε always (also for one application of a large ε at Δ = 1)."""
    delta = 1e-6
    exact = _exact_epsilon(*_discrete_laplace_composed(a, d, k), delta)
    spec = PureSpec(a * d, laplace_parameter=a, laplace_sensitivity=d)
    lattice = lattice_of({spec: k})
    assert lattice is not None and lattice.cells == d
    lower = epsilon_lower_bound({spec: k}, delta)
    assert exact - 1e-7 <= lower.epsilon <= exact + 1e-12


def test_the_aligned_grid_keeps_the_atoms_where_a_float_grid_rounds_them_down():
    """5·10⁴ discrete Laplace releases at ε = 0.01 (Δ = 1,025 grid units, the shape of `benchmarks/bench_verify.py`):
    the aligned bound is within 0.5 % of the PLD's certified ε; the float grid of the same module (``interval`` given)
    loses 2 % there, because 0.01/h falls just below an integer and every application's atom at +ε is rounded down by
    a whole cell (the bound is still valid, only weaker). A float grid in place of the aligned one fails this test."""
    spec = PureSpec(0.01, laplace_parameter=0.01 / 1025, laplace_sensitivity=1025)
    k, delta = 49_999, 1e-6
    upper = PldAccountant().epsilon_of_tally({spec: k}, delta)
    aligned = epsilon_lower_bound({spec: k}, delta)
    assert upper * (1 - 5e-3) <= aligned.epsilon <= upper
    assert epsilon_lower_bound({spec: k}, delta, interval=1e-5).epsilon < upper * (1 - 1e-2)


@pytest.mark.parametrize(("eps0", "k"), [(1.0, 100), (0.1, 1000), (0.003, 20_000)])
def test_the_aligned_bound_stays_below_the_pld_and_near_it(eps0, k):
    spec = PureSpec(eps0, laplace_parameter=eps0 / 1025, laplace_sensitivity=1025)
    upper = PldAccountant().epsilon_of_tally({spec: k}, 1e-6)
    lower = epsilon_lower_bound({spec: k}, 1e-6).epsilon
    assert upper * (1 - 2e-2) <= lower <= upper


@pytest.mark.parametrize("spec", [PureSpec(0.3), ApproximateSpec(0.3, 1e-7)])
def test_randomized_response_on_its_aligned_grid_is_the_exact_formula(spec):
    """k-fold pure ε or (ε, δ₀) randomized response, no ``interval``: the aligned grid (h = ε) has no rounding at
    all; the mass 1 − (1 − δ₀)^k at +∞ counts in full (Kairouz, Oh & Viswanath 2015)."""
    eps0, k, delta = 0.3, 60, 1e-5
    finite = (1 - getattr(spec, "delta", 0.0)) ** k
    i = np.arange(k + 1)
    exact = _exact_epsilon((k - 2 * i) * eps0,
                           finite * stats.binom.pmf(k - i, k, math.exp(eps0) / (1 + math.exp(eps0))),
                           delta - (1 - finite))
    lower = epsilon_lower_bound({spec: k}, delta)
    assert lower.interval == eps0 and exact - 1e-7 <= lower.epsilon <= exact + 1e-12


def test_the_aligned_grid_counts_left_out_leaves_and_an_infinite_mass_above_delta():
    """An exponential-mechanism leaf next to the one discrete Laplace spec is left out (the aligned grid still
    serves the rest, unchanged); an (ε, δ₀) leaf whose composed mass at +∞ exceeds δ has ε = ∞ on the aligned grid."""
    spec = PureSpec(0.5, laplace_parameter=0.5 / 64, laplace_sensitivity=64)
    alone = epsilon_lower_bound({spec: 30}, 1e-6)
    mixed = epsilon_lower_bound({spec: 30, PureSpec(1.0, bounded_range=True): 3}, 1e-6)
    assert (mixed.epsilon, mixed.interval, mixed.tilt) == (alone.epsilon, alone.interval, alone.tilt)
    assert (mixed.modelled, mixed.left_out, alone.left_out) == (30, 3, 0) and alone.interval == 0.5 / 64
    assert epsilon_lower_bound({ApproximateSpec(0.3, 1e-6): 60}, 1e-5).epsilon == math.inf


def test_leaf_laws_are_lower_roundings_of_probability_distributions():
    h = 1e-3
    for pmf, lowest in ((subsampled_gaussian_pmf(0.1, 0.8, h, 1.0, True), math.log(0.9)),
                        (subsampled_gaussian_pmf(0.1, 0.8, h, 1.0, False), -math.inf),
                        (discrete_laplace_pmf(0.01, 100, h), -1.0),
                        (randomized_response_pmf(1.0, 0.01, h), -1.0)):
        total = float(np.sum(np.exp(pmf.log_probs))) + pmf.infinity
        assert total == pytest.approx(1.0, abs=1e-9)
        if math.isfinite(lowest):
            assert pmf.offset * h <= lowest + 1e-12  # the bottom cell rounds the smallest loss down


def test_left_out_leaves_are_counted_and_bad_inputs_refused():
    bounded_range = PureSpec(1.0, bounded_range=True)
    result = epsilon_lower_bound({bounded_range: 3}, 1e-5)
    assert result.epsilon == 0.0 and result.left_out == 3 and result.modelled == 0
    for bad in (0.0, 1.0, -1e-5):
        with pytest.raises(InvalidParameter):
            epsilon_lower_bound({EXTREME: 1}, bad)
    with pytest.raises(InvalidParameter):
        epsilon_lower_bound({EXTREME: 1}, 1e-5, interval=0.0)
    with pytest.raises(InvalidParameter):
        epsilon_lower_bound({EXTREME: 1}, 1e-5, tilt=-1.0)


# --- a leaf whose law needs more than MAX_LEAF_POINTS entries is refused by name, before anything is allocated ------

HUGE = 2**30  # a discrete Laplace on a grid 2³⁰ times finer than its sensitivity: 8 GiB per array before the limit
UNIT = ApproximateSpec(0.3, 1e-7)  # a second spec: the composition is on the float grid
TOO_LARGE = [
    pytest.param({PureSpec(0.5, laplace_parameter=0.5 / HUGE, laplace_sensitivity=HUGE): 3},
                 "sensitivity Delta = 1073741824", id="laplace-aligned-grid"),
    pytest.param({PureSpec(0.5, laplace_parameter=0.5 / HUGE, laplace_sensitivity=HUGE): 3,
                  PureSpec(0.3, laplace_parameter=0.3 / 1025, laplace_sensitivity=1025): 2},
                 "sensitivity Delta = 1073741824", id="laplace-float-grid"),
    pytest.param({PureSpec(1.0, laplace_parameter=1e306, laplace_sensitivity=1000): 2, UNIT: 1},
                 "needs inf points", id="laplace-span-overflows"),
    pytest.param({PoissonGaussianSpec(0.5, 1e-6): 1}, "a subsampled Gaussian", id="subsampled-gaussian-span"),
]
#: Spans that the default grid coarsens to fit (:func:`fitting_interval`); on a grid given explicitly they are refused.
SPANS = [
    pytest.param({PureSpec(1e5, laplace_parameter=1e5 / 1025, laplace_sensitivity=1025): 2, UNIT: 1},
                 "loss a*Delta = 100000", id="laplace-span"),
    pytest.param({ApproximateSpec(1e5, 1e-9): 2, UNIT: 1},
                 "randomized response at epsilon = 100000", id="randomized-response-span"),
]


REFUSED = ([pytest.param(*p.values, None, id=p.id) for p in TOO_LARGE]
           + [pytest.param(*p.values, 1e-3, id=f"{p.id}-on-a-given-grid") for p in SPANS])


@pytest.mark.parametrize(("counts", "named", "interval"), REFUSED)
def test_a_leaf_too_large_for_its_arrays_is_refused_naming_the_limit(counts, named, interval) -> None:
    """Before the limit, the first two built arrays of 2³⁰ entries (MemoryError or gigabytes), the span ones a
    float grid of 2·10⁸ cells, and an overflowing span reached ``math.floor(inf)`` (OverflowError). The spans are
    refused on the grid given (10⁻³); the default grid coarsens for them (next test)."""
    with pytest.raises(AccountingError, match="MAX_LEAF_POINTS") as refused:
        epsilon_lower_bound(counts, 1e-6, interval=interval)
    assert "not computed" in str(refused.value) and named in str(refused.value)


@pytest.mark.parametrize(("counts", "named"), SPANS)
def test_a_span_too_wide_for_the_default_grid_is_bounded_on_a_coarser_one(counts, named) -> None:
    """Two releases of ε = 10⁵ and one (0.3, 10⁻⁷) unit: their span fits MAX_LEAF_POINTS only on a grid of 10⁻²,
    so the default grid is coarsened to that (it refused them before) and the bound is below the basic sum (an upper
    bound on ε) and near it."""
    found = epsilon_lower_bound(counts, 1e-6)
    assert found.coarsened and found.interval == pytest.approx(2e5 / (MAX_LEAF_POINTS - 4))
    assert 2e5 - 3 * found.interval <= found.epsilon <= 2e5 + 0.3


def _randomized_response_pair(epsilons: tuple[float, ...], counts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The exact loss law of independent randomized-response releases (loss ±ε, mass e^ε/(1 + e^ε) on +ε)."""
    losses, masses = np.zeros(1), np.ones(1)
    for eps, k in zip(epsilons, counts, strict=True):
        i = np.arange(k + 1)
        step = stats.binom.pmf(k - i, k, math.exp(eps) / (1 + math.exp(eps)))
        losses = np.add.outer(losses, (k - 2 * i) * eps).ravel()
        masses = np.multiply.outer(masses, step).ravel()
    return losses, masses


def test_a_bound_on_the_coarsened_grid_is_still_below_the_exact_epsilon(monkeypatch) -> None:
    """Randomized response of ε = 2 (three times) and 0.7 (four times), with the leaf limit set to 500 points: the
    default grid 10⁻³ would need 4002 points for the ε = 2 leaf, so it is coarsened to 4/496; every loss is still
    rounded down, so the bound stays at most the exact ε and within the rounding (7 applications × h) of it."""
    counts = {PureSpec(2.0): 3, PureSpec(0.7): 4}
    exact = _exact_epsilon(*_randomized_response_pair((2.0, 0.7), (3, 4)), 1e-3)
    monkeypatch.setattr(hockey_stick, "MAX_LEAF_POINTS", 500)
    found = epsilon_lower_bound(counts, 1e-3)
    assert found.coarsened and found.interval == pytest.approx(4.0 / 496)
    assert exact - 7 * found.interval - 1e-9 <= found.epsilon <= exact


def test_a_count_whose_composed_law_is_too_large_is_refused_naming_the_limit(monkeypatch) -> None:
    """10⁵ randomized-response releases of (1, 10⁻¹²) and one pure release: the composed law on the float grid grows
    by squaring to 2.3·10⁷ points (a MemoryError after 27 s before the limit). With the composed limit set to 10⁴ the
    same refusal comes at a thousand releases, by name, before the step's arrays are allocated."""
    monkeypatch.setattr(hockey_stick, "MAX_COMPOSED_POINTS", 10_000)
    with pytest.raises(AccountingError, match="MAX_COMPOSED_POINTS = 10000") as refused:
        epsilon_lower_bound({ApproximateSpec(1.0, 1e-12): 1000, PureSpec(0.5): 1}, 1e-6)
    assert "not computed" in str(refused.value)
    assert epsilon_lower_bound({ApproximateSpec(1.0, 1e-12): 3, PureSpec(0.5): 1}, 1e-6).epsilon > 3.0


def test_the_limit_refuses_only_what_it_must_and_leaves_computed_bounds_unchanged(monkeypatch) -> None:
    """A mixed discrete Laplace composition (float grid h = 10⁻³, loss aΔ = 0.5): its law needs Δ = 1025 and
    2aΔ/h + 2 = 1002 points. At a limit of 1025 the bound is the one computed at the default limit; at 1024 it is
    refused, never replaced by a weaker one."""
    counts = {PureSpec(0.5, laplace_parameter=0.5 / 1025, laplace_sensitivity=1025): 3, UNIT: 1}
    computed = epsilon_lower_bound(counts, 1e-6)
    assert computed.interval == 1e-3 and computed.epsilon > 1.0
    monkeypatch.setattr(hockey_stick, "MAX_LEAF_POINTS", 1025)
    assert epsilon_lower_bound(counts, 1e-6) == computed
    monkeypatch.setattr(hockey_stick, "MAX_LEAF_POINTS", 1024)
    with pytest.raises(AccountingError, match="Delta = 1025 grid units needs 1025 points"):
        epsilon_lower_bound(counts, 1e-6)
    assert MAX_LEAF_POINTS == 20_000_000


# --- the speed-ups keep the numbers: same convolutions, same bisection, one direction where both are one law -------

def test_fft_convolution_is_scipys_including_squares() -> None:
    from scipy import signal

    from dpaudit.accounting.hockey_stick import _fft_convolve

    rng = np.random.default_rng(7)
    a, b = rng.random(1_000), rng.random(777)
    assert np.array_equal(_fft_convolve(a, b), signal.fftconvolve(a, b))
    assert np.array_equal(_fft_convolve(a, a), signal.fftconvolve(a, a.copy()))  # one transform, same result


def test_a_convolution_step_is_the_copying_one_and_leaves_its_inputs_alone() -> None:
    """Each step works in place on its own result (docs/performance.md, "Verify, third round"): the same numbers as
    subtracting, clipping, trimming and rescaling copies, for the direct sums, the FFT and a squaring, and the
    operands (which ``_power`` squares again) are never written."""
    from dpaudit.accounting.hockey_stick import FFT_ERROR_CONSTANT, _convolve, _fft_convolve, _norm, _Tilted

    def copying(a: _Tilted, b: _Tilted) -> _Tilted:  # the step as first written, with copies
        n = len(a.w) + len(b.w) - 1
        if min(len(a.w), len(b.w)) <= 64:
            out = np.convolve(a.w, b.w)
            bound = 2.0 * n * np.finfo(float).eps * out
        else:
            out = _fft_convolve(a.w, b.w)
            norms = (2.0 * (_norm(a.w) * np.sum(a.w)) if a.w is b.w
                     else _norm(a.w) * np.sum(b.w) + np.sum(a.w) * _norm(b.w))
            bound = FFT_ERROR_CONSTANT * np.finfo(float).eps * math.log2(max(n, 2)) * norms
        out = np.maximum(out - bound, 0.0)
        keep = np.nonzero(out)[0]
        out = out[keep[0]:keep[-1] + 1]
        top = float(out.max())
        return _Tilted(a.offset + b.offset + int(keep[0]), out / top, a.scale + b.scale + math.log(top))

    rng = np.random.default_rng(11)

    def tilted(size: int) -> _Tilted:  # a peaked law with tails far below the FFT's error bound, so trimming bites
        w = np.exp(-0.5 * ((np.arange(size) - size / 2) / (size / 24)) ** 2) * rng.uniform(0.5, 1.0, size)
        return _Tilted(int(rng.integers(-50, 50)), w / w.max(), float(rng.normal()))

    for a, b in [(tilted(40), tilted(3_000)), (tilted(2_000), tilted(5_000)), (tilted(4_000),) * 2]:
        before = a.w.copy(), b.w.copy()
        got, want = _convolve(a, b), copying(a, b)
        assert (got.offset, got.scale) == (want.offset, want.scale)
        assert np.array_equal(got.w, want.w)
        assert len(got.w) < len(a.w) + len(b.w) - 1 or min(len(a.w), len(b.w)) <= 64  # the FFT steps trim
        assert np.array_equal(a.w, before[0]) and np.array_equal(b.w, before[1])


@pytest.mark.parametrize("spec", [PureSpec(0.5), PureSpec(0.01, False, 9.75609756097561e-06, 1025),
                                  ApproximateSpec(0.3, 1e-8)])
def test_every_leaf_but_the_subsampled_gaussians_has_one_law_for_both_directions(spec) -> None:
    """Why :func:`epsilon_lower_bound` composes one direction only when no subsampled Gaussian is in the tally."""
    from dpaudit.accounting.hockey_stick import leaf_pmfs

    remove, add = leaf_pmfs(spec, 1e-4, 1.0)
    assert remove is add
    remove, add = leaf_pmfs(PoissonGaussianSpec(0.01, 1.1), 1e-3, 1.0)
    assert remove.offset != add.offset or not np.array_equal(remove.log_probs, add.log_probs)


def _epsilon_by_masks(t, infinity: float, h: float, tilt: float, delta: float) -> float:
    """The bisection as first written: δ recomputed over a boolean mask of the whole array at every step."""
    def exceeds(e: float) -> bool:
        losses = (t.offset + np.arange(len(t.w))) * h
        above = losses > e
        with np.errstate(divide="ignore", under="ignore"):
            log_p = t.scale - tilt * losses[above] + np.log(t.w[above])
            finite = float(np.sum(np.exp(log_p) * -np.expm1(e - losses[above])))
        return (infinity + finite) * (1.0 - 1e-9) > delta
    if not exceeds(0.0):
        return 0.0
    lo, hi = 0.0, (t.offset + len(t.w)) * h
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if exceeds(mid) else (lo, mid)
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return lo


@pytest.mark.parametrize(("pmf", "k", "tilt", "delta"), [
    (randomized_response_pmf(0.1, 0.0, 1e-3), 400, 1.0, 1e-6),
    (randomized_response_pmf(0.5, 1e-9, 1e-3), 50, 2.0, 1e-5),
    (discrete_laplace_pmf(0.05, 4, 1e-3), 300, 0.5, 1e-8),
])
def test_the_suffix_bisection_finds_the_epsilon_of_the_masked_one(pmf, k: int, tilt: float, delta: float) -> None:
    from dpaudit.accounting.hockey_stick import _epsilon_of, _power, _tilt

    composed = _power(_tilt(pmf, 1e-3, tilt), k)
    infinity = 1.0 - (1.0 - pmf.infinity) ** k
    found = _epsilon_of(composed, infinity, 1e-3, tilt, delta)
    assert found > 0 and found == _epsilon_by_masks(composed, infinity, 1e-3, tilt, delta)
