"""PLD accountant: golden value, upper-bound direction, leaves, caching that does not change results."""

from __future__ import annotations

import dataclasses
import math
import random

import dp_accounting
import pytest

from dpaudit.accounting import BasicComposition, PldAccountant, RdpAccountant, get_accountant
from dpaudit.accounting import pld as pld_module
from dpaudit.accounting.base import DeltaUnreachable, OutsideControlledRegime
from dpaudit.accounting.charges import ApproximateSpec, DiscreteGaussianSpec, PoissonGaussianSpec, PureSpec, tally
from dpaudit.accounting.pld import FIRST_LOSSES, HockeyStick, epsilon_from_pld, self_composed
from dpaudit.accounting.recheck import recheck
from dpaudit.budget import BudgetFilter
from dpaudit.display import show
from dpaudit.errors import AccountingError, BudgetExceeded, UnsupportedEvent
from dpaudit.events import ComposedEvent, SelfComposedEvent, compose

from ._events import (
    MNIST_DELTA,
    MNIST_Q,
    MNIST_SIGMA,
    MNIST_STEPS,
    PLD2_CLAIM,
    PLD2_DELTA,
    PLD2_VERSION,
    dpsgd,
    dpsgd_without_replacement,
    exponential,
    gaussian,
    laplace,
    pld2_event,
)


def test_mnist_golden_value_and_cross_check():
    """ε = 2.37991 with interval 2e-4; dp_accounting's own PLDAccountant (interval 1e-4) gives 2.37964."""
    eps = PldAccountant().epsilon(dpsgd(MNIST_Q, MNIST_SIGMA, MNIST_STEPS), MNIST_DELTA)
    assert eps == pytest.approx(2.379910821066, rel=1e-9)
    ref = dp_accounting.pld.PLDAccountant()
    ref.compose(dp_accounting.PoissonSampledDpEvent(MNIST_Q, dp_accounting.GaussianDpEvent(MNIST_SIGMA)), MNIST_STEPS)
    assert ref.get_epsilon(MNIST_DELTA) <= eps <= ref.get_epsilon(MNIST_DELTA) * 1.001
    assert eps < RdpAccountant().epsilon(dpsgd(MNIST_Q, MNIST_SIGMA, MNIST_STEPS), MNIST_DELTA)


def test_discrete_laplace_is_exact():
    """One 1-D discrete Laplace release: ε(δ) reaches the privacy map ε as δ → 0 and never exceeds it."""
    eps = PldAccountant().epsilon(laplace(0.5), 1e-12)
    assert 0.5 * 0.999 <= eps <= 0.5 + 2e-4


def test_pure_leaves_beat_basic_composition():
    event = ComposedEvent(events=(laplace(0.1),) * 50 + (exponential(0.2), laplace(0.3, dimension=3)))
    assert PldAccountant().epsilon(event, 1e-6) < BasicComposition().epsilon(event, 1e-6)


def test_discrete_gaussian_one_dimensional_only():
    assert PldAccountant().supports(gaussian(5.0))
    assert PldAccountant().epsilon(gaussian(5.0), 1e-6) <= RdpAccountant().epsilon(gaussian(5.0), 1e-6)
    assert not PldAccountant().supports(gaussian(5.0, dimension=3))


def test_sampling_without_replacement_unsupported():
    with pytest.raises(UnsupportedEvent, match="without replacement"):
        PldAccountant().epsilon(dpsgd_without_replacement(256, 60000, 1.1, 10), 1e-5)


def test_prefix_cache_gives_the_same_value_as_a_fresh_computation():
    released = [laplace(0.1), laplace(0.2), exponential(0.1)]
    cached = PldAccountant()
    for i in range(1, len(released) + 1):
        value = cached.epsilon(ComposedEvent(events=tuple(released[:i])), 1e-6)
    self_composed.cache_clear()
    assert value == PldAccountant().epsilon(ComposedEvent(events=tuple(released)), 1e-6)
    # a tally that is not an extension of the last one is folded from scratch
    assert cached.epsilon(SelfComposedEvent(event=laplace(0.2), count=2), 1e-6) == PldAccountant().epsilon(
        SelfComposedEvent(event=laplace(0.2), count=2), 1e-6)


# --- reading ε off a PLD, and the canonical composition order ----------------------------------------------------


@pytest.mark.parametrize("event", [laplace(0.3), gaussian(5.0), dpsgd(0.01, 1.0, 10), dpsgd(MNIST_Q, MNIST_SIGMA, 2000),
                                   ComposedEvent(events=(laplace(0.3),) * 5 + (gaussian(3.0), exponential(0.1)))])
@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-9])
def test_the_vectorised_reading_is_dp_accountings(event, delta):
    """:class:`HockeyStick` computes dp_accounting's ``get_epsilon_for_delta`` (its Python loop) to 1e-9, also where
    the search must look past its first :data:`FIRST_LOSSES` losses."""
    pld = PldAccountant().composed(tally(event)[1])
    expected = pld.get_epsilon_for_delta(delta)
    assert HockeyStick.of(pld).epsilon(delta) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_reading_searches_past_its_first_window_and_reports_infinite_mass():
    pld = PldAccountant().composed(tally(dpsgd(MNIST_Q, MNIST_SIGMA, MNIST_STEPS))[1])
    assert pld._pmf_remove.size > 4 * FIRST_LOSSES
    assert HockeyStick.of(pld).epsilon(1e-5) == pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=1e-9)
    tail = PldAccountant().composed({pld_module.ApproximateSpec(0.5, 1e-3): 1})
    assert math.isinf(HockeyStick.of(tail).epsilon(1e-5)) and math.isinf(tail.get_epsilon_for_delta(1e-5))


def _pool():
    return [laplace(0.02), laplace(0.03), exponential(0.02), gaussian(20.0, 0.3, 1e-7), dpsgd(0.05, 1.5, 3),
            ComposedEvent(events=(laplace(0.01), exponential(0.01)))]


def test_incremental_admission_is_the_fold_from_scratch_bit_for_bit():
    """A seeded random session (runs of equal charges, refusals near the budget): every bound the filter computes
    from its cached folds equals a fresh accountant's fold from scratch exactly, refusals included: the coarse
    grid's reading (the admission bound) where it fits the budget, else the accountant's ε (the smaller of the two
    grids' readings), which decides."""
    rng = random.Random(0)
    pool = _pool()
    budget = BudgetFilter(1.0, 1e-5, PldAccountant())
    decisions, by_bound = 0, 0
    for _ in range(60):
        event = pool[rng.randrange(len(pool))] if rng.random() < 0.6 else budget.events[-1] if budget.events \
            else pool[0]
        candidate = compose([*budget.events, event])
        fresh = PldAccountant().epsilon(candidate, 1e-5)
        coarse, _ = PldAccountant().admission_bound(candidate, 1e-5)
        try:
            admission = budget.admit(event)
        except BudgetExceeded as exc:
            assert fresh > 1.0 and show(fresh) in str(exc)  # the refusal prints the bound rounded up
            continue
        assert admission.epsilon == (coarse if coarse <= 1.0 else fresh) and fresh <= admission.epsilon
        by_bound += coarse <= 1.0
        budget.commit(event, admission)
        decisions += 1
    # admissions on the coarse bound, on the accountant (bound over budget) and refusals were all exercised
    assert decisions > 10 and 0 < by_bound < decisions and len(budget.events) < 60


def test_grouping_matters_in_the_last_bits():
    """Why one canonical order: the same charges composed by tally (one self-composition per spec) differ from the
    fold in charge order in the last digits, so a filter and a certificate that grouped differently could disagree
    at the boundary (the certificate above what was admitted)."""
    events = [laplace((0.05, 0.03, 0.04)[i % 3]) if i % 4 != 3 else dpsgd(0.01, 1.0, 5) for i in range(24)]
    counts = tally(compose(events))[1]
    by_tally = epsilon_from_pld(PldAccountant().composed(counts), counts, 1e-5)
    assert PldAccountant().epsilon(compose(events), 1e-5) != by_tally


def test_a_run_of_equal_charges_composes_once_per_binary_digit(monkeypatch):
    """5000 equal Laplace releases (a long session of one query), folded from scratch (the certificate, verify), cost
    one composition per binary digit of 5000 after the first (4096 + 512 + 256 + 128 + 8: four) on each of the two
    grids, not 4999; the value is the single self-composition's to 10⁻⁷ (both are pessimistic: they cut different
    tails)."""
    calls = []
    original = pld_module.compose
    monkeypatch.setattr(pld_module, "compose", lambda a, b: calls.append(1) or original(a, b))
    release = laplace(0.01)
    value = PldAccountant().epsilon(ComposedEvent(events=(release,) * 5000), 1e-5)
    assert len(calls) == 4 * 2
    single = PldAccountant().epsilon(SelfComposedEvent(event=release, count=5000), 1e-5)
    assert value == pytest.approx(single, rel=1e-7)


def test_binary_digits():
    assert pld_module.digits(1) == (1,) and pld_module.digits(5000) == (4096, 512, 256, 128, 8)
    assert all(sum(pld_module.digits(n)) == n for n in range(1, 300))


def _growing_run(monkeypatch) -> tuple[list[tuple[float, float, int]], int]:
    """A Laplace release, then 37 equal DP-SGD steps charged one at a time, then another Laplace release, with a
    refused candidate in between: (admitted bound, fresh coarse-grid fold from scratch, compositions of the
    admission) each, and the FFT self-compositions of the admissions in all (every admission is on the coarse
    bound: the budget is far)."""
    calls, powers = [], []
    original = pld_module.compose
    monkeypatch.setattr(pld_module, "compose", lambda a, b: calls.append(1) or original(a, b))
    power = pld_module.pld_lib.PrivacyLossDistribution.self_compose
    monkeypatch.setattr(pld_module.pld_lib.PrivacyLossDistribution, "self_compose",
                        lambda self, count, *args: powers.append(count) or power(self, count, *args))
    budget = BudgetFilter(5.0, 1e-5, PldAccountant())
    out, admitted_powers = [], 0
    for i, event in enumerate([laplace(0.3)] + [dpsgd(0.05, 1.5, 1)] * 37 + [laplace(0.2)]):
        if i == 20:  # refused by the PLD itself (no Laplace leaf for the lower bound), ε about 13
            with pytest.raises(BudgetExceeded, match="pld accountant"):
                budget.admit(dpsgd(1.0, 0.4, 1))
        calls.clear()
        before = len(powers)
        admission = budget.admit(event)
        used = len(calls)
        admitted_powers += len(powers) - before
        fresh, _ = PldAccountant().admission_bound(compose([*budget.events, event]), 1e-5)
        out.append((admission.epsilon, fresh, used))
        budget.commit(event, admission)
    return out, admitted_powers


def test_a_growing_run_costs_one_composition_per_admission(monkeypatch):
    """Each admission of a run of equal charges composes once (its cached fold shares every partial fold above the
    new length's lowest binary digit) and self-composes only at a new power of two (6 for 37 steps, not one per
    step), a refused candidate costs its successor nothing, and every bound is the fold from scratch bit for bit."""
    pld_module.self_composed.cache_clear()
    pld_module.run_pld.cache_clear()
    results, powers = _growing_run(monkeypatch)
    assert all(admitted == fresh for admitted, fresh, _ in results)
    assert all(used <= 1 for _, _, used in results)
    assert powers <= (37).bit_length()


def test_the_growing_run_test_catches_partials_shared_too_far(monkeypatch):
    """The deliberately broken variant (a longer run keeps every partial fold of the shorter one) admits bounds that
    are not the fold from scratch."""
    def broken(self, items, count=1):
        if items != self.run[0]:
            first = pld_module.Fold(self.length + 1, self.pld(), (items, 1), interval=self.interval)
            return first if count == 1 else broken(first, items, count - 1)
        return pld_module.Fold(self.length + count, self.before, (items, self.run[1] + count), self._partials,
                               interval=self.interval)

    monkeypatch.setattr(pld_module.Fold, "extended", broken)
    assert any(admitted != fresh for admitted, fresh, _ in _growing_run(monkeypatch)[0])


@pytest.mark.parametrize(("first", "second"), [(dpsgd(0.01, 1.0, 5), gaussian(20.0, 0.3, 1e-7)),
                                               (gaussian(20.0, 0.3, 1e-7), laplace(0.02)),
                                               (laplace(0.02), exponential(0.02)), (dpsgd(0.05, 1.5, 3), laplace(0.3))])
def test_the_vectorised_composition_is_dp_accountings(first, second):
    """:func:`pld.compose` gives dp_accounting's ``compose`` exactly: the same convolution, and the same tails cut
    (its running sums by ``np.cumsum`` instead of a Python loop)."""
    a, b = (PldAccountant().composed(tally(e)[1]) for e in (first, second))
    _assert_same_pld(pld_module.compose(a, b), a.compose(b))


def _assert_same_pld(ours, theirs) -> None:
    for mine, ref in ((ours._pmf_remove, theirs._pmf_remove), (ours._pmf_add, theirs._pmf_add)):
        assert mine._infinity_mass == ref._infinity_mass
        if isinstance(ref, dp_accounting.pld.pld_pmf.DensePLDPmf):
            assert mine._lower_loss == ref._lower_loss and (mine._probs == ref._probs).all()
        else:
            assert mine._loss_probs == ref._loss_probs


def test_a_cached_transform_gives_dp_accountings_composition():
    """The second operand's FFT is cached per (PMF, length): the same two operands composed onto folds of two sizes,
    twice over (the second time from the cache), give dp_accounting's ``compose`` exactly every time."""
    operands = [PldAccountant().composed(tally(e)[1]) for e in (dpsgd(0.05, 1.5, 1), gaussian(20.0, 0.3, 1e-7))]
    folds = [PldAccountant().composed(tally(dpsgd(0.05, 1.5, k))[1]) for k in (2, 3)]
    for first in folds * 2:
        for second in operands:
            _assert_same_pld(pld_module.compose(first, second), first.compose(second))


def _fold_part_by_part(events, interval=pld_module.VALUE_DISCRETIZATION_INTERVAL) -> pld_module.Fold:
    """The canonical fold as it was computed before runs were folded by stretches: one ``extended`` per part."""
    items = [tuple(pld_module.event_counts(e).items()) for e in events]
    state = pld_module.start_fold(items[0], interval=interval)
    for tally_items in items[1:]:
        state = state.extended(tally_items)
    return state


@pytest.mark.parametrize("interval", [pld_module.VALUE_DISCRETIZATION_INTERVAL, pld_module.ADMISSION_INTERVAL])
def test_a_run_folded_by_stretches_is_the_part_by_part_fold_bit_for_bit(interval):
    """:class:`~dpaudit.accounting.pld.FoldCache` steps over a stretch of one event object at once
    (``Fold.extended(items, count)``; verify decodes a ledger's equal charges to one object): the PLD is the
    part-by-part fold's exactly, whether the parts of a run are one object or equal copies, runs of many lengths
    (their binary digits), a run resumed from a cached fold, and a stretch that starts a new run."""
    shared = laplace(0.02)
    copies = [laplace(0.02) for _ in range(37)]
    events = (gaussian(20.0, 0.3, 1e-7),) + (shared,) * 37 + (exponential(0.02),) * 5 + (shared,) * 100 + \
        tuple(copies) + (dpsgd(0.05, 1.5, 3),)
    expected = _fold_part_by_part(events, interval).pld()
    _assert_same_pld(pld_module.FoldCache(interval=interval).fold(events).pld(), expected)
    cache = pld_module.FoldCache(interval=interval)
    cache.fold(events[:20]).pld()  # resumed mid-run, the next stretch the rest of that run
    _assert_same_pld(cache.fold(events).pld(), expected)
    assert cache.fold(events).length == len(events)
    # the deliberately broken variant of ``extended`` (a longer run keeps every partial of the shorter one) is caught
    # by test_the_growing_run_test_catches_partials_shared_too_far
    with pytest.raises(AccountingError, match="at least one part"):
        pld_module.start_fold(tuple(pld_module.event_counts(shared).items())).extended((), 0)


def test_the_pld2_fold_recomputes_a_pld2_claim_bit_for_bit():
    """A certificate closed under ``pld/2`` (a run self-composed in one step) is recomputed by the fold its version
    names, to the last bit of the frozen value the old code computed, and its version string is the old one; the
    current fold's value differs by more than verify's tolerance, so verify needs the recorded fold."""
    old = PldAccountant("pld/2")
    assert old.epsilon(pld2_event(), PLD2_DELTA) == PLD2_CLAIM
    assert old.version().split(";")[0] == PLD2_VERSION.split(";")[0]
    assert PldAccountant().epsilon(pld2_event(), PLD2_DELTA) > PLD2_CLAIM * (1 + 1e-9)
    assert PldAccountant().version().startswith(f"{pld_module.CURRENT_FOLD} (")


@pytest.mark.parametrize(("recorded", "fold"), [
    (PLD2_VERSION, "pld/2"),
    ("tightest/1 [rdp/1 (opacus 1.6.0, dp-accounting 0.6.0); pld/2 (interval 0.0002, pessimistic, run fold; "
     "dp-accounting 0.6.0); advanced/1 (dpaudit 0.1.0); basic/1 (dpaudit 0.1.0)]", "pld/2"),
    (PldAccountant("pld/3").version(), "pld/3"),
    (PldAccountant().version(), "pld/4"),
    (None, pld_module.CURRENT_FOLD),
    ("rdp/1 (opacus 1.6.0, dp-accounting 0.6.0)", pld_module.CURRENT_FOLD),
])
def test_the_recorded_fold_is_the_one_the_version_names(recorded, fold):
    assert pld_module.recorded_fold(recorded) == fold


@pytest.mark.parametrize(("recorded", "match"), [
    ("tightest/1 [rdp/1 (opacus 1.6.0); pld/1 (interval 0.0002, pessimistic; dp-accounting 0.6.0)]", "pld/1"),
    ("pld/9 (a later fold)", "pld/9"),
    ("pld/2 (x); pld/3 (y)", "several"),
    (3, "not a string"),
])
def test_a_version_with_no_fold_here_is_refused_naming_it(recorded, match):
    with pytest.raises(AccountingError, match=match):
        pld_module.recorded_fold(recorded)
    with pytest.raises(AccountingError, match="pld/7"):
        PldAccountant("pld/7")


# --- pld/4: two grids, the coarse one the admission bound ----------------------------------------------------------

#: ε of :func:`pld2_event` at :data:`PLD2_DELTA` as the ``pld/3`` accountant computed it before ``pld/4`` existed,
#: frozen: the claim a certificate closed under ``pld/3`` carries.
PLD3_CLAIM = 3.3789996810883953
PLD3_VERSION = "pld/3 (interval 0.0002, pessimistic, run fold by binary digits; dp-accounting 0.6.0)"


def test_the_pld3_fold_recomputes_a_pld3_claim_bit_for_bit():
    """A certificate closed under ``pld/3`` (one grid) is recomputed by the fold its version names, to the last bit
    of the frozen value, with the old version string."""
    old = PldAccountant("pld/3")
    assert old.epsilon(pld2_event(), PLD2_DELTA) == PLD3_CLAIM
    assert old.version().split(";")[0] == PLD3_VERSION.split(";")[0] and old.admission_bound(pld2_event(), 1e-8) is None
    assert pld_module.recorded_fold(PLD3_VERSION) == "pld/3"


@pytest.mark.parametrize("event", [
    pld2_event(), compose([laplace(0.3), gaussian(20.0, 0.3, 1e-7), dpsgd(0.05, 1.5, 3)]), dpsgd(0.01, 1.0, 40)])
def test_the_pld4_epsilon_is_the_smaller_of_the_two_grid_folds(event):
    """``pld/4``'s ε is, bit for bit, the smaller of the fine grid's fold (``pld/3``'s value) and the coarse grid's
    fold (the admission bound); the version names both intervals."""
    fine = PldAccountant("pld/3").epsilon(event, 1e-6)
    coarse, source = PldAccountant().admission_bound(event, 1e-6)
    assert source == "pld" and PldAccountant().epsilon(event, 1e-6) == min(fine, coarse)
    assert f"intervals 0.0002 and {pld_module.ADMISSION_INTERVAL:g}, the smaller epsilon" in PldAccountant().version()
    assert pld_module.ADMISSION_INTERVAL == 16 * pld_module.VALUE_DISCRETIZATION_INTERVAL


def _random_composition(rng: random.Random, gaussians) -> ComposedEvent:
    """1-5 leaves of every kind the PLD models, each repeated 1, 2 or 5 times (runs)."""
    events = []
    for _ in range(rng.randint(1, 5)):
        kind = rng.random()
        leaf = (laplace(10 ** rng.uniform(-2.5, 0)) if kind < 0.3 else exponential(10 ** rng.uniform(-2, 0))
                if kind < 0.45 else rng.choice(gaussians) if kind < 0.6
                else dpsgd(10 ** rng.uniform(-3, -0.5), rng.uniform(0.6, 3.0), rng.choice([1, 3, 10])))
        events += [leaf] * rng.choice([1, 1, 2, 5])
    return ComposedEvent(events=tuple(events))


def _grid_readings(compositions: int) -> list[tuple[float, float, float]]:
    """(coarse reading, fine reading, ``pld/4`` ε) of seeded random compositions (seed 0) at δ = 10⁻³ and 10⁻⁹."""
    rng = random.Random(0)
    gaussians = [gaussian(20.0, 0.3, 1e-7), gaussian(5.0, 1.0, 1e-6)]
    fine, current = PldAccountant("pld/3"), PldAccountant()
    out = []
    for _ in range(compositions):
        event = _random_composition(rng, gaussians)
        for delta in (1e-3, 1e-9):
            out.append((current.admission_bound(event, delta)[0], fine.epsilon(event, delta),
                        current.epsilon(event, delta)))
    return out


def test_the_coarse_grid_reads_at_least_the_fine_grid():
    """Seeded sweep (16 compositions of Laplace, exponential, discrete Gaussian and DP-SGD leaves in runs, at two δ):
    the coarse grid's reading, the admission bound, is never below the fine grid's, so admitting on it never admits a
    charge the fine grid would refuse, and the certified ε (their minimum) is the fine grid's. Soundness does not rest
    on this (the certificate takes the minimum, at most the bound by construction); a failure would show the coarse
    grid to be no admission shortcut. The smallest margin seen over 180 such cases was 7.8·10⁻⁷ (relative 10⁻⁶)."""
    readings = _grid_readings(16)
    assert len(readings) == 32
    assert all(coarse >= fine and certified == fine for coarse, fine, certified in readings)


def test_the_grid_sweep_catches_a_second_grid_below_the_fine_one(monkeypatch):
    """Power: the deliberately broken variant (the second grid half the fine interval instead of 16 times it, so its
    connect-the-dots reading is tighter) reads below the fine grid in the sweep's first compositions, and the ε then
    taken is not the fine grid's."""
    scheme = pld_module.FOLDS["pld/4"]
    monkeypatch.setitem(pld_module.FOLDS, "pld/4", dataclasses.replace(
        scheme, intervals=(pld_module.VALUE_DISCRETIZATION_INTERVAL, pld_module.VALUE_DISCRETIZATION_INTERVAL / 2)))
    readings = _grid_readings(2)
    assert any(coarse < fine and certified < fine for coarse, fine, certified in readings)


def test_a_grid_that_refuses_is_left_out_of_the_smallest_reading():
    """A grid outside its controlled regime (or whose δ is unreachable) does not answer; the others' smallest reading
    stands, and only when every grid refuses is the first grid's refusal raised; a NaN on any grid is an error."""
    def refuse(kind):
        def read():
            raise kind(f"refused: {kind.__name__}")
        return read

    assert pld_module.smallest_reading([refuse(OutsideControlledRegime), lambda: 2.0]) == 2.0
    assert pld_module.smallest_reading([lambda: 3.0, refuse(DeltaUnreachable), lambda: 2.5]) == 2.5
    with pytest.raises(OutsideControlledRegime):
        pld_module.smallest_reading([refuse(OutsideControlledRegime), refuse(DeltaUnreachable)])
    for readings in ([lambda: 1.0, lambda: math.nan], [lambda: math.nan, lambda: 1.0]):  # min() would hide the first
        with pytest.raises(AccountingError, match="NaN"):
            pld_module.smallest_reading(readings)


def test_a_claim_below_the_smaller_grid_reading_fails_the_recheck():
    """Attack: a ``pld/4`` claim forged from a reading below both grids' (the fine fold on a grid half as fine, a
    tighter number no filter admitted) fails verify's recomputation; the true claim passes; a ``pld/3`` claim under
    the ``pld/4`` version passes only because it is the fine grid's reading, which ``pld/4`` never exceeds."""
    event = compose([laplace(0.3)] * 3 + [dpsgd(0.05, 1.5, 1)] * 6)
    version = PldAccountant().version()
    claim = PldAccountant().epsilon(event, 1e-6)
    finer = epsilon_from_pld(pld_module.fold(None, [(spec, k) for spec, k in tally(event)[1].items()], True, 1e-4),
                             tally(event)[1], 1e-6)
    assert finer < claim
    assert recheck("pld", event, 1e-6, claim, version).ok
    forged = recheck("pld", event, 1e-6, finer, version)
    assert not forged.ok and "claim" in forged.reason and forged.recomputed == claim
    assert recheck("pld", event, 1e-6, PldAccountant("pld/3").epsilon(event, 1e-6), version).ok


def test_a_discrete_laplace_leaf_too_fine_to_enumerate_is_unsupported_by_name() -> None:
    """dp_accounting's discrete Laplace PLD enumerates Δ + 1 outputs: at Δ = 2³⁰ + 1 it would allocate gigabytes.
    Up to MAX_LAPLACE_SENSITIVITY the leaf is supported; above it the PLD refuses by name and the tightest accountant
    composes with the others."""
    limit = pld_module.MAX_LAPLACE_SENSITIVITY
    at, above = (PureSpec(0.5, laplace_parameter=0.5 / d, laplace_sensitivity=d) for d in (limit, limit + 1))
    assert pld_module.unsupported_reason({at: 3}) is None
    assert "MAX_LAPLACE_SENSITIVITY = 4194304" in pld_module.unsupported_reason({above: 3})
    with pytest.raises(UnsupportedEvent, match="MAX_LAPLACE_SENSITIVITY"):
        PldAccountant().epsilon_of_tally({above: 3}, 1e-6)
    assert get_accountant("tightest").epsilon_of_tally({above: 3}, 1e-6) == pytest.approx(1.5)


def test_the_laplace_sensitivity_limit_is_a_size_limit_on_every_grid() -> None:
    """The Δ limit bounds how much the PLD enumerates, so it is one of :func:`leaf_size_reason`'s limits (whatever
    the grid: the Δ + 1 outputs do not depend on it), and a caller that sizes leaves itself (``sized=False``, the
    recheck's optimistic PLD) meets it there instead of being told the leaf is not modelled."""
    limit = pld_module.MAX_LAPLACE_SENSITIVITY
    at, above = (PureSpec(0.5, laplace_parameter=0.5 / d, laplace_sensitivity=d) for d in (limit, limit + 1))
    for interval in (None, 1e-4, 1.0):
        assert pld_module.leaf_size_reason(at, interval) is None
        assert "MAX_LAPLACE_SENSITIVITY = 4194304" in pld_module.leaf_size_reason(above, interval)
    assert pld_module.unsupported_reason({above: 3}, pessimistic=False, sized=False) is None


@pytest.mark.parametrize("generic", [PureSpec(710.0), ApproximateSpec(710.0, 1e-9)])
def test_a_generic_leaf_whose_exp_epsilon_overflows_is_unsupported_by_name(generic) -> None:
    """dp_accounting builds a generic leaf's PLD from exp(ε), which overflows beyond ε ≈ 709.78: the PLD refuses such
    a leaf by name (it ended a session's close with an OverflowError) and the tightest accountant composes it with
    the others; at the limit the leaf is still the PLD's."""
    at = PureSpec(pld_module.MAX_GENERIC_EPSILON)
    assert pld_module.unsupported_reason({at: 2}) is None
    with pytest.raises(UnsupportedEvent, match="MAX_GENERIC_EPSILON"):
        PldAccountant().epsilon_of_tally({generic: 2}, 1e-6)
    assert get_accountant("tightest").epsilon_of_tally({generic: 2}, 1e-6) == pytest.approx(2 * generic.epsilon)


def test_a_session_of_two_huge_epsilon_releases_closes_and_verifies(tmp_path) -> None:
    """Two exponential-mechanism releases of ε = 710 in a session accounted by the tightest accountant: admitted,
    and the close certifies 1420 (basic composition) instead of crashing in the PLD."""
    from dpaudit import Session
    from dpaudit.mechanisms.randomness import SeededRandom
    from dpaudit.trust import KeyTrust
    from dpaudit.verify import verify_bundle

    with Session(epsilon=5000, delta=1e-6, rng=SeededRandom(0), mirror=False, store=tmp_path) as session:
        for _ in range(2):
            session.exponential([1.0, 2.0, 3.0], 1.0, 710.0)
    report = verify_bundle(session.run_dir, allow_not_for_release=True, trust=KeyTrust.default(tmp_path))
    assert report.valid, report.reasons
    assert report.claim["epsilon"] == pytest.approx(1420.0)


# --- a Gaussian leaf too large to build is unsupported by name, sized from its parameters before any allocation ------

GAUSSIANS_TOO_LARGE = [
    pytest.param(DiscreteGaussianSpec(1.03e10, 2.0**30, 1, 0.5, 1e-7), "MAX_DISCRETE_GAUSSIAN_SUPPORT = 4194304",
                 id="discrete-gaussian-support"),
    pytest.param(DiscreteGaussianSpec(0.01, 1.0, 1, 0.5, 1e-7), "MAX_LOSS_POINTS = 8388608",
                 id="discrete-gaussian-loss-span"),
    pytest.param(DiscreteGaussianSpec(1.0, 13.0, 1, 0.5, 1e-7), "beyond its truncation bound 12",
                 id="discrete-gaussian-beyond-truncation"),
    pytest.param(PoissonGaussianSpec(0.5, 0.03), "MAX_CONNECT_DOTS_POINTS = 1048576", id="subsampled-gaussian"),
    pytest.param(PureSpec(900.0, laplace_parameter=0.9, laplace_sensitivity=1000), "MAX_LOSS_POINTS = 8388608",
                 id="discrete-laplace-loss-span"),
]


@pytest.mark.parametrize(("spec", "named"), GAUSSIANS_TOO_LARGE)
def test_a_leaf_too_large_to_build_is_unsupported_by_name_and_the_others_take_it(spec, named) -> None:
    """Before the limits: σ = 1.03·10¹⁰ grid units asked for 1.74 TiB, σ = 0.03 took 43 s and 1 GB, Δ beyond the
    truncation raised dp_accounting's ValueError. Now the PLD refuses each by name and the tightest accountant
    certifies with its other members."""
    assert named in pld_module.unsupported_reason({spec: 2})
    with pytest.raises(UnsupportedEvent, match=named.split(" = ")[0]):
        PldAccountant().epsilon_of_tally({spec: 2}, 1e-6)
    assert math.isfinite(get_accountant("tightest").epsilon_of_tally({spec: 2}, 1e-6))


def test_the_size_estimates_are_what_dp_accounting_builds() -> None:
    """The connect-the-dots estimate is the subsampled Gaussian's PMF length to two points, and the discrete
    Gaussian's loss span bounds its dense PMF: the limits refuse by the arrays dp_accounting would build."""
    interval = pld_module.VALUE_DISCRETIZATION_INTERVAL
    for spec in (PoissonGaussianSpec(0.5, 0.5), PoissonGaussianSpec(0.01, 1.1), PoissonGaussianSpec(1.0, 2.0)):
        built = pld_module.leaf_pld(spec, True, interval)
        length = max(len(pmf._probs) for pmf in (built._pmf_remove, built._pmf_add))
        estimate = max(pld_module._connect_dots_span(spec, side) for side in ("ADD", "REMOVE")) / interval + 3.0
        assert length <= estimate <= length + 2
    for spec in (DiscreteGaussianSpec(3.0, 2.0, 1, 1.0, 1e-6), DiscreteGaussianSpec(0.3, 1.0, 1, 1.0, 1e-6)):
        built = pld_module.leaf_pld(spec, True, interval)
        reach = math.ceil(11.6 * spec.sigma)
        span = spec.sensitivity * (2 * reach + spec.sensitivity) / spec.sigma**2 / interval + 3.0
        assert max(len(pmf.to_dense_pmf()._probs) for pmf in (built._pmf_remove, built._pmf_add)) <= span


def test_the_leaf_limits_refuse_from_the_boundary_on(monkeypatch) -> None:
    """At a limit equal to a leaf's size the leaf is the PLD's; one point lower it is refused (no slack either way)."""
    spec = DiscreteGaussianSpec(1000.0, 1.0, 1, 1.0, 1e-6)  # 2·⌈11 600⌉ + 2 = 23 202 outputs
    monkeypatch.setattr(pld_module, "MAX_DISCRETE_GAUSSIAN_SUPPORT", 23_202)
    assert pld_module.unsupported_reason({spec: 1}) is None
    monkeypatch.setattr(pld_module, "MAX_DISCRETE_GAUSSIAN_SUPPORT", 23_201)
    assert "enumerates 2.32e+04 outputs" in pld_module.unsupported_reason({spec: 1})
