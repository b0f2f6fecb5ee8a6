"""Reproduce Table 1 of Mahloujifar, Melis & Chaudhuri 2025 (idealised Gaussian setting, their Algorithm 4).

Setting: m canaries, bits b ∈ {0, 1}^m fair and independent; the mechanism releases y = b + N(0, σ²I_m) (the
m-dimensional Gaussian sum, each canary adding one to its own coordinate: μ = 1/σ-GDP, sensitivity 1); the
optimal adversary scores canary i by y_i (the likelihood ratio is increasing in y_i) and guesses "in" for the k/2
highest and "out" for the k/2 lowest. δ = 1e-5, level 0.05. Rows: σ = 0.5, 1, 2 at m = 10⁵ and σ = 4 at m = 10⁶.
Tests: Steinke et al. 2023 ((ε, δ), :mod:`dpaudit.audit.steinke`), Mahloujifar et al.'s Algorithm 3 against
μ-GDP curves (:mod:`dpaudit.audit.fdp`, :class:`~dpaudit.audit.tradeoff.GaussianFamily`) and, as a third column,
the order-statistics test of Xiang et al. 2025 (:mod:`dpaudit.audit.order_stats`), valid here because the
idealised mechanism is a product of independent μ-GDP channels (and only then).

Choosing k (the number of guesses) — three protocols, all on the same evaluation runs:

* **pre-registered** (valid, the headline): k* is fixed *before* the evaluation runs, as the k of the grid with the
  largest mean ε_lb over ``PILOT`` pilot runs with other seeds; each evaluation run then tests once, at k*.
* **Bonferroni sweep** (valid, what :func:`dpaudit.audit.audit_mechanism` does): the best over the grid, each k at
  level 0.05/K.
* **uncorrected sweep** (NOT a valid bound; the maximum over the grid at level 0.05 each, shown because a reported
  number that is a maximum over k without correction is what this reproduces if the paper did so), on our grid and,
  for the f-DP test, on the grid of the FDP tutorial of Meta's PrivacyGuard (which implements the paper's
  Algorithm 3 and reports the arg-max over 50 log-spaced counts of one-sided guesses, 10 to m/2, uncorrected).

The order-statistics test is pre-registered the same way on its own coarser grid (:func:`order_grid`, up to k = m:
it releases the most confident guesses and needs no abstention to be tight).

How far one draw moves (:func:`spread`, the question of issue 18: is the paper's f-DP figure an expected value or one
draw?): ``DRAWS`` further draws (seeds 10⁷ + i) give the distribution of the f-DP ε_lb at the pre-registered k*, the
best *fixed* k in hindsight on an 80-point grid (the largest mean any k fixed before the outcome can have, up to the
optimism of choosing it on these same draws) and the distribution of the uncorrected tutorial-grid maximum, each
with the share of draws at or above the paper's figure.

Run: ``.venv/bin/python experiments/audit_idealised.py`` (9 minutes at load 3-4 on 2 cores, longer when busy). Writes
docs/experiments/audit-idealised.md and audit-idealised.csv. ``--runs N`` and ``--draws N`` change the numbers of
evaluation runs and of spread draws.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpaudit.audit import (
    GaussianFamily,
    GuessRule,
    count_guesses,
    fdp_epsilon,
    fdp_theta,
    outcomes,
    steinke_epsilon,
    sweep_bounds,
)
from dpaudit.audit.order_stats import order_stats_epsilon

DELTA = 1e-5
LEVEL = 0.05
PILOT = 10
#: draws behind the spread table (:func:`spread`) and the points of its fixed-k grid
DRAWS = 200
FINE = 80
OUT = Path(__file__).resolve().parent.parent / "docs" / "experiments"

#: (σ, m, theoretical, Steinke, theirs) from Mahloujifar et al. 2025, Table 1
PAPER = ((0.5, 10**5, 9.99, 4.99, 8.16), (1.0, 10**5, 4.37, 2.61, 3.61), (2.0, 10**5, 1.99, 1.33, 1.59),
         (4.0, 10**6, 0.92, 0.61, 0.82))


@dataclass(frozen=True)
class Row:
    """One row of the reproduction: means (and standard deviations) of ε_lb over the evaluation runs."""

    sigma: float
    canaries: int
    runs: int
    theory: float
    k_steinke: int
    k_fdp: int
    steinke: tuple[float, float]
    fdp: tuple[float, float]
    steinke_bonferroni: tuple[float, float]
    fdp_bonferroni: tuple[float, float]
    steinke_uncorrected: tuple[float, float]
    fdp_uncorrected: tuple[float, float]
    fdp_tutorial_max: tuple[float, float]
    k_order: int
    order: tuple[float, float]
    seconds_per_run: float
    spread: Spread


@dataclass(frozen=True)
class Spread:
    """The distribution of one draw's f-DP ε_lb (:func:`spread`); "at paper" is the share of draws ≥ the paper's figure.

    Attributes:
        draws: the number of draws.
        fdp: mean and standard deviation at the pre-registered k*.
        fdp_quantiles: median, 90th percentile and maximum at k*.
        fdp_at_paper: share of draws at k* at or above the paper's figure.
        k_best: the fixed k with the largest mean over the draws (chosen in hindsight).
        best: that mean.
        tutorial: mean and median of the uncorrected tutorial-grid maximum (not a valid bound).
        tutorial_at_paper: share of those maxima at or above the paper's figure.
    """

    draws: int
    fdp: tuple[float, float]
    fdp_quantiles: tuple[float, float, float]
    fdp_at_paper: float
    k_best: int
    best: float
    tutorial: tuple[float, float]
    tutorial_at_paper: float


def grid(canaries: int, points: int = 24) -> tuple[GuessRule, ...]:
    """Symmetric rules for k from 20 to m/5 (``points`` points, geometric)."""
    totals = sorted({2 * int(k // 2) for k in np.geomspace(20, canaries / 5, points)})
    return tuple(GuessRule(k // 2, k // 2) for k in totals)


def tutorial_grid(canaries: int) -> tuple[GuessRule, ...]:
    """PrivacyGuard's FDP tutorial grid: n = logspace(1, log10(m/2), 50) one-sided counts, n "in" + n "out" each."""
    ones = sorted({int(n) for n in np.logspace(1, np.log10(canaries // 2), 50)})
    return tuple(GuessRule(n, n) for n in ones)


def order_grid(canaries: int) -> tuple[GuessRule, ...]:
    """Symmetric rules for the order-statistics test: k from m/100 to m (8 points, geometric)."""
    totals = sorted({2 * int(k // 2) for k in np.geomspace(canaries / 100, canaries, 8)})
    return tuple(GuessRule(k // 2, k // 2) for k in totals)


def draw(sigma: float, canaries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 4's release: membership bits and y = b + N(0, σ²I)."""
    rng = np.random.default_rng(seed)
    members = rng.integers(0, 2, canaries).astype(bool)
    return members + rng.normal(0.0, sigma, canaries), members


def pre_register(sigma: float, canaries: int, rules: tuple[GuessRule, ...],
                 order_rules: tuple[GuessRule, ...]) -> tuple[GuessRule, GuessRule, GuessRule]:
    """k* for each test: the rule with the largest mean ε_lb over :data:`PILOT` pilot runs (seeds 10⁶ + i)."""
    family = GaussianFamily()
    totals = np.zeros((2, len(rules)))
    order_totals = np.zeros(len(order_rules))
    for i in range(PILOT):
        scores, members = draw(sigma, canaries, 10**6 + i)
        for j, counts in enumerate(outcomes(scores, members, rules)):
            totals[0, j] += steinke_epsilon(counts, DELTA, LEVEL)
            totals[1, j] += fdp_epsilon(family, counts, DELTA, LEVEL)
        for j, counts in enumerate(outcomes(scores, members, order_rules)):
            order_totals[j] += order_stats_epsilon(counts, DELTA, LEVEL)
    return (rules[int(np.argmax(totals[0]))], rules[int(np.argmax(totals[1]))],
            order_rules[int(np.argmax(order_totals))])


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def uncorrected_max(family: GaussianFamily, scores: np.ndarray, members: np.ndarray,
                    rules: tuple[GuessRule, ...]) -> float:
    """The largest f-DP ε_lb over ``rules``, each at the full level (no correction: not a valid bound)."""
    theta, _ = fdp_theta(family, outcomes(scores, members, rules), LEVEL)
    return family.epsilon(theta, DELTA) if theta > 0 else 0.0


def spread(sigma: float, canaries: int, k_fdp: GuessRule, paper: float, draws: int) -> Spread:
    """How far one draw of the f-DP ε_lb moves (module docstring), on seeds 10⁷ + i (disjoint from the others)."""
    family = GaussianFamily()
    rules, tutorial = grid(canaries, FINE), tutorial_grid(canaries)
    at_k, maxima, totals = [], [], np.zeros(len(rules))
    for i in range(draws):
        scores, members = draw(sigma, canaries, 10**7 + i)
        at_k.append(fdp_epsilon(family, count_guesses(scores, members, k_fdp), DELTA, LEVEL))
        totals += [fdp_epsilon(family, counts, DELTA, LEVEL) for counts in outcomes(scores, members, rules)]
        maxima.append(uncorrected_max(family, scores, members, tutorial))
    best = int(np.argmax(totals))
    return Spread(draws, mean_sd(at_k), tuple(float(q) for q in np.quantile(at_k, (0.5, 0.9, 1.0))),
                  float(np.mean(np.array(at_k) >= paper)), rules[best].guess_in + rules[best].guess_out,
                  float(totals[best] / draws), (statistics.fmean(maxima), statistics.median(maxima)),
                  float(np.mean(np.array(maxima) >= paper)))


def reproduce(sigma: float, canaries: int, runs: int, draws: int = DRAWS) -> Row:
    """One row of Table 1 and its spread table (module docstring)."""
    family = GaussianFamily()
    rules, tutorial = grid(canaries), tutorial_grid(canaries)
    k_steinke, k_fdp, k_order = pre_register(sigma, canaries, rules, order_grid(canaries))
    columns: dict[str, list[float]] = {name: [] for name in ("s", "f", "sb", "fb", "su", "fu", "ft", "o")}
    start = time.perf_counter()
    for seed in range(runs):
        scores, members = draw(sigma, canaries, seed)
        columns["s"].append(steinke_epsilon(count_guesses(scores, members, k_steinke), DELTA, LEVEL))
        columns["f"].append(fdp_epsilon(family, count_guesses(scores, members, k_fdp), DELTA, LEVEL))
        columns["o"].append(order_stats_epsilon(count_guesses(scores, members, k_order), DELTA, LEVEL))
        columns["ft"].append(uncorrected_max(family, scores, members, tutorial))
        for suffix, correction in (("b", "bonferroni"), ("u", "none")):
            steinke, fdp = sweep_bounds(scores, members, rules, delta=DELTA, family=family, level=LEVEL,
                                        correction=correction)
            columns["s" + suffix].append(steinke.epsilon)
            columns["f" + suffix].append(fdp.epsilon)
    elapsed = (time.perf_counter() - start) / runs
    paper = next(paper_fdp for s, _, _, _, paper_fdp in PAPER if s == sigma)
    return Row(sigma, canaries, runs, family.epsilon(1 / sigma, DELTA), k_steinke.guess_in + k_steinke.guess_out,
               k_fdp.guess_in + k_fdp.guess_out,
               *(mean_sd(columns[n]) for n in ("s", "f", "sb", "fb", "su", "fu", "ft")),
               k_order.guess_in + k_order.guess_out, mean_sd(columns["o"]), elapsed,
               spread(sigma, canaries, k_fdp, paper, draws))


def write(rows: list[Row]) -> None:
    """docs/experiments/audit-idealised.csv and .md."""
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "audit-idealised.csv", "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["sigma", "m", "runs", "theory", "paper_theory", "k_steinke", "steinke_mean", "steinke_sd",
                      "paper_steinke", "k_fdp", "fdp_mean", "fdp_sd", "paper_fdp", "steinke_bonferroni_mean",
                      "fdp_bonferroni_mean", "steinke_uncorrected_mean", "fdp_uncorrected_mean",
                      "fdp_tutorial_grid_max_mean", "k_order", "order_mean", "order_sd", "seconds_per_run",
                      "draws", "draw_fdp_mean", "draw_fdp_sd", "draw_fdp_median", "draw_fdp_p90", "draw_fdp_max",
                      "draw_fdp_share_at_paper", "k_best_fixed", "best_fixed_mean", "draw_tutorial_max_mean",
                      "draw_tutorial_max_median", "draw_tutorial_max_share_at_paper"])
        for r, (_, _, p_theory, p_steinke, p_fdp) in zip(rows, PAPER, strict=False):
            out.writerow([r.sigma, r.canaries, r.runs, f"{r.theory:.4f}", p_theory, r.k_steinke,
                          f"{r.steinke[0]:.4f}", f"{r.steinke[1]:.4f}", p_steinke, r.k_fdp, f"{r.fdp[0]:.4f}",
                          f"{r.fdp[1]:.4f}", p_fdp, f"{r.steinke_bonferroni[0]:.4f}", f"{r.fdp_bonferroni[0]:.4f}",
                          f"{r.steinke_uncorrected[0]:.4f}", f"{r.fdp_uncorrected[0]:.4f}",
                          f"{r.fdp_tutorial_max[0]:.4f}", r.k_order, f"{r.order[0]:.4f}", f"{r.order[1]:.4f}",
                          f"{r.seconds_per_run:.3f}", r.spread.draws,
                          *(f"{v:.4f}" for v in (*r.spread.fdp, *r.spread.fdp_quantiles, r.spread.fdp_at_paper)),
                          r.spread.k_best,
                          *(f"{v:.4f}" for v in (r.spread.best, *r.spread.tutorial, r.spread.tutorial_at_paper))])
    lines = [
        "# Idealised Gaussian audit: Mahloujifar, Melis & Chaudhuri 2025, Table 1, reproduced",
        "",
        "Generated by `experiments/audit_idealised.py` (setting, protocols and the choice of k in its docstring and",
        "in [docs/audit.md](../audit.md)). δ = 1e-5, 95% confidence. ε_lb is the mean ± standard deviation over the",
        "evaluation runs (seeds 0..runs−1); k* is the pre-registered number of guesses (half \"in\", half \"out\").",
        "The order-statistics test (Xiang et al. 2025) is valid here only because the mechanism is a product of",
        "independent Gaussian channels; \"tutorial grid\" is the uncorrected arg-max over the 50-point grid of",
        "PrivacyGuard's FDP tutorial (invalid as a bound).",
        "",
        "| σ | m | runs | theoretical (ours / paper) | Steinke, k* pre-registered (ours / paper) | k* | "
        "f-DP, k* pre-registered (ours / paper) | k* | order statistics, k* pre-registered | k* | "
        "Steinke / f-DP, Bonferroni sweep | Steinke / f-DP, uncorrected sweep (invalid) | "
        "f-DP, uncorrected max, tutorial grid (invalid) | s per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, (_, _, p_theory, p_steinke, p_fdp) in zip(rows, PAPER, strict=False):
        lines.append(
            f"| {r.sigma:g} | {r.canaries:.0e} | {r.runs} | {r.theory:.3f} / {p_theory} | "
            f"{r.steinke[0]:.2f} ± {r.steinke[1]:.2f} / {p_steinke} | {r.k_steinke} | "
            f"{r.fdp[0]:.2f} ± {r.fdp[1]:.2f} / {p_fdp} | {r.k_fdp} | "
            f"{r.order[0]:.2f} ± {r.order[1]:.2f} | {r.k_order} | "
            f"{r.steinke_bonferroni[0]:.2f} / {r.fdp_bonferroni[0]:.2f} | "
            f"{r.steinke_uncorrected[0]:.2f} / {r.fdp_uncorrected[0]:.2f} | {r.fdp_tutorial_max[0]:.2f} | "
            f"{r.seconds_per_run:.2f} |")
    lines += [
        "",
        "## How far one draw moves",
        "",
        "The f-DP ε_lb of single draws (seeds 10⁷ + i, disjoint from the pilot and evaluation seeds) at the",
        "pre-registered k* above; the best *fixed* k in hindsight on an 80-point grid (k from 20 to m/5) with its mean",
        "over the same draws (no k fixed before the outcome does better on average, up to the optimism of picking it",
        "here); and the uncorrected maximum over the tutorial grid (invalid as a bound). \"≥ paper\": the share of",
        "draws at or above the paper's f-DP figure.",
        "",
        "| σ | m | draws | f-DP at k*: mean ± sd | median / 90th percentile / max | ≥ paper | "
        "best fixed k (hindsight): k, mean | uncorrected tutorial-grid max: mean / median | ≥ paper |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, (_, _, _, _, p_fdp) in zip(rows, PAPER, strict=False):
        d = r.spread
        lines.append(
            f"| {r.sigma:g} | {r.canaries:.0e} | {d.draws} | {d.fdp[0]:.2f} ± {d.fdp[1]:.2f} | "
            f"{' / '.join(f'{q:.2f}' for q in d.fdp_quantiles)} | {d.fdp_at_paper:.1%} (≥ {p_fdp}) | "
            f"{d.k_best}, {d.best:.2f} | {d.tutorial[0]:.2f} / {d.tutorial[1]:.2f} | {d.tutorial_at_paper:.1%} |")
    (OUT / "audit-idealised.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="evaluation runs per row (default 20)")
    parser.add_argument("--draws", type=int, default=DRAWS, help=f"draws behind the spread table (default {DRAWS})")
    args = parser.parse_args(argv)
    rows = []
    for sigma, canaries, *_ in PAPER:
        rows.append(reproduce(sigma, canaries, args.runs, args.draws))
        print(rows[-1], flush=True)
    write(rows)


if __name__ == "__main__":
    main()
