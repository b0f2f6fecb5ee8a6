"""A larger task for dp-gp: house prices at public locations (Ames, Iowa; De Cock 2011), n in the thousands.

Data (``dpaudit.data.ames``): the protected sale prices of the training part (2 381 sales) at their public
(longitude, latitude); the public test part (549 sales, prices public) gives the test points X* and the RMSE.
Setting (public, fixed before reading any price): prices clipped to [50 000, 450 000] USD, centre 200 000, scale
80 000 (d = 5); EQ kernel, variance 1, lengthscales (0.018°, 0.0135°) ≈ 1.5 km in both directions, noise variance
0.5; δ = 10⁻⁴.

Measured: (1) the cloaking plan's solve time (C = K_*f K⁻¹ by Cholesky, the Wolfe-Atwood design, exact
feasibility) for n = 564, 1 223 and 2 381 training sales (ids below 700, 1 500, 2 930), on this machine's CPU, and
the posterior mean's time on the session's device (CUDA when present); (2) RMSE on the test sales vs ε ∈ {0.25,
0.5, 1, 2, 4, 8} for cloaking (and cloaking with lengthscales three times longer), for the standard method (exact
RKHS Δ) and for integral-kernel binning (Laplace, 12 × 12 bins): one certified session per method and ε (its
draw's RMSE), and the expected RMSE over ``--draws`` draws of the same mechanism's noise (a Monte Carlo of a known
distribution, not releases). Every session is verified (:mod:`dp_gp_common`) and the figure and table are attached
to each run's MLflow page.

Run: ``.venv/bin/python experiments/dp_gp_spatial.py`` (a few minutes on 2 cores). BLAS runs on one thread unless
``OPENBLAS_NUM_THREADS`` (or OMP/MKL) is set: on a shared machine oversubscribed BLAS threads made the n = 287
factorisations 47 times slower. Writes
docs/experiments/dp-gp-spatial.md, .csv, .png. ``--quick`` runs a tiny version (the smoke test).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one BLAS thread unless set: faster than oversubscribed threads

import csv  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dp_gp_common import (  # noqa: E402
    Certified,
    arguments,
    attach,
    certified_runs_section,
    close_and_verify,
    open_session,
    tracking,
)

from dpaudit.data.ames import TEST, TRAIN, TRAIN_LOCATIONS  # noqa: E402
from dpaudit.data.catalog import load  # noqa: E402
from dpaudit.sensitivity import Neighbouring  # noqa: E402
from dpaudit_plugins.dp_gp import PLUGIN, VERSION  # noqa: E402
from dpaudit_plugins.dp_gp.binning import INTEGRAL, Bins, bin_sums, predict, release_bin_sums  # noqa: E402
from dpaudit_plugins.dp_gp.formulas import cloaking_matrix  # noqa: E402
from dpaudit_plugins.dp_gp.gp import posterior_mean  # noqa: E402
from dpaudit_plugins.dp_gp.release import GpModel, OutputRule, plan_cloaking, plan_standard, release  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "experiments"
RULE = OutputRule(50_000.0, 450_000.0, 200_000.0, 80_000.0)
LENGTHSCALE, VARIANCE, NOISE, DELTA = (0.018, 0.0135), 1.0, 0.5, 1e-4
LONG = 3.0  # the second cloaking release uses lengthscales LONG times longer (≈ 4.5 km)
EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
SIZES = (700, 1500, None)  # ids below; None: all 2 930
BINS = 12
NB = Neighbouring.REPLACE_ONE


def rmse(predictions: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """RMSE (USD) of each row of ``predictions`` against the public test prices."""
    return np.sqrt(np.mean((np.atleast_2d(predictions) - truth[None, :]) ** 2, axis=1))


def draws_rmse(mean: np.ndarray, factor: np.ndarray, sigma: float, truth: np.ndarray, draws: int,
               seed: int) -> float:
    """Expected RMSE over ``draws`` draws of mean + σ·L·z (the mechanism's noise N(0, σ²M); a simulation)."""
    z = np.random.default_rng(seed).standard_normal((draws, len(mean)))
    return float(np.mean(rmse(RULE.to_original(mean[None, :] + sigma * z @ factor.T), truth)))


def timings(sizes: Sequence[int | None]) -> list[dict[str, Any]]:
    """Cloaking solve time (CPU) and posterior-mean time (session device) per training size."""
    rows = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for size in sizes:
        params = {} if size is None else {"rows": size}
        train, test = load(TRAIN, params), load(TEST, params)
        X, X_star = np.asarray(train.X, dtype=np.float64), np.asarray(test.X, dtype=np.float64)
        start = time.perf_counter()
        plan = plan_cloaking(GpModel(X, LENGTHSCALE, VARIANCE, NOISE), RULE, X_star, NB)
        solve = time.perf_counter() - start
        start = time.perf_counter()
        posterior_mean(X, RULE.apply(np.asarray(train.y)), X_star, lengthscale=LENGTHSCALE, variance=VARIANCE,
                       noise=NOISE, device=device)
        rows.append({"n": len(X), "P": len(X_star), "solve_s": solve, "mean_s": time.perf_counter() - start,
                     "device": device, "iterations": plan.summary["iterations"], "rank": plan.summary["rank"],
                     "converged": plan.summary["converged"]})
    return rows


def run(out: Path, draws: int, quick: bool, store: Path | None, tracking_uri: str | None) -> dict[str, Any]:
    params = {"rows": 150} if quick else {}
    train, test = load(TRAIN, params), load(TEST, params)
    X, X_star = np.asarray(train.X, dtype=np.float64), np.asarray(test.X, dtype=np.float64)
    truth = np.asarray(test.y, dtype=np.float64)
    y = RULE.apply(np.asarray(train.y))
    epsilons = (1.0,) if quick else EPSILONS
    time_rows = timings((150,) if quick else SIZES)
    model = GpModel(X, LENGTHSCALE, VARIANCE, NOISE)
    mean = cloaking_matrix(X, X_star, LENGTHSCALE, VARIANCE, NOISE)[0] @ y
    long_scale = tuple(LONG * v for v in LENGTHSCALE)
    long_model = GpModel(X, long_scale, VARIANCE, NOISE)
    long_mean = cloaking_matrix(X, X_star, long_scale, VARIANCE, NOISE)[0] @ y
    non_dp = float(rmse(RULE.to_original(mean), truth)[0])
    constant = float(rmse(np.full(len(truth), RULE.centre), truth)[0])
    plans = {"cloaking": (plan_cloaking(model, RULE, X_star, NB), mean),
             "cloaking_long": (plan_cloaking(long_model, RULE, X_star, NB), long_mean),
             "standard": (plan_standard(model, RULE, X_star, NB), mean)}
    lower, upper = X.min(axis=0), X.max(axis=0)  # public: the inputs are public
    bins = Bins.uniform(lower, upper + 1e-9, [BINS, BINS])
    sums, _ = bin_sums(bins, X, y)
    runs: list[Certified] = []
    rows = []
    for e, epsilon in enumerate(epsilons):
        row: dict[str, Any] = {"epsilon": epsilon}
        for m, (method, (plan, plan_mean)) in enumerate(plans.items()):
            s = open_session(f"ames {method} eps={epsilon:g}", epsilon, DELTA, (TRAIN,), (TRAIN_LOCATIONS, TEST),
                             100 * e + m, store, tracking_uri)
            view = s.for_plugin(PLUGIN.name, VERSION)
            data = view.data(TRAIN, **params)
            view.data(TRAIN_LOCATIONS, **params)
            released = release(view, plan, data.y, epsilon, DELTA)
            runs.append(close_and_verify(s, store))
            row[f"{method}_certified"] = float(rmse(released.predictions, truth)[0])
            row[f"{method}_expected"] = draws_rmse(plan_mean, plan.factor, released.sigma, truth, draws, 7 + e)
        s = open_session(f"ames binning eps={epsilon:g}", epsilon, DELTA, (TRAIN,), (TRAIN_LOCATIONS, TEST),
                         100 * e + 9, store, tracking_uri)
        view = s.for_plugin(PLUGIN.name, VERSION)
        data = view.data(TRAIN, **params)
        view.data(TRAIN_LOCATIONS, **params)
        binned = release_bin_sums(view, bins, data.X, data.y, RULE, epsilon)
        runs.append(close_and_verify(s, store))
        row["binning_certified"] = float(rmse(RULE.to_original(
            predict(binned, X_star, LENGTHSCALE, VARIANCE, NOISE, kernel=INTEGRAL)), truth)[0])
        noise_rng, scale = np.random.default_rng(50 + e), math.sqrt(binned.noise_variance / 2.0)
        simulated = [predict(binned.__class__(bins, binned.counts, sums + noise_rng.laplace(0.0, scale, sums.shape),
                                              binned.noise_variance, binned.noise, binned.sensitivity),
                             X_star, LENGTHSCALE, VARIANCE, NOISE, kernel=INTEGRAL)
                     for _ in range(max(draws // 10, 10))]
        row["binning_expected"] = float(np.mean(rmse(RULE.to_original(np.array(simulated)), truth)))
        rows.append(row)
    results = {"timings": time_rows, "rows": rows, "non_dp": non_dp, "constant": constant, "runs": runs,
               "n": len(X), "P": len(X_star), "draws": draws,
               "non_dp_long": float(rmse(RULE.to_original(long_mean), truth)[0]),
               "sensitivity": {k: p.sensitivity.value for k, (p, _) in plans.items()}}
    paths = write(out, results)
    attach(runs, paths, tracking_uri)
    return results


def write(out: Path, results: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    table = out / "dp-gp-spatial.csv"
    keys = ["epsilon"] + [f"{m}_{k}" for m in ("cloaking", "cloaking_long", "standard", "binning")
                          for k in ("expected", "certified")]
    with table.open("w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(results["rows"])
    doc = out / "dp-gp-spatial.md"
    doc.write_text(markdown(results))
    paths = [table, doc]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    eps = [r["epsilon"] for r in results["rows"]]
    for method, label in (("cloaking", "cloaking"), ("cloaking_long", f"cloaking, lengthscales ×{LONG:g}"),
                          ("standard", "standard (exact RKHS Δ)"),
                          ("binning", f"integral binning ({BINS}×{BINS}, Laplace)")):
        ax.plot(eps, [r[f"{method}_expected"] / 1000 for r in results["rows"]], marker="o", label=label)
    ax.axhline(results["non_dp"] / 1000, color="k", ls=":", label="non-DP GP")
    ax.axhline(results["constant"] / 1000, color="grey", ls="--", label="constant (public centre)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε (δ = 1e-4)")
    ax.set_ylabel("expected RMSE on the test sales (k$)")
    ax.set_title(f"Ames house prices, n = {results['n']}, P = {results['P']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    figure = out / "dp-gp-spatial.png"
    fig.savefig(figure, dpi=110)
    plt.close(fig)
    return [*paths, figure]


def markdown(results: dict[str, Any]) -> str:
    lines = ["# dp-gp on a larger spatial task: Ames house prices", "",
             "Generated by `experiments/dp_gp_spatial.py` (setting in its docstring). RMSE in US dollars on the "
             f"public test sales (P = {results['P']}); protected: the {results['n']} training prices.", "",
             f"Non-DP GP: RMSE {results['non_dp']:,.0f}; the constant prediction (the public centre 200 000): "
             f"{results['constant']:,.0f}; non-DP with lengthscales ×{LONG:g}: {results['non_dp_long']:,.0f}. "
             f"Sensitivities (whitened, normalised units): cloaking {results['sensitivity']['cloaking']:.3f} "
             f"(×{LONG:g}: {results['sensitivity']['cloaking_long']:.3f}), standard "
             f"{results['sensitivity']['standard']:.3f}.", "",
             "## Solve times", "",
             "| n (training) | P (test) | cloaking plan, CPU (s) | design iterations | rank of C | converged | "
             "posterior mean (s) | device |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {t['n']} | {t['P']} | {t['solve_s']:.2f} | {t['iterations']} | {t['rank']} | {t['converged']} | "
              f"{t['mean_s']:.2f} | {t['device']} |" for t in results["timings"]]
    lines += ["", f"## RMSE vs ε (expected over {results['draws']} noise draws; the certified draw in brackets)", "",
              f"| ε | cloaking | cloaking, lengthscales ×{LONG:g} | standard | integral binning |",
              "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['epsilon']:g} | {r['cloaking_expected']:,.0f} ({r['cloaking_certified']:,.0f}) | "
              f"{r['cloaking_long_expected']:,.0f} ({r['cloaking_long_certified']:,.0f}) | "
              f"{r['standard_expected']:,.0f} ({r['standard_certified']:,.0f}) | "
              f"{r['binning_expected']:,.0f} ({r['binning_certified']:,.0f}) |" for r in results["rows"]]
    lines += certified_runs_section(results["runs"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__.splitlines()[0], 200, OUT, argv)
    results = run(args.out, args.draws, args.quick, args.store, tracking(args.no_mlflow, args.tracking_uri))
    for t in results["timings"]:
        print(f"n = {t['n']}, P = {t['P']}: cloaking plan {t['solve_s']:.2f} s, posterior mean {t['mean_s']:.2f} s "
              f"({t['device']})")
    for r in results["rows"]:
        print(f"eps {r['epsilon']:g}: cloaking {r['cloaking_expected']:,.0f} "
              f"(long {r['cloaking_long_expected']:,.0f}), standard {r['standard_expected']:,.0f}, "
              f"binning {r['binning_expected']:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
