"""Reproduce Figures 3 and 4 of Ding, Wu, Xu & Pan 2023 (constant-overhead DP hyperparameter tuning), Sec. 4.2.

SYNTHETIC data, no privacy claim: |S| = 100 utilities drawn uniformly from (0, 1), 10 repeats per setting. The
loop is the plugin's own :func:`dpaudit_plugins.constant_overhead.loop.run_elastic_loop` with the plugin's own noise
(:class:`dpaudit.mechanisms.above_threshold.AboveThreshold` calibrated by
:func:`dpaudit.mechanisms.above_threshold.calibrate_above_threshold` for sensitivity Δ = 1/k and ϵ per round, i.e.
Lap(2/(kϵ)) on the threshold and Lap(4/(kϵ)) on each query), driven by a seeded generator outside any session.

* Figure 4: iterations T versus n = (u* − u₀)/g with u* = max_s u_s, u₀ = 0 and g = u*/n for
  n ∈ {2, 4, ..., 4096}; no iteration cap (10⁴). Fit T ≈ a·ln n (least squares through the origin on the means).
* Figure 3: fidelity α_t = u_{s*(t)}/u* over iterations t (α_t = 0 while nothing has passed; after the loop
  ends α stays at its last value), u₀ = 0, g = 0.01.

Both use kϵ ∈ {0.5, 5, 10} (the paper's) and, beyond the paper, kϵ = 100 and kϵ = 10⁵ (almost the
"non-randomized world" of its Lemma 1).

Run: ``.venv/bin/python experiments/ding_figures.py`` (about a minute on 2 cores). Writes
docs/experiments/ding-figures.md, ding-figures.csv, ding-fig3.png and ding-fig4.png (the plots only if matplotlib
is installed).
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dpaudit.mechanisms.above_threshold import AboveThreshold, calibrate_above_threshold
from dpaudit.mechanisms.grid import default_grid
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit_plugins.constant_overhead.loop import LoopResult, run_elastic_loop
from dpaudit_plugins.constant_overhead.proposers import GridProposer

OUT = Path(__file__).resolve().parents[1] / "docs" / "experiments"
N_CANDIDATES = 100
REPEATS = 10
K = 10  # partitions; only the product kϵ matters (up to the grid rounding)
K_EPSILONS = (0.5, 5.0, 10.0, 100.0, 1e5)  # the paper's three, then two beyond it (1e5: almost noiseless)
NS = tuple(2**j for j in range(1, 13))
FIDELITY_G = 0.01
NO_CAP = 10_000
FIDELITY_STEPS = 40


def round_factory(k_epsilon: float, rng: SeededRandom) -> Callable[[float], AboveThreshold]:
    """Rounds with the plugin's noise for Δ = 1/K and ϵ = kϵ/K, from a seeded (NOT secure) generator."""
    sensitivity = 1.0 / K
    grid = default_grid(sensitivity)
    t_scale, q_scale = calibrate_above_threshold(k_epsilon / K, sensitivity, grid)
    return lambda threshold: AboveThreshold(threshold, t_scale, q_scale, grid, N_CANDIDATES, rng)


def synthetic_run(utilities: np.ndarray, k_epsilon: float, u0: float, g: float, seed: int) -> LoopResult[int]:
    """One run of the plugin's loop on SYNTHETIC utilities (candidates are indices 0..|S|-1)."""
    proposer = GridProposer(range(len(utilities)))
    return run_elastic_loop(proposer, lambda s: float(utilities[s]), round_factory(k_epsilon, SeededRandom(seed)),
                            u0=u0, g=g, t_max=NO_CAP, max_batch=len(utilities))


def fidelity_curve(result: LoopResult[int], utilities: np.ndarray, steps: int) -> np.ndarray:
    """α_t for t = 1..steps (0 before any selection; the last value after the loop ended)."""
    best = float(utilities.max())
    alphas = [0.0 if it.state.selected is None else float(utilities[it.state.selected]) / best
              for it in result.iterations]
    alphas += [alphas[-1]] * max(0, steps - len(alphas))
    return np.asarray(alphas[:steps])


def figure4() -> dict[float, np.ndarray]:
    """T[kϵ][repeat, n index]."""
    out = {}
    for ke in K_EPSILONS:
        T = np.zeros((REPEATS, len(NS)))
        for r in range(REPEATS):
            utilities = np.random.default_rng(1000 + r).uniform(0.0, 1.0, N_CANDIDATES)
            u_star = float(utilities.max())
            for j, n in enumerate(NS):
                T[r, j] = synthetic_run(utilities, ke, 0.0, u_star / n, seed=10_000 * r + j).realised_iterations
        out[ke] = T
    return out


def figure3() -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """(α[repeat, t], T[repeat]) per kϵ."""
    out = {}
    for ke in K_EPSILONS:
        alphas, T = [], []
        for r in range(REPEATS):
            utilities = np.random.default_rng(2000 + r).uniform(0.0, 1.0, N_CANDIDATES)
            result = synthetic_run(utilities, ke, 0.0, FIDELITY_G, seed=50_000 + r)
            alphas.append(fidelity_curve(result, utilities, FIDELITY_STEPS))
            T.append(result.realised_iterations)
        out[ke] = (np.vstack(alphas), np.asarray(T))
    return out


def fit_log(ns: tuple[int, ...], mean_T: np.ndarray, log: Callable[[float], float]) -> float:
    """a minimising Σ (T_n − a·log n)² (least squares through the origin)."""
    x = np.array([log(n) for n in ns])
    return float(x @ mean_T / (x @ x))


def write_outputs(fig4: dict[float, np.ndarray], fig3: dict[float, tuple[np.ndarray, np.ndarray]]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "ding-figures.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["figure", "k_epsilon", "n_or_t", "mean", "std"])
        for ke, T in fig4.items():
            for j, n in enumerate(NS):
                w.writerow(["4:T", ke, n, f"{T[:, j].mean():.4f}", f"{T[:, j].std():.4f}"])
        for ke, (alphas, _) in fig3.items():
            for t in range(FIDELITY_STEPS):
                w.writerow(["3:alpha", ke, t + 1, f"{alphas[:, t].mean():.4f}", f"{alphas[:, t].std():.4f}"])
    (OUT / "ding-figures.md").write_text(markdown(fig4, fig3))
    plot(fig4, fig3)


def markdown(fig4: dict[float, np.ndarray], fig3: dict[float, tuple[np.ndarray, np.ndarray]]) -> str:
    lines = [
        "# Ding et al. 2023, Figures 3 and 4, reproduced (SYNTHETIC utilities)",
        "",
        "Generated by `experiments/ding_figures.py`; do not edit by hand. SYNTHETIC data: |S| = 100 utilities drawn",
        f"uniformly from (0, 1), {REPEATS} repeats per setting, the plugin's own loop "
        "(`dpaudit_plugins.constant_overhead.loop.run_elastic_loop`)",
        "and noise (threshold Lap(2/(kϵ)), queries Lap(4/(kϵ)), Δ = 1/k) from a seeded generator outside any",
        "session: these runs make no privacy claim. Raw numbers: `ding-figures.csv`.",
        "",
        "## Figure 4: iterations T versus n = (u* − u₀)/g",
        "",
        "u* = max_s u_s, u₀ = 0, g = u*/n (so n is exact), no iteration cap. Mean ± standard deviation of T over "
        f"{REPEATS} repeats.",
        "",
        "| n | ln n | " + " | ".join(f"T (kϵ = {ke:g})" for ke in fig4) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in fig4) + " |",
    ]
    for j, n in enumerate(NS):
        lines.append(f"| {n} | {math.log(n):.2f} | " + " | ".join(
            f"{T[:, j].mean():.1f} ± {T[:, j].std():.1f}" for T in fig4.values()) + " |")
    lines += ["", "Least-squares fit T ≈ a·log n through the origin (on the means):", "",
              "| kϵ | a (natural log) | a (log₂) | paper |", "| ---: | ---: | ---: | --- |"]
    for ke, T in fig4.items():
        lines.append(f"| {ke:g} | {fit_log(NS, T.mean(axis=0), math.log):.2f} | "
                     f"{fit_log(NS, T.mean(axis=0), math.log2):.2f} | "
                     f"{'a between 1 and 5, about 3' if ke <= 10 else '(not in the paper)'} |")
    lines += ["", "## Figure 3: fidelity α_t = u_{s*(t)}/u* over iterations", "",
              f"u₀ = 0, g = {FIDELITY_G}, no iteration cap. Mean ± standard deviation over {REPEATS} repeats "
              "(α_t = 0 while nothing has passed; after the loop ends, its last value).", "",
              "| t | " + " | ".join(f"α_t (kϵ = {ke:g})" for ke in fig3) + " |",
              "| ---: | " + " | ".join("---:" for _ in fig3) + " |"]
    for t in (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40):
        if t <= FIDELITY_STEPS:
            lines.append(f"| {t} | " + " | ".join(
                f"{a[:, t - 1].mean():.3f} ± {a[:, t - 1].std():.3f}" for a, _ in fig3.values()) + " |")
    lines += ["", "| kϵ | final α_T (mean ± sd) | min α_T | realised T (mean ± sd) | paper |",
              "| ---: | ---: | ---: | ---: | --- |"]
    paper = {0.5: "unlikely to reach a reasonable fidelity", 5.0: "stable, converges towards 1 rapidly",
             10.0: "stable, converges towards 1 rapidly", 100.0: "(not in the paper)", 1e5: "(not in the paper)"}
    for ke, (alphas, T) in fig3.items():
        final = alphas[:, -1]
        lines.append(f"| {ke:g} | {final.mean():.3f} ± {final.std():.3f} | {final.min():.3f} | "
                     f"{T.mean():.1f} ± {T.std():.1f} | {paper.get(ke, '')} |")
    lines += ["", "The paper gives these results as plots only (no tables), so the comparison is with the statements "
              "in its Sec. 4.2.", ""]
    return "\n".join(lines)


def plot(fig4: dict[float, np.ndarray], fig3: dict[float, tuple[np.ndarray, np.ndarray]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: tables and CSV only", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(5, 4))
    for ke, T in fig4.items():
        ax.errorbar(NS, T.mean(axis=0), yerr=T.std(axis=0), marker="o", capsize=3, label=f"kϵ = {ke:g}")
    for c in (1, 3, 5):
        ax.plot(NS, [c * math.log(n) for n in NS], "--", color="grey", alpha=0.4 + 0.1 * c)
        ax.annotate(f"{c}·ln n", (NS[-1], c * math.log(NS[-1])), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="n = (u* − u₀)/g", ylabel="iterations T", title="Ding et al. Fig. 4 (synthetic)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "ding-fig4.png", dpi=120)
    fig, ax = plt.subplots(figsize=(5, 4))
    steps = np.arange(1, FIDELITY_STEPS + 1)
    for ke, (alphas, _) in fig3.items():
        m, s = alphas.mean(axis=0), alphas.std(axis=0)
        ax.plot(steps, m, label=f"kϵ = {ke:g}")
        ax.fill_between(steps, m - s, m + s, alpha=0.2)
    ax.set(xlabel="iteration t", ylabel="fidelity α_t = u_s*/u*", title="Ding et al. Fig. 3 (synthetic)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "ding-fig3.png", dpi=120)


def main() -> None:
    fig4 = figure4()
    fig3 = figure3()
    write_outputs(fig4, fig3)
    print((OUT / "ding-figures.md").read_text())


if __name__ == "__main__":
    main()
