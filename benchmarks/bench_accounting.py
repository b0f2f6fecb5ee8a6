"""Accounting speed: 10⁵ Poisson-subsampled-Gaussian steps per accountant, and the budget-filter pattern.

Prints seconds and the ratio to the RDP accountant measured in the same run (cold caches for each accountant:
the per-spec caches are cleared before each timing). Run: ``.venv/bin/python benchmarks/bench_accounting.py``.
"""

from __future__ import annotations

import time

from dpaudit.accounting import get_accountant, pld, prv, rdp
from dpaudit.events import LaplaceEvent, PoissonSubsampledGaussianEvent, compose
from dpaudit.mechanisms.grid import grid_sensitivity
from dpaudit.sensitivity import from_formula

DELTA = 1e-5
GRID = 1.0 / 1024


def _clear_caches() -> None:
    rdp.rdp_curve.cache_clear()
    pld.leaf_pld.cache_clear()
    pld.self_composed.cache_clear()
    prv.prv_bounds.cache_clear()


def _timed(fn) -> tuple[float, float]:
    _clear_caches()
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def dpsgd_steps() -> None:
    event = PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=256 / 60000, noise_multiplier=1.1, steps=100_000)
    print("10^5 DP-SGD steps (q = 256/60000, sigma = 1.1, delta = 1e-5), cold caches")
    ref = None
    for name in ("rdp", "pld", "prv", "tightest"):
        acc = get_accountant(name)
        seconds, eps = _timed(lambda acc=acc: acc.epsilon(event, DELTA))
        ref = ref or seconds
        print(f"  {name:9s} eps = {eps:.6f}  {seconds:8.3f} s  x{seconds / ref:7.1f} vs rdp")


def _laplace(epsilon: float) -> LaplaceEvent:
    sens = from_formula("count", "add_remove")
    delta_grid = grid_sensitivity(sens.value, GRID, 1, "l1")
    return LaplaceEvent(neighbouring="add_remove", sensitivity=sens, epsilon=epsilon,
                        scale=delta_grid * GRID / epsilon, grid=GRID)


def filter_pattern(n: int = 1000) -> None:
    """The budget filter's calls: ε of all releases so far plus the candidate, before every release."""
    print(f"{n} incremental releases through the filter pattern (Laplace, 3 alternating epsilons)")
    releases = [_laplace((0.002, 0.003, 0.005)[i % 3]) for i in range(n)]
    ref = None
    for name in ("rdp", "pld", "tightest"):
        acc = get_accountant(name)

        def run(acc=acc) -> float:
            eps = 0.0
            for i in range(1, n + 1):
                eps = acc.epsilon(compose(releases[:i]), DELTA)
            return eps

        seconds, eps = _timed(run)
        ref = ref or seconds
        print(f"  {name:9s} eps = {eps:.6f}  {seconds:8.3f} s  ({1e3 * seconds / n:.2f} ms/release)  "
              f"x{seconds / ref:7.1f} vs rdp")


if __name__ == "__main__":
    dpsgd_steps()
    filter_pattern()
