"""The vectorised exact discrete Gaussian (CKS 2020, Algorithm 3 on arrays): its law, its broken variants, its ranges.

Statistical tests draw from a SeededRandom with a fixed seed and compare with the exact law by a chi-square test at
significance ALPHA = 1e-4: for an arbitrary seed the false-alarm rate is 1e-4 per test (with the fixed seed the
outcome is deterministic). Each deliberately broken sampler (no rejection step, a proposal whose scale is not the
t of the acceptance probability, the exp(−1) reductions of γ > 1 dropped) must be rejected at the same level; the
miss rate is the test's power against it at the stated sample size, and the p-values here are below 1e-20.
Frequency tests of single Bernoulli(exp(−γ)) acceptances use a 5-sigma band (false alarm < 1e-6).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from dpaudit.errors import InvalidParameter
from dpaudit.ledger import read_records
from dpaudit.mechanisms import discrete_bulk
from dpaudit.mechanisms.discrete_bulk import (
    DIGIT_BITS,
    DiscreteGaussianSampler,
    bernoulli_digit,
    bernoulli_fraction,
    sample_discrete_gaussian_array,
    uniform_digits,
)
from dpaudit.mechanisms.gaussian import release_gaussian
from dpaudit.mechanisms.randomness import RandomSource, SeededRandom

ALPHA = 1e-4
N = 200_000
#: σ² values: an integer, a rational, and the exact square of a float σ (numerator beyond int64, as releases have)
VARIANCES = [Fraction(1), Fraction(25, 4), Fraction(3.3) ** 2]


def _chi_square_p(samples: np.ndarray, pmf: dict[int, float]) -> float:
    """p-value of a chi-square test of ``samples`` against ``pmf``; cells with expectation ≤ 5 join the last cell."""
    support = sorted(pmf)
    counts = np.array([np.count_nonzero(samples == k) for k in support], dtype=float)
    expected = np.array([pmf[k] for k in support]) * samples.size
    keep = expected > 5
    observed, expect = counts[keep], expected[keep]
    observed[-1] += samples.size - observed.sum()  # everything else pooled into the last cell
    expect[-1] += samples.size - expect.sum()
    stat = float(((observed - expect) ** 2 / expect).sum())
    return float(chi2.sf(stat, observed.size - 1))


def _discrete_gaussian_pmf(sigma2: Fraction) -> dict[int, float]:
    radius = int(40 * math.sqrt(sigma2)) + 40
    weights = {y: math.exp(-y * y / (2 * float(sigma2))) for y in range(-radius, radius + 1)}
    total = sum(weights.values())
    return {y: w / total for y, w in weights.items()}


@pytest.mark.statistical
@pytest.mark.parametrize("sigma2", VARIANCES)
def test_the_bulk_gaussian_follows_the_exact_law(sigma2: Fraction) -> None:
    samples = sample_discrete_gaussian_array(sigma2, N, SeededRandom(21))
    assert samples.dtype == np.int64 and samples.size == N
    assert _chi_square_p(samples, _discrete_gaussian_pmf(sigma2)) > ALPHA


@pytest.mark.statistical
def test_the_law_test_catches_a_gaussian_without_the_rejection_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DiscreteGaussianSampler, "_accept_tabled", lambda self, values, rng: np.ones(values.size, bool))
    samples = sample_discrete_gaussian_array(Fraction(25, 4), N, SeededRandom(21))
    assert _chi_square_p(samples, _discrete_gaussian_pmf(Fraction(25, 4))) < ALPHA


@pytest.mark.statistical
def test_the_law_test_catches_a_proposal_with_the_wrong_t(monkeypatch: pytest.MonkeyPatch) -> None:
    laplace = discrete_bulk.sample_discrete_laplace_array
    monkeypatch.setattr(discrete_bulk, "sample_discrete_laplace_array",
                        lambda scale, count, rng: laplace(scale + 1, count, rng))  # t + 1, acceptance still for t
    samples = sample_discrete_gaussian_array(Fraction(25, 4), N, SeededRandom(21))
    assert _chi_square_p(samples, _discrete_gaussian_pmf(Fraction(25, 4))) < ALPHA


@pytest.mark.statistical
def test_the_law_test_catches_dropped_reductions(monkeypatch: pytest.MonkeyPatch) -> None:
    split = DiscreteGaussianSampler._split
    monkeypatch.setattr(DiscreteGaussianSampler, "_split", lambda self, n: (0 * n, split(self, n)[1]))  # exp(−r) only
    samples = sample_discrete_gaussian_array(Fraction(1), N, SeededRandom(21))
    assert _chi_square_p(samples, _discrete_gaussian_pmf(Fraction(1))) < ALPHA


@pytest.mark.statistical
def test_each_acceptance_is_bernoulli_exp_minus_gamma() -> None:
    # σ² = 1, t = 2: γ(n) = (n − 1/2)²/2, from 1/8 (n = 0, 1) through 1.125 (n = 2) to 6.125 (n = 4): m = 0 … 6
    sampler = DiscreteGaussianSampler(Fraction(1))
    rng = SeededRandom(5)
    for n in range(5):
        hits = sampler._accept_tabled(np.full(N, n, dtype=np.int64), rng)  # noqa: SLF001
        p = math.exp(-((n - 0.5) ** 2) / 2)
        assert abs(hits.mean() - p) < 5 * math.sqrt(p * (1 - p) / N) + 1 / N, n


@pytest.mark.statistical
def test_proposals_beyond_the_table_are_accepted_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discrete_bulk, "GAUSSIAN_TABLE_LIMIT", 2)  # |y| ≥ 2 take the scalar exact path
    samples = sample_discrete_gaussian_array(Fraction(25, 4), 50_000, SeededRandom(23))
    assert _chi_square_p(samples, _discrete_gaussian_pmf(Fraction(25, 4))) > ALPHA


def test_a_proposal_beyond_int64_is_judged_on_python_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    laplace = discrete_bulk.sample_discrete_laplace_array
    calls = []

    def once_wide(scale: Fraction, count: int, rng: RandomSource) -> np.ndarray:
        calls.append(count)
        if len(calls) > 1:
            return laplace(scale, count, rng)
        wide = laplace(scale, count, rng).astype(object)
        wide[0] = 2**70  # γ ≈ 2¹³⁹: rejected with probability 1 − exp(−γ)
        return wide

    monkeypatch.setattr(discrete_bulk, "sample_discrete_laplace_array", once_wide)
    samples = sample_discrete_gaussian_array(Fraction(4), 1000, SeededRandom(2))
    assert samples.dtype == np.int64 and samples.size == 1000 and np.abs(samples).max() < 100
    assert len(calls) > 1


def test_seeded_draws_are_reproducible_and_the_table_is_reused() -> None:
    first = sample_discrete_gaussian_array(Fraction(3.3) ** 2, 10_000, SeededRandom(7))
    assert np.array_equal(first, sample_discrete_gaussian_array(Fraction(3.3) ** 2, 10_000, SeededRandom(7)))
    assert not np.array_equal(first, sample_discrete_gaussian_array(Fraction(3.3) ** 2, 10_000, SeededRandom(8)))
    sampler = DiscreteGaussianSampler(Fraction(3.3) ** 2)
    rng = SeededRandom(7)
    sampler(10_000, rng)
    filled = int(np.count_nonzero(sampler._reductions >= 0))  # noqa: SLF001
    assert filled > 10 and sampler.t == 4
    values = np.array(release_gaussian(np.zeros(5000), 3.0, 0.25, SeededRandom(3)))
    assert np.array_equal(values, release_gaussian(np.zeros(5000), 3.0, 0.25, SeededRandom(3)))


def test_the_gaussian_sampler_refuses_bad_variances() -> None:
    with pytest.raises(InvalidParameter):
        DiscreteGaussianSampler(Fraction(0))
    with pytest.raises(InvalidParameter):
        DiscreteGaussianSampler(Fraction(-1, 3))
    with pytest.raises(InvalidParameter):  # t = ⌊σ⌋ + 1 ≥ 2⁵¹: use a coarser grid
        DiscreteGaussianSampler(Fraction(2**104))


@pytest.mark.parametrize("bits", [7, 15, 31, 63])
def test_uniform_digits_are_in_range_and_uniform(bits: int) -> None:
    digits = uniform_digits(64_000 + 3, SeededRandom(bits), bits)
    assert digits.dtype.kind in "iu" and digits.size == 64_003
    assert digits.min() >= 0 and digits.max() < 2**bits
    digits = digits.astype(np.int64)
    top = digits >> (bits - 3)  # the three top bits of each digit: uniform over 8 values
    assert _chi_square_p(top, {k: 1 / 8 for k in range(8)}) > ALPHA
    low = digits & 7
    assert _chi_square_p(low, {k: 1 / 8 for k in range(8)}) > ALPHA


def test_scaled_division_is_exact_on_both_paths() -> None:
    rng = np.random.default_rng(1)
    for bound in (3, 2**20 + 7, 2**48 - 1, 2**48, 2**61 + 5, 2**62):
        numerators = np.append(rng.integers(0, bound, size=200, endpoint=True, dtype=np.int64), [0, bound])
        quotient = discrete_bulk._scaled_quotient(numerators, bound)  # noqa: SLF001
        assert quotient.tolist() == [(int(u) << DIGIT_BITS) // bound for u in numerators]


class _FixedWords(RandomSource):
    """Every word the same (so every digit can be made to tie with a threshold); randbelow from a seeded source."""

    for_release = False

    def __init__(self, word: int = 0) -> None:
        self._rng = SeededRandom(1)
        self._word = word

    def randbelow(self, n: int) -> int:
        return self._rng.randbelow(n)

    def words(self, count: int) -> np.ndarray:
        return np.full(count, self._word, dtype=np.int64)

    def describe(self) -> dict:
        return {"kind": "test"}


def test_a_digit_tie_is_resolved_by_the_exact_remainder() -> None:
    # p = 1/(3·2¹⁵): threshold ⌊2¹⁵p⌋ = 0, every zero digit ties; the tie is Bernoulli({2¹⁵p}) = Bernoulli(1/3)
    hits = bernoulli_fraction(np.ones(30_000, dtype=np.int64), 3 << DIGIT_BITS, _FixedWords())
    assert abs(hits.mean() - 1 / 3) < 5 * math.sqrt(2 / 9 / 30_000)
    seen = []
    out = bernoulli_digit(np.array([0, 1, 0]), lambda ties: seen.append(ties.tolist()) or np.array([True, False]),
                          _FixedWords())
    assert seen == [[0, 2]] and out.tolist() == [True, True, False]


def _exp1_given_digit(j: int) -> Fraction:
    """P(Algorithm 1 with γ = 1 returns True | the 15-bit digit of U equals ⌊2¹⁵/j!⌋), exactly."""
    c = Fraction(2**15 % math.factorial(j), math.factorial(j))  # P(K > j | the digit)
    if j < 8:
        return 1 - c if j % 2 else c  # K = j or j + 1
    odd, reach = Fraction(0), c  # K = 8 (even), or K > 8 and the chain goes on with Bernoulli(1/k)
    for k in range(9, 40):
        odd += reach * (1 - Fraction(1, k)) * (k % 2)
        reach *= Fraction(1, k)
    return odd


@pytest.mark.statistical
@pytest.mark.parametrize("j", [2, 5, 7, 8])
def test_a_tie_of_the_exp_minus_one_inversion_is_resolved_exactly(j: int) -> None:
    digit = 2**15 // math.factorial(j)
    hits = discrete_bulk.bernoulli_exp1(40_000, _FixedWords(digit | digit << 16 | digit << 32 | digit << 48))
    p = float(_exp1_given_digit(j))
    assert abs(hits.mean() - p) < 5 * math.sqrt(p * (1 - p) / 40_000) + 1e-9, (j, hits.mean(), p)


@pytest.mark.statistical
def test_bernoulli_exp1_frequency_and_a_broken_threshold_is_caught() -> None:
    p = math.exp(-1)
    hits = discrete_bulk.bernoulli_exp1(N, SeededRandom(12))
    assert abs(hits.mean() - p) < 5 * math.sqrt(p * (1 - p) / N)
    geometric = discrete_bulk.geometric_exp1(N, SeededRandom(13))
    assert _chi_square_p(geometric, {v: (1 - p) * p**v for v in range(30)}) > ALPHA


@pytest.mark.statistical
def test_the_law_test_catches_a_wrong_exp_minus_one_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = discrete_bulk._STOP_DIGITS.copy()  # noqa: SLF001
    wrong[1] = 2**15 // 5  # K > 3 with probability 1/5 instead of 1/3! = 1/6
    monkeypatch.setattr(discrete_bulk, "_STOP_DIGITS", wrong)
    monkeypatch.setattr(discrete_bulk, "_STOP_ASCENDING", wrong[-2::-1].copy())
    p = math.exp(-1)
    geometric = discrete_bulk.geometric_exp1(N, SeededRandom(13))
    assert _chi_square_p(geometric, {v: (1 - p) * p**v for v in range(30)}) < ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize(("numerator", "denominator"), [(1, 3), (5, 2**50 + 1), (2**49, 2**50 + 3)])
def test_bernoulli_fraction_frequency(numerator: int, denominator: int) -> None:
    hits = bernoulli_fraction(np.full(N, numerator, dtype=np.int64), denominator, SeededRandom(9))
    p = numerator / denominator
    assert abs(hits.mean() - p) < 5 * math.sqrt(p * (1 - p) / N) + 1 / N


def test_a_laplace_draw_beyond_int64_is_finished_on_python_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    geometric = discrete_bulk.geometric_exp1

    def one_huge(count: int, rng: RandomSource) -> np.ndarray:
        v = geometric(count, rng)
        v[0] = 2**61  # V of probability e^(−2⁶¹): U + t·V leaves the int64 range
        return v

    monkeypatch.setattr(discrete_bulk, "geometric_exp1", one_huge)
    samples = discrete_bulk.sample_discrete_laplace_array(Fraction(7, 2), 1000, SeededRandom(4))
    assert samples.dtype == object and samples.size == 1000
    huge = [int(y) for y in samples if abs(int(y)) >= 2**62]
    assert huge and all(7 * 2**61 // 2 <= abs(y) <= (7 * 2**61 + 6) // 2 for y in huge)


def test_a_sigma_beyond_the_sampler_is_refused_before_the_charge(make_session) -> None:
    with make_session() as s:
        before = s.ledger_path.read_bytes(), s.spent_epsilon()
        with pytest.raises(InvalidParameter, match="coarser grid"):  # σ/γ ≈ 4.5·10¹⁵ ≥ 2⁵¹ grid units
            s.gaussian(np.zeros(3), sensitivity=1.0, epsilon=1.0, delta=1e-6, grid=1e-15)
        assert (s.ledger_path.read_bytes(), s.spent_epsilon()) == before
        out = s.gaussian(np.zeros(3), sensitivity=1.0, epsilon=1.0, delta=1e-6, grid=1e-12)  # 4.5·10¹² passes
        assert out.shape == (3,)


def test_a_session_gaussian_array_release_goes_to_a_sidecar_with_the_calibrated_spread(make_session) -> None:
    values = np.linspace(-3.0, 3.0, 20_000).reshape(100, 200)
    with make_session(epsilon=5.0) as s:
        out = s.gaussian(values, sensitivity=1.0, epsilon=1.0, delta=1e-6, label="grid")
        (event,) = [c.event for c in s._charges.values()]  # noqa: SLF001
    records, _ = read_records(s.ledger_path)
    (release,) = [r.body for r in records if r.type == "release"]
    assert release["output"] is None and release["output_file"]["shape"] == [100, 200]
    assert np.array_equal(np.load(s.run_dir / release["output_file"]["path"]), out)
    noise = (out - values).ravel() / event.sigma  # unit variance (σ/γ ≈ 6·10³ grid units: granularity negligible)
    assert abs(noise.mean()) < 5 / math.sqrt(noise.size) and abs(noise.std() - 1) < 0.03
