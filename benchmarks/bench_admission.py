"""Budget-filter admission speed: one incremental release through the PLD filter against the RDP filter.

A session's filter composes every earlier charge with the candidate before each release. This benchmark charges three
patterns through :class:`~dpaudit.budget.BudgetFilter`, with the ``rdp`` accountant (the floor: microseconds of Python
per release), the ``pld`` accountant of fold ``pld/3`` (one grid: the admission before ``pld/4``) and the current
``pld``, and prints the median admission time of each and its ratio to the RDP filter's:

* ``mix``: a discrete Laplace count at ε = 0.01, a one-dimensional discrete Gaussian at (0.05, 10⁻⁸) and one DP-SGD
  step at q = 0.01, σ = 1.0, in turn (the DP-SGD step's PLD spans about 28 000 loss values, so every composition
  is an FFT of that size);
* ``dpsgd``: one DP-SGD step (q = 0.01, σ = 1.0) per charge, the same step again and again (a training loop that
  charges every step: one growing run of the canonical fold);
* ``laplace``: discrete Laplace counts at ε = 0.002, 0.003, 0.005 in turn (``bench_accounting.py``'s filter
  pattern, the issue's 7.7 ms case).

Caches are cleared before each accountant. The ``pld`` accountant (fold ``pld/4``) admits on the reading of its fold on
a grid 16 times coarser than the certified one's finest (``pld.ADMISSION_INTERVAL``), an upper bound on the ε it
certifies (the smaller of the two grids' readings); each pattern prints the last admitted bound and the ε certified
for the same charges (both grids from scratch). For ``dpsgd`` it also prints the fine grid's floor: the middle
admission's two FFT convolutions on the fine grid alone (what ``pld/3`` paid at least).

``--grid-gap`` prints how much looser the coarse grid's reading is than the fine grid's (the admission bound against
the certified ε) for a few compositions: 1000 DP-SGD steps charged one at a time, the MNIST tutorial's training as one
event, pure-DP leaves, Laplace counts, the mix.

Scaling with the number of earlier charges (the default accountant, ``tightest``): the median admission time of one
more Laplace count (ε = 10⁻⁴) and of one more discrete Gaussian count ((10⁻³, 10⁻¹²)) after n = 10², 10³, 10⁴ earlier
charges of the same kind, each printed as a ratio to its n = 10² time (flat: about 1); then the time to build whole
sessions of 10³ and ``--session`` Laplace releases (fsync patched out, no mirror: the ledger's disk is not what is
measured), per release and as a ratio of the two.

Run: ``.venv/bin/python benchmarks/bench_admission.py [--releases 200] [--session 20000] [--admission-only]
[--grid-gap]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from scipy import signal

from dpaudit import Session
from dpaudit.accounting import get_accountant, pld, rdp
from dpaudit.accounting.charges import LAST_TALLY, event_counts
from dpaudit.budget import BudgetFilter
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent, compose
from dpaudit.mechanisms.exponential import exponential_event
from dpaudit.mechanisms.gaussian import gaussian_event
from dpaudit.mechanisms.laplace import laplace_event
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.sensitivity import Neighbouring, from_formula

DELTA = 1e-5


def typical_mix() -> tuple[PrivacyEvent, ...]:
    """A Laplace count, a discrete Gaussian count and one DP-SGD step (calibrated once, charged in turn)."""
    count = from_formula("count", "add_remove")
    step = PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=0.01, noise_multiplier=1.0, steps=1)
    return (laplace_event(Neighbouring.ADD_REMOVE, count, 0.01),
            gaussian_event(Neighbouring.ADD_REMOVE, count, 0.05, 1e-8), step)


def laplace_counts() -> tuple[PrivacyEvent, ...]:
    """Laplace counts at three ε in turn."""
    count = from_formula("count", "add_remove")
    return tuple(laplace_event(Neighbouring.ADD_REMOVE, count, eps) for eps in (0.002, 0.003, 0.005))


def dpsgd_steps() -> tuple[PrivacyEvent, ...]:
    """The DP-SGD step of :func:`typical_mix` alone (charged again and again)."""
    return typical_mix()[2:]


PATTERNS = {"mix": typical_mix, "dpsgd": dpsgd_steps, "laplace": laplace_counts}


def admission_times(accountant: str, pattern: str, releases: int, version: str | None = None
                    ) -> tuple[list[float], list[float], float, tuple[PrivacyEvent, ...]]:
    """Seconds per admission of ``releases`` charges of ``pattern`` (admit + commit) with the named accountant (of the
    recorded ``version``, e.g. ``"pld/3"``: None for the current one), wall and process CPU time, the last bound and
    the charged events."""
    rdp.rdp_curve.cache_clear()
    pld.leaf_pld.cache_clear()
    pld.self_composed.cache_clear()
    pld.run_pld.cache_clear()
    LAST_TALLY.clear()
    mix = PATTERNS[pattern]()
    budget = BudgetFilter(1e6, DELTA, get_accountant(accountant, version))
    times, cpu = [], []
    admission = None
    for i in range(releases):
        event = mix[i % len(mix)]
        start, start_cpu = time.perf_counter(), time.process_time()
        admission = budget.admit(event)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        budget.commit(event, admission)
    assert admission is not None
    return times, cpu, admission.epsilon, budget.events


def convolution_floor(events: tuple[PrivacyEvent, ...], samples: int = 20) -> float:
    """Median seconds of the one FFT convolution an incremental admission on the fine grid alone (fold ``pld/3``)
    cannot avoid: the composed PLD of ``events`` but the last with the last one's PLD (``scipy.signal.fftconvolve``
    of their remove and of their add PMFs, nothing else). For a single DP-SGD step as the last event."""
    composed = pld.FoldCache().fold(events[:-1]).pld()
    (spec,) = event_counts(events[-1])
    step = pld.leaf_pld(spec, True, pld.VALUE_DISCRETIZATION_INTERVAL)
    pairs = [(composed._pmf_remove.to_dense_pmf()._probs, step._pmf_remove.to_dense_pmf()._probs),
             (composed._pmf_add.to_dense_pmf()._probs, step._pmf_add.to_dense_pmf()._probs)]
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for first, second in pairs:
            signal.fftconvolve(first, second)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def scaling(event: PrivacyEvent, sizes: tuple[int, ...] = (100, 1000, 10000), samples: int = 50) -> list[float]:
    """Median seconds of one admission of ``event`` (not committed) after each of ``sizes`` earlier charges of it."""
    budget = BudgetFilter(1e6, DELTA, get_accountant("tightest"))
    medians = []
    for size in sizes:
        while len(budget.events) < size:
            budget.commit(event, budget.admit(event))
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            budget.admit(event)
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return medians


def session_build(releases: int) -> float:
    """Seconds to open a session, charge and release ``releases`` Laplace counts and close it (fsync patched out)."""
    count = from_formula("count", "add_remove")
    with tempfile.TemporaryDirectory(prefix="dpaudit-bench-admission-") as tmp:
        start = time.perf_counter()
        with mock.patch("os.fsync"), Session(epsilon=1e9, delta=1e-6, rng=SeededRandom(0), mirror=False,
                                             store=Path(tmp)) as s:
            for i in range(releases):
                s.laplace(float(i), count, epsilon=0.01, label="count")
        return time.perf_counter() - start


def grid_gap() -> None:
    """The coarse grid's reading (the admission bound) against the fine grid's (``pld/3``, the certified ε wherever
    the coarse one is larger) for a few compositions."""
    step = dpsgd_steps()[0]
    mnist = PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=256 / 60000, noise_multiplier=1.1, steps=14040)
    cases = {"DP-SGD q = 0.01, sigma = 1: 1000 steps one per charge": [step] * 1000,
             "MNIST tutorial (q = 256/60000, sigma = 1.1, 14040 steps) as one event": [mnist],
             "pure epsilon = 0.5 leaves (the demo's AboveThreshold rounds), 8 of them": [exponential_event(
                 Neighbouring.ADD_REMOVE, from_formula("count", "add_remove"), 0.5, n_candidates=10)] * 8,
             "Laplace counts at 0.002, 0.003, 0.005, 100 each in turn": list(laplace_counts()) * 100,
             "Laplace count at 0.1, 50 times": [laplace_event(Neighbouring.ADD_REMOVE, from_formula(
                 "count", "add_remove"), 0.1)] * 50,
             "mix (Laplace, discrete Gaussian, DP-SGD step), 70 times": list(typical_mix()) * 70}
    print(f"coarse grid (interval {pld.ADMISSION_INTERVAL:g}) against the fine grid (interval "
          f"{pld.VALUE_DISCRETIZATION_INTERVAL:g}), delta = {DELTA:g}")
    for name, events in cases.items():
        event = compose(events)
        fine = get_accountant("pld", "pld/3").epsilon(event, DELTA)
        coarse, _ = get_accountant("pld").admission_bound(event, DELTA)
        print(f"  {name}: fine {fine:.6f}, coarse {coarse:.6f} (x{coarse / fine:.5f})")


def main(releases: int, session: int, admission_only: bool) -> None:
    for pattern in PATTERNS:
        print(f"{releases} incremental releases ({pattern}) through BudgetFilter, delta = {DELTA:g}")
        floor = None
        for name, version in (("rdp", None), ("pld", "pld/3"), ("pld", None)):
            times, cpu, eps, events = admission_times(name, pattern, releases, version)
            median = statistics.median(times)
            floor = floor or median
            certified = get_accountant(name, version).epsilon(compose(list(events)), DELTA)
            print(f"  {version or name:5s} last admitted eps = {eps:.6f} (certified {certified:.6f})  median "
                  f"{1e3 * median:8.3f} "
                  f"ms/release (CPU {1e3 * statistics.median(cpu):.3f} ms)  (first {1e3 * times[0]:.1f} ms, max "
                  f"{1e3 * max(times):.1f} ms)  x{median / floor:8.1f} vs rdp")
        if pattern == "dpsgd":
            fft = convolution_floor(events[: len(events) // 2 + 1])  # the middle admission's
            print(f"  fine grid's floor: the middle admission's FFT convolution alone (remove and add) {1e3 * fft:.3f} "
                  f"ms; pld = x{median / fft:.2f} of it")
    if admission_only:
        return
    count = from_formula("count", "add_remove")
    sizes = (100, 1000, 10000)
    print("admission after n earlier charges (tightest accountant, median of 50; ratio to n = 100)")
    for name, event in (("laplace", laplace_event(Neighbouring.ADD_REMOVE, count, 1e-4)),
                        ("gaussian", gaussian_event(Neighbouring.ADD_REMOVE, count, 1e-3, 1e-12))):
        medians = scaling(event, sizes)
        print(f"  {name:8s} " + "  ".join(f"n={n}: {1e3 * m:.4f} ms (x{m / medians[0]:.2f})"
                                          for n, m in zip(sizes, medians, strict=True)))
    small = session_build(1000)
    large = session_build(session)
    print(f"session build: 1000 releases {small:.2f} s ({1e3 * small / 1000:.3f} ms/release), {session} releases "
          f"{large:.2f} s ({1e3 * large / session:.3f} ms/release): x{(large / session) / (small / 1000):.2f} "
          "per release")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=200, help="releases per PLD-vs-RDP pattern")
    parser.add_argument("--session", type=int, default=20000, help="releases of the large session build")
    parser.add_argument("--admission-only", action="store_true", help="only the PLD-vs-RDP patterns")
    parser.add_argument("--grid-gap", action="store_true", help="only the coarse grid's reading against the fine one")
    args = parser.parse_args()
    if args.grid_gap:
        grid_gap()
    else:
        main(args.releases, args.session, args.admission_only)
