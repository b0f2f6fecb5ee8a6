"""How the choice of k moves the f-DP / Steinke ratio of the white-box DP-SGD audit, on simulated scores.

Scores of the white-box ("Dirac") canaries without interference, as in docs/audit.md's "idealised" column:
C·Bin(N, q)·x_i + N(0, σ²C²N), C = 1, m = 5,000, q = 0.4997, N = 10 (the default `dpaudit audit dpsgd` design),
σ = 1.984 (ε_cert = 3.997) and 1.203 (ε_cert = 7.968), δ = 1e-5, each test at level 0.025 (a 95% verdict over
both tests). Both tests as in the audit: Steinke et al.'s and Mahloujifar et al.'s against
``SubsampledGaussianFamily(q, N)``. Three ways of choosing the number of guesses k:

* **Bonferroni** (what the audit does): the 12 default rules, each at 0.025/12.
* **held-out split**: a random half of the canaries (independent of the bits) picks each test's rule from the
  default rules for m/2 (the Steinke rule by its ε_lb, the f-DP rule by its ε_lb in the Gaussian family, a fast
  proxy); the other half tests it once at 0.025. Valid when the two halves' scores are independent (here, by
  construction; in a real run interference couples them, so it is not offered by the audit).
* **pre-registered from the design**: before the run, the rule with the largest mean ε_lb over 10 simulated runs
  of the *claimed* mechanism (other seeds; f-DP by the Gaussian proxy) is fixed for each test, then tested once at
  0.025 on all m canaries. Valid for any mechanism: k depends on the public design only.

A second table asks whether a smaller sampling rate q (more steps N) raises the ratio (the f-DP test reads ε within
the subsampled family, whose ε at δ grows faster than what the summed-update score reveals as q falls): for each
(q, N) of :data:`OTHER_DESIGNS`, σ is bisected so that the family's *optimistic* ε at δ is 4 and 8 (a lower bound
on the accountant's, so σ is at most the one a run would be calibrated to), and the Bonferroni protocol is run.

A third table asks whether a stronger score or other guess rules raise the ratio, on the default design with the
Bonferroni protocol: the summed update (what the audit scores) against the per-step likelihood ratio
Σ_t log(1 − q + q·exp((2y_t − 1)/(2σ²))) of the canary's N per-step observations y_t = b_t + N(0, σ²) (the optimal
score when every iterate is seen, the threat model of the transcript's certificate); and the 12 symmetric rules
against 12 one-sided ("in" only) rules and both sets together (24 rules, each test at 0.025/24).

Run: ``.venv/bin/python experiments/audit_dpsgd_protocols.py [--seeds 5]`` (about 20 minutes on 2 busy cores).
Writes docs/experiments/audit-dpsgd-protocols.md.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from dpaudit.audit import (
    GaussianFamily,
    GuessRule,
    SubsampledGaussianFamily,
    default_rules,
    fdp_epsilon,
    outcomes,
    steinke_epsilon,
    sweep_bounds,
)
from dpaudit.audit.mechanism import per_test_level

M, STEPS, RATE, DELTA = 5000, 10, 0.4997, 1e-5
LEVEL = per_test_level(0.05)
PILOT = 10
#: (ε_cert, σ) of the default design, from docs/audit.md's measured table
SETTINGS = ((3.997, 1.984), (7.968, 1.203))
PROTOCOLS = ("bonferroni", "split", "design")
#: (q, N) of the second table: smaller sampling rates, more steps
OTHER_DESIGNS = ((0.25, 20), (0.1, 50), (0.05, 200))
OUT = Path(__file__).resolve().parent.parent / "docs" / "experiments"


def family(rate: float = RATE, steps: int = STEPS) -> SubsampledGaussianFamily:
    """The f-DP test's family: the Poisson-subsampled Gaussian at the design's (q, N)."""
    return SubsampledGaussianFamily(rate, steps)


def draw(sigma: float, seed: int, canaries: int = M, rate: float = RATE,
         steps: int = STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Scores C·Bin(N, q)·x + N(0, σ²C²N) (C = 1) and the membership bits."""
    rng = np.random.default_rng(seed)
    members = rng.integers(0, 2, canaries).astype(bool)
    return rng.binomial(steps, rate, canaries) * members + rng.normal(0.0, sigma * np.sqrt(steps), canaries), members


def calibrated_sigma(rate: float, steps: int, epsilon: float) -> float:
    """The σ (to 0.1%) whose family member has optimistic ε = ``epsilon`` at δ (module docstring)."""
    lo, hi = 0.3, 50.0  # ε above ``epsilon`` at lo, below at hi
    while hi / lo > 1.001:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if family(rate, steps).epsilon(1.0 / mid, DELTA) > epsilon else (lo, mid)
    return hi


def other_design_rows(seeds: int) -> list[str]:
    """The second table's rows: the Bonferroni protocol at each (q, N) of :data:`OTHER_DESIGNS`, ε 4 and 8."""
    rows = []
    for rate, steps in OTHER_DESIGNS:
        for epsilon in (4.0, 8.0):
            sigma = calibrated_sigma(rate, steps, epsilon)
            pairs = []
            for seed in range(seeds):
                steinke, fdp = sweep_bounds(*draw(sigma, seed, rate=rate, steps=steps), default_rules(M), delta=DELTA,
                                            family=family(rate, steps), level=LEVEL)
                pairs.append((steinke.epsilon, fdp.epsilon))
            rows.append(f"| {rate} | {steps} | {epsilon:g} | {sigma:.3f} | {summary(pairs)} |")
            print(rows[-1], flush=True)
    return rows


def per_step_scores(sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The default design's canaries seen step by step (C = 1): (summed score, per-step likelihood-ratio score,
    membership bits); module docstring."""
    rng = np.random.default_rng(seed)
    members = rng.integers(0, 2, M).astype(bool)
    steps = (rng.random((M, STEPS)) < RATE) & members[:, None]
    seen = steps + rng.normal(0.0, sigma, (M, STEPS))
    ratio = np.log1p(RATE * np.expm1((2.0 * seen - 1.0) / (2.0 * sigma**2))).sum(axis=1)
    return seen.sum(axis=1), ratio, members


def score_and_rule_rows(seeds: int) -> list[str]:
    """The third table's rows (module docstring)."""
    symmetric = default_rules(M)
    one_sided = tuple(GuessRule(rule.guess_in + rule.guess_out, 0) for rule in symmetric)
    variants = (("summed update", "12 symmetric", symmetric), ("per-step likelihood ratio", "12 symmetric", symmetric),
                ("summed update", "12 one-sided", one_sided), ("summed update", "24: both sets", symmetric + one_sided))
    rows = []
    for eps, sigma in SETTINGS:
        runs = [per_step_scores(sigma, seed) for seed in range(seeds)]
        for score, name, rules in variants:
            pairs = []
            for summed, ratio, members in runs:
                steinke, fdp = sweep_bounds(ratio if score.startswith("per-step") else summed, members, rules,
                                            delta=DELTA, family=family(), level=LEVEL)
                pairs.append((steinke.epsilon, fdp.epsilon))
            rows.append(f"| {eps} | {sigma} | {score} | {name} | {summary(pairs)} |")
            print(rows[-1], flush=True)
    return rows


def best_rules(scores: np.ndarray, members: np.ndarray, rules: tuple[GuessRule, ...],
               totals: np.ndarray | None = None) -> np.ndarray:
    """Per rule: (Steinke ε_lb, Gaussian-family f-DP ε_lb) at the per-test level, added to ``totals``."""
    values = np.array([[steinke_epsilon(c, DELTA, LEVEL), fdp_epsilon(GaussianFamily(), c, DELTA, LEVEL)]
                       for c in outcomes(scores, members, rules)]).T
    return values if totals is None else totals + values


def pre_register(sigma: float) -> tuple[GuessRule, GuessRule]:
    """Each test's rule from :data:`PILOT` simulations of the claimed mechanism (seeds 10⁷ + i)."""
    rules = default_rules(M)
    totals = np.zeros((2, len(rules)))
    for i in range(PILOT):
        totals = best_rules(*draw(sigma, 10**7 + i), rules, totals)
    return rules[int(np.argmax(totals[0]))], rules[int(np.argmax(totals[1]))]


def one_rule(scores: np.ndarray, members: np.ndarray, steinke_rule: GuessRule,
             fdp_rule: GuessRule) -> tuple[float, float]:
    """Both tests, each once at the full per-test level, on its own rule."""
    for_steinke, for_fdp = outcomes(scores, members, [steinke_rule, fdp_rule])
    return steinke_epsilon(for_steinke, DELTA, LEVEL), fdp_epsilon(family(), for_fdp, DELTA, LEVEL)


def run(sigma: float, seed: int, design: tuple[GuessRule, GuessRule]) -> dict[str, tuple[float, float]]:
    """(Steinke ε_lb, f-DP ε_lb) of each protocol on one simulated run."""
    scores, members = draw(sigma, seed)
    steinke, fdp = sweep_bounds(scores, members, default_rules(M), delta=DELTA, family=family(), level=LEVEL)
    half = np.random.default_rng(10**6 + seed).permutation(M)
    choose, test = half[: M // 2], half[M // 2:]
    rules = default_rules(M // 2)
    values = best_rules(scores[choose], members[choose], rules)
    split = one_rule(scores[test], members[test], rules[int(np.argmax(values[0]))], rules[int(np.argmax(values[1]))])
    return {"bonferroni": (steinke.epsilon, fdp.epsilon), "split": split, "design": one_rule(scores, members, *design)}


def summary(pairs: list[tuple[float, float]]) -> str:
    """Mean Steinke, mean f-DP, ratio of means and the per-run ratios' range."""
    steinke, fdp = (statistics.fmean(p[i] for p in pairs) for i in (0, 1))
    ratios = [f / s for s, f in pairs if s > 0]
    return f"{steinke:.2f} | {fdp:.2f} | {fdp / steinke:.2f} | {min(ratios):.2f}–{max(ratios):.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="simulated runs per setting (default 5)")
    args = parser.parse_args(argv)
    lines = ["# White-box DP-SGD audit: choosing k, on simulated scores without interference", "",
             "Generated by `experiments/audit_dpsgd_protocols.py` (setting and protocols in its docstring). m = 5,000,",
             f"q = {RATE}, N = {STEPS}, δ = 1e-5, each test at level 0.025; seeds 0..{args.seeds - 1}.", "",
             "| ε_cert | σ | protocol | k (Steinke / f-DP) | Steinke ε_lb, mean | f-DP ε_lb, mean | "
             "ratio of means | per-run ratio |", "|---|---|---|---|---|---|---|---|"]
    for eps, sigma in SETTINGS:
        design = pre_register(sigma)
        results = [run(sigma, seed, design) for seed in range(args.seeds)]
        ks = {"bonferroni": "12 rules", "split": "chosen on half",
              "design": " / ".join(str(r.guess_in + r.guess_out) for r in design)}
        for protocol in PROTOCOLS:
            lines.append(f"| {eps} | {sigma} | {protocol} | {ks[protocol]} | "
                         f"{summary([r[protocol] for r in results])} |")
            print(lines[-1], flush=True)
    lines += ["", "## Smaller sampling rates (Bonferroni protocol)", "",
              "σ calibrated so that the family's optimistic ε at δ = 1e-5 is ε (module docstring); m = 5,000, the 12 "
              f"default rules, each test at level 0.025; seeds 0..{args.seeds - 1}.", "",
              "| q | N | ε | σ | Steinke ε_lb, mean | f-DP ε_lb, mean | ratio of means | per-run ratio |",
              "|---|---|---|---|---|---|---|---|", *other_design_rows(args.seeds),
              "", "## Other scores and guess rules (Bonferroni protocol)", "",
              "The default design seen step by step (module docstring); each test at level 0.025 over the rules of "
              f"its row; seeds 0..{args.seeds - 1}.", "",
              "| ε_cert | σ | score | rules | Steinke ε_lb, mean | f-DP ε_lb, mean | ratio of means | per-run ratio |",
              "|---|---|---|---|---|---|---|---|", *score_and_rule_rows(args.seeds)]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "audit-dpsgd-protocols.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
