"""Measure the mechanism tester (:func:`dpaudit.audit.audit_mechanism`): false positives and bug detection.

Three settings, m = 1000 canaries, claimed (ε, δ) = (1, 1e-5), the default Bonferroni sweep (9 rules), each of
the two tests at 97.5% so that the verdict (refuted if either rejects) holds at 95%; the f-DP test with the
Gaussian family and with the assumption-free (ε, δ) family:

* **null** (no canary signal): the mechanism's output is pure noise, independent of the canaries, so it is 0-DP and
  every ε_lb > 0 is a false positive. Also reported: the uncorrected sweep on the same outcomes (the invalid
  variant), whose false-positive rate exceeds 5%.
* **broken**: claims (1, 1e-5)-DP for sensitivity 1 but adds σ/8 Gaussian noise, σ the analytic-Gaussian σ of that
  claim (so it is really about 2.1-GDP, ε ≈ 10). Refuted when ε_lb > 1.
* **session Gaussian**: the session's own discrete Gaussian mechanism at (1, 1e-5), charged, ledgered and released
  through a seeded :class:`~dpaudit.Session`; refuting it would be a false refutation.

Run: ``.venv/bin/python experiments/audit_mechanism.py`` (a few minutes on 2 busy cores). Writes
docs/experiments/audit-mechanism.md and audit-mechanism.csv.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np

from dpaudit import Session
from dpaudit.audit import GaussianFamily, MechanismAudit, audit_mechanism, membership, sweep_bounds
from dpaudit.mechanisms.gaussian import analytic_gaussian_sigma
from dpaudit.mechanisms.randomness import SeededRandom

M, EPSILON, DELTA = 1000, 1.0, 1e-5
OUT = Path(__file__).resolve().parent.parent / "docs" / "experiments"


def null_setting(runs: int) -> dict[str, float]:
    """False-positive rates (ε_lb > 0), corrected and uncorrected, when the output ignores the canaries."""
    gaussian, free = MechanismAudit(M, EPSILON, DELTA, family=GaussianFamily()), MechanismAudit(M, EPSILON, DELTA)
    hits = dict.fromkeys(("steinke", "fdp_gaussian", "fdp_free", "steinke_uncorrected", "fdp_gaussian_uncorrected"),
                         0)
    start = time.perf_counter()
    for seed in range(runs):
        noise = np.random.default_rng(seed)
        report = audit_mechanism(lambda x, n=noise: n.normal(size=x.shape), gaussian, SeededRandom(seed))
        hits["steinke"] += report.steinke.epsilon > 0
        hits["fdp_gaussian"] += report.fdp.epsilon > 0
        noise = np.random.default_rng(seed)
        hits["fdp_free"] += audit_mechanism(lambda x, n=noise: n.normal(size=x.shape), free,
                                            SeededRandom(seed)).fdp.epsilon > 0
        members = membership(M, SeededRandom(seed))
        scores = np.random.default_rng(seed).normal(size=M)
        steinke, fdp = sweep_bounds(scores, members, gaussian.rules, delta=DELTA, family=GaussianFamily(),
                                    correction="none")
        hits["steinke_uncorrected"] += steinke.epsilon > 0
        hits["fdp_gaussian_uncorrected"] += fdp.epsilon > 0
    rates = {k: v / runs for k, v in hits.items()}
    rates["seconds_per_run"] = (time.perf_counter() - start) / runs
    return rates


def _refutations(values: dict[str, list[float]], start: float, runs: int) -> dict[str, float]:
    """Per test: the refutation rate (ε_lb > the claim) and the mean ε_lb; and the seconds per run since ``start``."""
    out = {f"{k}_refuted": float(np.mean(np.array(v) > EPSILON)) for k, v in values.items()}
    out |= {f"{k}_mean_epsilon_lb": float(np.mean(v)) for k, v in values.items()}
    out["seconds_per_run"] = (time.perf_counter() - start) / runs
    return out


def broken(seed: int):
    noise = np.random.default_rng(seed)
    sigma = analytic_gaussian_sigma(EPSILON, DELTA, 1.0)
    return lambda x: x + noise.normal(0.0, sigma / 8, x.shape)


def broken_setting(runs: int) -> dict[str, float]:
    """Refutation rates (ε_lb > 1) of the σ/8 mechanism, and the mean ε_lb of each test."""
    gaussian, free = MechanismAudit(M, EPSILON, DELTA, family=GaussianFamily()), MechanismAudit(M, EPSILON, DELTA)
    values: dict[str, list[float]] = {"steinke": [], "fdp_gaussian": [], "fdp_free": []}
    start = time.perf_counter()
    for seed in range(runs):
        report = audit_mechanism(broken(seed), gaussian, SeededRandom(seed))
        values["steinke"].append(report.steinke.epsilon)
        values["fdp_gaussian"].append(report.fdp.epsilon)
        values["fdp_free"].append(audit_mechanism(broken(seed), free, SeededRandom(seed)).fdp.epsilon)
    out = _refutations(values, start, runs)
    out["ceiling_steinke"], out["ceiling_fdp_gaussian"] = report.ceiling_steinke, report.ceiling_fdp
    return out


def session_setting(runs: int) -> dict[str, float]:
    """False-refutation rate and mean ε_lb of the session's discrete Gaussian mechanism."""
    values: dict[str, list[float]] = {"steinke": [], "fdp_gaussian": []}
    audit = MechanismAudit(M, EPSILON, DELTA, family=GaussianFamily())
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as home, \
            Session(epsilon=EPSILON * runs, delta=DELTA * runs * 2, name="audit-experiment", rng=SeededRandom(1),
                    mirror=False, store=Path(home)) as session:
        for seed in range(runs):
            report = audit_mechanism(lambda x: session.gaussian(x, sensitivity=1.0, epsilon=EPSILON, delta=DELTA),
                                     audit, SeededRandom(seed))
            values["steinke"].append(report.steinke.epsilon)
            values["fdp_gaussian"].append(report.fdp.epsilon)
    return _refutations(values, start, runs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs of the null and broken settings (default 200)")
    parser.add_argument("--session-runs", type=int, default=50, help="runs through a session (default 50)")
    args = parser.parse_args(argv)
    results = {"null": null_setting(args.runs), "broken": broken_setting(args.runs),
               "session": session_setting(args.session_runs)}
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "audit-mechanism.csv", "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["setting", "runs", "quantity", "value"])
        for setting, values in results.items():
            runs = args.session_runs if setting == "session" else args.runs
            for key, value in values.items():
                out.writerow([setting, runs, key, f"{value:.4f}"])
    lines = ["# Mechanism tester: false positives and bug detection (measured)", "",
             "Generated by `experiments/audit_mechanism.py` (settings in its docstring; methods in "
             "[docs/audit.md](../audit.md)). m = 1000 canaries, claim (ε, δ) = (1, 1e-5), 9 guess rules, "
             "Bonferroni, each test at 97.5% (95% for the verdict; the uncorrected row: one test at 95%).", "",
             "| setting | runs | quantity | value |", "|---|---|---|---|"]
    for setting, values in results.items():
        runs = args.session_runs if setting == "session" else args.runs
        lines += [f"| {setting} | {runs} | {key} | {value:.4g} |" for key, value in values.items()]
    (OUT / "audit-mechanism.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
