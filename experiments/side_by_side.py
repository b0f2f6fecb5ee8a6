"""Side-by-side: constant-overhead, randtune and naive private hyperparameter selection on Adult (issue 3, item 5).

The same public grid (learning rate × clipping norm × noise multiplier × epochs), the same session budget (ε_B, δ_B)
and the same data for the three methods: ``adult-train`` is protected (add/remove neighbours); the first half of
``adult-test`` is the public validation set, the second half the public final-test set. Each method's own knobs
are fixed from public quantities before any session opens:

* constant-overhead (Ding et al. 2023, Alg. 1): k partitions and T_max fixed; ϵ per round the largest (bisection)
  such that the envelope of the final training plus T_max rounds fits the budget (checked in a dry-run session);
* randtune (Liu & Talwar 2019, geometric K): γ the smallest (largest E[K] = 1/γ, at most the grid size) such that
  the repeat-and-select of the grid's envelope fits;
* naive: every candidate trained, ``fit_budget``: every σ multiplied by one common factor so the composition fits.

Every run's certificate is checked with :func:`dpaudit.verify.verify_bundle`. randtune's wall time grows with its
secret K: it is reported here in aggregate only, as an experiment artefact (never in its certificate).

Run: ``.venv/bin/python experiments/side_by_side.py`` (writes docs/experiments/side-by-side.{csv,png} and prints the
table; about 8 minutes on 2 CPU cores with the defaults, 10 seeds).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dpaudit import Session
from dpaudit.accounting import get_accountant
from dpaudit.data.adult import TRAIN_NAME, load_adult
from dpaudit.errors import BudgetExceeded
from dpaudit.events import RepeatAndSelectEvent
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.sensitivity import from_formula
from dpaudit.trust import KeyTrust
from dpaudit.tuning import Candidate, candidate_event, grid_envelope
from dpaudit.verify import verify_bundle
from dpaudit_plugins.constant_overhead import FORMULA_ID
from dpaudit_plugins.constant_overhead import PLUGIN as CONSTANT_OVERHEAD
from dpaudit_plugins.naive import PLUGIN as NAIVE
from dpaudit_plugins.randtune import PLUGIN as RANDTUNE
from dpaudit_plugins.randtune import dominating_event

OUT = Path(__file__).resolve().parent.parent / "docs" / "experiments"
LRS = (0.25, 0.5, 1.0, 2.0, 4.0)
CLIP_NORMS = (0.5, 2.0)
NOISE_MULTIPLIERS = (1.0, 2.0)
EPOCHS = (1, 2)
BATCH_SIZE = 256


def default_grid() -> tuple[Candidate, ...]:
    """5 lr × 2 C × 2 σ × 2 epochs = 40 candidates, batch size 256."""
    return tuple(Candidate(lr, c, s, e, BATCH_SIZE) for lr in LRS for c in CLIP_NORMS for s in NOISE_MULTIPLIERS
                 for e in EPOCHS)


@dataclass(frozen=True)
class Setup:
    """Everything public a comparison run needs."""

    grid: tuple[Candidate, ...]
    epsilon: float
    delta: float
    train_rows: int | None
    test_rows: int | None
    k: int
    t_max: int


def _bisect(fits: Callable[[float], bool], lo: float, hi: float, *, increasing_cost: bool, steps: int = 20) -> float:
    """The end of [lo, hi] closest to the boundary at which ``fits`` still holds (``fits(lo)`` must hold when the
    cost increases with the argument, ``fits(hi)`` otherwise)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if fits(mid) == increasing_cost:
            lo = mid
        else:
            hi = mid
    return lo if increasing_cost else hi


def dataset_size(train_rows: int | None) -> int:
    """The public training-set size n (what the plugins read before any charge)."""
    return len(load_adult(train_rows=train_rows, test_rows=2).y_train)


def constant_overhead_epsilon_round(setup: Setup, n: int) -> float:
    """The largest ϵ per round such that the grid's envelope plus ``t_max`` rounds fit, by dry-run sessions."""
    envelope = grid_envelope(setup.grid, n, "dry run")
    sensitivity = from_formula(FORMULA_ID, "add_remove", k=setup.k)

    def fits(eps_round: float) -> bool:
        with tempfile.TemporaryDirectory() as store:
            s = Session(setup.epsilon, setup.delta, protected=(TRAIN_NAME,), rng=SeededRandom(0), mirror=False,
                        store=store)
            try:
                s.charge(envelope, plugin="dry-run", mechanism="dp-sgd")
                s.above_threshold_rounds(sensitivity, eps_round, max_queries=len(setup.grid), rounds=setup.t_max,
                                         plugin="dry-run", label="dry run")
                return True
            except BudgetExceeded:
                return False

    if not fits(1e-3):
        raise SystemExit("the grid's envelope leaves no room for the tuning rounds: raise the budget or sigma")
    return float(f"{_bisect(fits, 1e-3, setup.epsilon, increasing_cost=True, steps=14):.4g}") * 0.999


def randtune_gamma(setup: Setup, n: int) -> float:
    """The smallest γ ≥ 1/|grid| (largest E[K] = 1/γ) whose geometric repeat-and-select of the envelope fits."""
    base = dominating_event([candidate_event(c, n, "one repetition") for c in setup.grid], "one repetition")
    accountant = get_accountant("tightest")

    def fits(gamma: float) -> bool:
        event = RepeatAndSelectEvent(event=base, distribution="geometric", gamma=gamma, label="")
        return accountant.epsilon(event, setup.delta) <= setup.epsilon * 0.999

    floor = 1.0 / len(setup.grid)
    if fits(floor):
        return floor
    if not fits(0.999):
        raise SystemExit("even one expected repetition of the envelope exceeds the budget")
    return _bisect(fits, floor, 0.999, increasing_cost=False, steps=16)


def method_configs(setup: Setup) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each method's plugin and configuration, fixed from public quantities before any session opens."""
    n = dataset_size(setup.train_rows)
    grid = [c.to_dict() for c in setup.grid]
    rows = {"train_rows": setup.train_rows, "test_rows": setup.test_rows}
    rows = {k: v for k, v in rows.items() if v is not None}
    return {
        "constant-overhead": (CONSTANT_OVERHEAD, {
            "candidates": grid, "k": setup.k, "t_max": setup.t_max, "u0": 0.5, "granularity": 0.05,
            "epsilon_round": constant_overhead_epsilon_round(setup, n), **rows}),
        "randtune": (RANDTUNE, {"candidates": grid, "distribution": "geometric",
                                "gamma": randtune_gamma(setup, n), **rows}),
        "naive": (NAIVE, {"candidates": grid, "fit_budget": True, **rows}),
    }


@dataclass(frozen=True)
class RunResult:
    """One method on one seed."""

    method: str
    seed: int
    epsilon: float
    attained_by: str
    test_accuracy: float | None
    wall_time_s: float
    verified: bool
    selected: Mapping[str, Any] | None


def run_one(method: str, plugin: Any, config: Mapping[str, Any], setup: Setup, seed: int, store: Path) -> RunResult:
    """One seeded session: run the plugin, close, verify the bundle."""
    s = Session(setup.epsilon, setup.delta, f"side-by-side {method} seed {seed}", protected=plugin.protected,
                public=plugin.public, rng=SeededRandom(seed), mirror=False, store=store)
    start = time.perf_counter()
    out = plugin.run(s, config)
    wall = time.perf_counter() - start
    certificate = s.close()
    report = verify_bundle(s.run_dir, allow_not_for_release=True, trust=KeyTrust.default(store))
    return RunResult(method, seed, certificate["claim"]["epsilon"], certificate["claim"].get("attained_by", ""),
                     out.get("test_accuracy"), wall, report.valid, out.get("selected"))


def summarise(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per method: certified ε (max over seeds), accuracy and wall time mean ± sd, accountants, all verified."""
    rows = []
    for method in dict.fromkeys(r.method for r in results):
        rs = [r for r in results if r.method == method]
        accs = [r.test_accuracy for r in rs if r.test_accuracy is not None]
        walls = [r.wall_time_s for r in rs]
        rows.append({
            "method": method, "seeds": len(rs), "epsilon": max(r.epsilon for r in rs),
            "attained_by": "/".join(sorted({r.attained_by for r in rs})),
            "acc_mean": statistics.mean(accs), "acc_sd": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "wall_mean": statistics.mean(walls), "wall_sd": statistics.stdev(walls) if len(walls) > 1 else 0.0,
            "verified": all(r.verified for r in rs),
        })
    return rows


def markdown_table(rows: Sequence[Mapping[str, Any]], setup: Setup) -> str:
    head = (f"| method | certified ε (δ = {setup.delta:g}) | attained by | final test accuracy | wall time (s) | "
            "verified |\n| --- | --- | --- | --- | --- | --- |\n")
    return head + "".join(
        f"| {r['method']} | {r['epsilon']:.3f} | {r['attained_by']} | {r['acc_mean']:.4f} ± {r['acc_sd']:.4f} | "
        f"{r['wall_mean']:.1f} ± {r['wall_sd']:.1f} | {'all ' + str(r['seeds']) if r['verified'] else 'NO'} |\n"
        for r in rows)


def plot(results: Sequence[RunResult], rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_acc, ax_time) = plt.subplots(1, 2, figsize=(10, 4))
    methods = [r["method"] for r in rows]
    for i, method in enumerate(methods):
        accs = [r.test_accuracy for r in results if r.method == method and r.test_accuracy is not None]
        ax_acc.scatter([i] * len(accs), accs, alpha=0.5, color="grey")
    ax_acc.errorbar(range(len(rows)), [r["acc_mean"] for r in rows], yerr=[r["acc_sd"] for r in rows], fmt="o",
                    capsize=6, color="C0")
    ax_acc.set_xticks(range(len(rows)), [f"{r['method']}\nε={r['epsilon']:.2f}" for r in rows])
    ax_acc.set_ylabel("final test accuracy (public half)")
    ax_acc.set_title("accuracy, mean ± sd over seeds (dots: seeds)")
    ax_time.bar(range(len(rows)), [r["wall_mean"] for r in rows], yerr=[r["wall_sd"] for r in rows], capsize=6)
    ax_time.set_xticks(range(len(rows)), methods)
    ax_time.set_ylabel("wall time per run (s)")
    ax_time.set_title("wall time, mean ± sd (randtune's reveals K)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=2.5)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--train-rows", type=int, default=None)
    parser.add_argument("--test-rows", type=int, default=None)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--t-max", type=int, default=6)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    torch.set_num_threads(1)
    setup = Setup(default_grid(), args.epsilon, args.delta, args.train_rows, args.test_rows, args.k, args.t_max)
    configs = method_configs(setup)
    for method, (_, config) in configs.items():
        knobs = {k: v for k, v in config.items() if k not in ("candidates",)}
        print(f"{method}: {knobs}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as store:
        for seed in range(args.seeds):
            for method, (plugin, config) in configs.items():
                r = run_one(method, plugin, config, setup, seed, Path(store))
                results.append(r)
                print(f"seed {seed} {method}: eps={r.epsilon:.3f} ({r.attained_by}) acc={r.test_accuracy} "
                      f"wall={r.wall_time_s:.1f}s verified={r.verified} selected={r.selected}", flush=True)
    rows = summarise(results)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "side-by-side.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["method", "seed", "epsilon", "attained_by", "test_accuracy",
                                               "wall_time_s", "verified", "selected"])
        writer.writeheader()
        for r in results:
            writer.writerow({**r.__dict__, "selected": dict(r.selected) if r.selected else None})
    plot(results, rows, args.out / "side-by-side.png")
    print(markdown_table(rows, setup))


if __name__ == "__main__":
    main()
