"""Budget-filter admission speed: one incremental release through the PLD filter against the RDP filter.

A session's filter composes every earlier charge with the candidate before each release. This benchmark charges two
patterns through :class:`~dpaudit.budget.BudgetFilter`, with the ``pld`` accountant and with the ``rdp`` accountant
(the floor: microseconds of Python per release), and prints the median admission time of each and their ratio:

* ``mix``: a discrete Laplace count at ε = 0.01, a one-dimensional discrete Gaussian at (0.05, 10⁻⁸) and one DP-SGD
  step at q = 0.01, σ = 1.0, in turn (the DP-SGD step's PLD spans about 28 000 loss values, so every composition
  is an FFT of that size);
* ``laplace``: discrete Laplace counts at ε = 0.002, 0.003, 0.005 in turn (``bench_accounting.py``'s filter
  pattern, the issue's 7.7 ms case).

Caches are cleared before each accountant. Run: ``.venv/bin/python benchmarks/bench_admission.py [releases]``
(default 200).
"""

from __future__ import annotations

import statistics
import sys
import time

from dpaudit.accounting import get_accountant, pld, rdp
from dpaudit.accounting.charges import LAST_TALLY
from dpaudit.budget import BudgetFilter
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent
from dpaudit.mechanisms.gaussian import gaussian_event
from dpaudit.mechanisms.laplace import laplace_event
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


PATTERNS = {"mix": typical_mix, "laplace": laplace_counts}


def admission_times(accountant: str, pattern: str, releases: int) -> tuple[list[float], float]:
    """Seconds per admission of ``releases`` charges of ``pattern`` (admit + commit), and the last bound."""
    rdp.rdp_curve.cache_clear()
    pld.leaf_pld.cache_clear()
    pld.self_composed.cache_clear()
    LAST_TALLY.clear()
    mix = PATTERNS[pattern]()
    budget = BudgetFilter(1e6, DELTA, get_accountant(accountant))
    times = []
    admission = None
    for i in range(releases):
        event = mix[i % len(mix)]
        start = time.perf_counter()
        admission = budget.admit(event)
        times.append(time.perf_counter() - start)
        budget.commit(event, admission)
    assert admission is not None
    return times, admission.epsilon


def main(releases: int) -> None:
    for pattern in PATTERNS:
        print(f"{releases} incremental releases ({pattern}) through BudgetFilter, delta = {DELTA:g}")
        floor = None
        for name in ("rdp", "pld"):
            times, eps = admission_times(name, pattern, releases)
            median = statistics.median(times)
            floor = floor or median
            print(f"  {name:4s} final eps = {eps:.6f}  median {1e3 * median:8.3f} ms/release  "
                  f"(first {1e3 * times[0]:.1f} ms, max {1e3 * max(times):.1f} ms)  x{median / floor:8.1f} vs rdp")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
