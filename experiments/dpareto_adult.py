"""Reproduce DPareto's Adult comparison (Avent et al. 2020, Table 2 and Fig. 6; issue 11 item 5): the hypervolume of
BO's front minus random sampling's at an equal number of evaluations, for logistic regression with DP-SGD, with
DP-Adam and a linear SVM with DP-SGD, over seeded repetitions (mean and two-sided 95 % t interval; the paper: one BO
run against 19 random repetitions, 0.158 / 0.439 / 0.282); and BO against grid search with 3 and 4 points per axis
(243 and 1024 points, Fig. 6).

Every run is an audited ``dpareto`` session whose bundle verifies, all in adaptive sessions (Rényi filter): BO needs
one (its trials' parameters depend on earlier errors), and the filter is valid for the baselines' fixed plans too,
so every method runs under the same accountant. (When these runs were made, a fixed-parameter session with such a
huge composed ε failed verify: Opacus's PRV lower bound overflowed to infinity past ε ≈ 709; fixed since, see
docs/accounting.md, the prv section.) Each trial
trains ``--replications`` models (one charge each) with the closed-form linear trainer
(``plugins/dpareto/linear_dpsgd.py``: Poisson sampling, add/remove neighbours, the kernel's RDP accountant; the paper:
fixed-size batches without replacement, replace-one) on Adult in the a1a construction
(``dpaudit/data/adult_a1a.py``) and reports the mean public test error; each point's ε is that of one model at
δ = 1e-5. Budgets are set far above the plan's cost (the experiment measures fronts, not a budget).

Full run (the paper's budget: 16 + 256 BO evaluations, 272 random, 10 replications, all 30,956 records; the defaults):
``.venv/bin/python experiments/dpareto_adult.py --name dpareto-adult-full --results runs.jsonl``: about 1.4 h for
LogReg + SGD with its grids on one core with the compiled evaluator (LogReg + Adam's runs are about half as long).
Runs are made task by task, BO and random sampling seed by seed
(each seed completes a Table 2 pair), then the grids. With ``--results`` each finished run (its row, hypervolume
trace and front) is appended to a JSON-lines file as it ends; a later invocation skips the runs already there (so a
run can be resumed, or tasks, seeds and grids added in separate invocations), and ``--report-only`` writes the
report from the file, listing the planned runs that have not finished. What was run for
docs/experiments/dpareto-adult.md (a reduced budget) and dpareto-adult-full.md is stated in each.
``--smoke``: one task, tiny budgets, written only with ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dpareto_common import audited_run, mean_ci  # noqa: E402

from dpaudit_plugins.dpareto.search import FALLBACK_PHASE  # noqa: E402
from dpaudit_plugins.dpareto.tasks_adult import TRAIN_SIZE  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "experiments"
TASKS = ("adult-logreg-sgd", "adult-logreg-adam", "adult-svm-sgd")
PAPER_TABLE_2 = {"adult-logreg-sgd": (0.158, 0.053, 0.264), "adult-logreg-adam": (0.439, 0.272, 0.607),
                 "adult-svm-sgd": (0.282, 0.161, 0.402)}
NOISE = "float64"  # the linear trainer's noise dtype, recorded with each run (runs before commit c9170f6: float32)
BUDGET = (1e12, 1e-3)  # far above any plan here: the experiment compares fronts, not budgets


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seeds-from", type=int, default=0,
                        help="plan only seeds from this one on (to share one task's seeds among processes)")
    parser.add_argument("--n-initial", type=int, default=16)
    parser.add_argument("--n-iterations", type=int, default=256)
    parser.add_argument("--replications", type=int, default=10)
    parser.add_argument("--rows", type=int, default=None, help="train on the first ROWS a1a records only")
    parser.add_argument("--grid", type=int, nargs="*", default=[3, 4], help="grid points per axis (3^5 = 243, ...)")
    parser.add_argument("--raw-samples", type=int, default=1024, help="BO: Sobol candidates per iteration")
    parser.add_argument("--name", default="dpareto-adult", help="base name of the written files")
    parser.add_argument("--jobs", type=int, default=1, help="tasks run in parallel processes")
    parser.add_argument("--out", type=Path, default=None, help=f"where to write (default {OUT}; --smoke: nowhere)")
    parser.add_argument("--results", type=Path, default=None,
                        help="JSON-lines file: each finished run is appended; a run already in it is not run again "
                             "(resume, or add tasks, seeds or grids to earlier results); the report covers them all")
    parser.add_argument("--report-only", action="store_true", help="write the report from --results, run nothing")
    parser.add_argument("--smoke", action="store_true", help="one task, tiny budgets")
    args = parser.parse_args(argv)
    if args.smoke:
        args.tasks, args.seeds, args.n_initial, args.n_iterations = TASKS[:1], 1, 2, 1
        args.replications, args.rows, args.grid, args.raw_samples, args.jobs = 1, 600, [], 16, 1
    if args.report_only and args.results is None:
        parser.error("--report-only needs --results")
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    done = load_results(args.results)
    if not args.report_only:
        if args.jobs > 1:
            with multiprocessing.get_context("spawn").Pool(min(args.jobs, len(args.tasks))) as pool:
                parts = pool.starmap(run_task, [(args, name, done) for name in args.tasks])
        else:
            parts = [run_task(args, name, done) for name in args.tasks]
        for part in parts:
            done.update(part)
    # the report covers the planned runs only: a results file may also hold runs of another budget
    planned = {run_key(config, method, seed) for name in args.tasks for method, seed, config in plans(args, name)}
    runs = [run for key, run in done.items() if key in planned]
    if runs and (not args.smoke or args.out is not None):
        write(args.out or OUT, args, runs, unplanned=len(done) - len(runs))
    return [run["row"] for run in runs]


def plans(args: argparse.Namespace, name: str) -> list[tuple[str, int, dict]]:
    """One task's runs in the order they are made: BO and random sampling seed by seed (each seed completes a pair of
    Table 2), then each grid."""
    task = {"name": name, "replications": args.replications, **({"rows": args.rows} if args.rows else {})}
    evaluations = args.n_initial + args.n_iterations
    out = []
    for seed in range(args.seeds_from, args.seeds):
        out.append(("bo-hvpoi", seed, {"task": task, "method": "hvpoi", "n_initial": args.n_initial,
                                       "n_iterations": args.n_iterations, "raw_samples": args.raw_samples,
                                       "restarts": 1}))
        out.append(("random", seed, {"task": task, "method": "random", "n_trials": evaluations}))
    out += [(f"grid-{k}", 0, {"task": task, "method": "grid", "grid_points": k}) for k in args.grid]
    return out


def run_key(config: dict, method: str, seed: int) -> str:
    """What identifies a run in the results file: its whole configuration and seed."""
    return json.dumps({"config": config, "method": method, "seed": seed}, sort_keys=True)


def load_results(path: Path | None) -> dict[str, dict]:
    """The runs already in the results file, by :func:`run_key`."""
    if path is None or not path.exists():
        return {}
    runs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {run["key"]: run for run in runs}


def run_task(args: argparse.Namespace, name: str, done: dict[str, dict]) -> dict[str, dict]:
    """Every planned run of one task not in ``done``, each audited and verified, appended to the results file as it
    finishes."""
    finished: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as store:
        for method, seed, config in plans(args, name):
            key = run_key(config, method, seed)
            if key in done:
                continue
            outcome = audited_run(config, seed=seed, store=Path(store), epsilon=BUDGET[0], delta=BUDGET[1],
                                  adaptive=True, name=f"dpareto {name} {method} seed {seed}")
            out = outcome.output
            row = {"task": name, "method": method, "seed": seed, "evaluations": len(out["trials"]),
                   "replications": args.replications, "rows": args.rows or TRAIN_SIZE,
                   "failed": out["failed_trials"], "hypervolume": out["hypervolume"]["value"],
                   "wall_s": round(outcome.wall_s, 1), "verified": outcome.verified, "noise": NOISE,
                   "fallbacks": sum(t["phase"] == FALLBACK_PHASE for t in out["trials"])}
            run = {"key": key, "row": row, "trace": out["hypervolume_trace"],
                   "front": [{"epsilon": p["epsilon"], "error": p["error"]} for p in out["front"]]}
            finished[key] = run
            if args.results is not None:
                args.results.parent.mkdir(parents=True, exist_ok=True)
                with args.results.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(run) + "\n")
            print(f"{name} {method} seed {seed}: hypervolume {row['hypervolume']:.4f} "
                  f"({row['evaluations']} trials, {outcome.wall_s:.0f} s, verified)", flush=True)
    return finished


def fallbacks(rows: list[dict]) -> str:
    """The BO fallback counts of ``rows`` (one method's runs), by seed; "not recorded" where a run predates the
    count, "–" for methods without BO trials."""
    if not any(r["method"].startswith("bo") for r in rows):
        return "–"
    return ", ".join(str(r["fallbacks"]) if "fallbacks" in r else "not recorded" for r in rows)


def table_2(rows: list[dict], task: str) -> tuple[list[float], tuple[float, float, float]]:
    """BO minus random hypervolume, paired by seed, and its mean with the 95 % t interval."""
    bo = {r["seed"]: r["hypervolume"] for r in rows if r["task"] == task and r["method"] == "bo-hvpoi"}
    rnd = {r["seed"]: r["hypervolume"] for r in rows if r["task"] == task and r["method"] == "random"}
    diffs = [bo[s] - rnd[s] for s in sorted(bo) if s in rnd]
    return diffs, mean_ci(diffs) if diffs else (math.nan, math.nan, math.nan)


def budget_words(args: argparse.Namespace) -> str:
    """The budget of the planned runs, beside the paper's."""
    full = (args.n_initial, args.n_iterations, args.replications, args.rows) == (16, 256, 10, None)
    what = (f"{args.n_initial} + {args.n_iterations} BO evaluations against {args.n_initial + args.n_iterations} "
            f"random ones, {args.replications} replications per point, "
            f"{args.rows or TRAIN_SIZE:,} a1a training records, "
            f"{'grids ' + ', '.join(f'{k}^5' for k in args.grid) if args.grid else 'no grid'}")
    if full:
        return f"**the paper's budget**: {what}"
    return f"a **reduced budget**: {what} (the paper: 16 + 256 evaluations, 10 replications, all 30,956 records)"


def write(out: Path, args: argparse.Namespace, runs: list[dict], unplanned: int = 0) -> None:
    rows = [run["row"] for run in runs]
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{args.name}.csv").open("w", newline="", encoding="utf-8") as fh:
        # every column any row has (rows written before a field existed leave it empty)
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(key for row in rows for key in row)), restval="")
        writer.writeheader()
        writer.writerows(rows)
    command = " ".join(["experiments/dpareto_adult.py", "--jobs", str(args.jobs), "--seeds", str(args.seeds),
                        *(["--seeds-from", str(args.seeds_from)] if args.seeds_from else []),
                        "--n-initial", str(args.n_initial), "--name", args.name,
                        "--n-iterations", str(args.n_iterations), "--replications", str(args.replications),
                        *(["--rows", str(args.rows)] if args.rows else []), "--raw-samples", str(args.raw_samples),
                        "--grid", *map(str, args.grid), "--tasks", *args.tasks,
                        *(["--results", str(args.results)] if args.results else [])])
    planned = [(name, method, seed) for name in args.tasks for method, seed, _ in plans(args, name)]
    have = {(r["task"], r["method"], r["seed"]) for r in rows}
    missing = [p for p in planned if p not in have]
    tasks = list(dict.fromkeys([*args.tasks, *(r["task"] for r in rows)]))
    lines = ["# DPareto on Adult: BO against random sampling (Table 2) and grid search (Fig. 6)", "",
             f"Written by `.venv/bin/python {command}` from the {len(rows)} runs finished when it ran; planned: "
             f"{budget_words(args)}. Hypervolume in linear (ε, error) space against (10, 1); ε of one model at "
             "δ = 1e-5 by the RDP accountant, Poisson sampling, add/remove neighbours (the paper: sampling without "
             "replacement, replace-one: not the same ε). Random sampling is uniform on the declared scales (the "
             "paper hand-tuned its random distributions, App. C, to favour random sampling). All runs are in adaptive "
             "sessions (Rényi filter); BO uses HVPoI with 1 restart from --raw-samples Sobol candidates.", "",
             "Every run is an audited session whose bundle verified (a run that does not verify stops the script). "
             "Seed s is the session's `SeededRandom(s)` (so each run is a NOT FOR RELEASE test run, verified with "
             "`allow_not_for_release`); BO and random sampling with the same seed form a Table 2 pair."]
    if unplanned:
        lines += ["", f"The results file holds {unplanned} more runs of other budgets or tasks; they are not reported "
                  "here."]
    older = sum(run["row"].get("noise") != NOISE for run in runs)
    if older:
        lines += ["", f"{older} of these {len(runs)} runs predate the trainer's float64 noise (commit c9170f6): their "
                  "noise was float32, whose draws are cut off at about 5.77σ, so the Gaussian mechanism's ε rests on a "
                  "law they did not quite sample (docs/plugins/dpareto.md, \"Evaluator\")."]
    lines += ["", "## Table 2: BO hypervolume minus random sampling at equal evaluations", "",
              "| task | seeds (pairs) | mean difference | 95 % CI (t) | by seed | paper (one BO run vs 19 random) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for task in tasks:
        diffs, (mean, lo, hi) = table_2(rows, task)
        paper = PAPER_TABLE_2[task]
        measured = f"{mean:+.3f} | ({lo:+.3f}, {hi:+.3f}) | " + ", ".join(f"{d:+.3f}" for d in diffs) if diffs \
            else "not run | | "
        lines.append(f"| {task} | {len(diffs)} | {measured} | {paper[0]:.3f} ({paper[1]:.3f}, {paper[2]:.3f}) |")
    lines += ["", "## Hypervolume by method (Fig. 6: BO against grid search)", "",
              "| task | method | runs (seeds) | evaluations | replications | records | hypervolume mean | 95 % CI (t) "
              "| failed trials | BO fallbacks per run | wall per run (s) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for task in tasks:
        for method in dict.fromkeys(r["method"] for r in rows if r["task"] == task):
            rs = [r for r in rows if r["task"] == task and r["method"] == method]
            mean, lo, hi = mean_ci([r["hypervolume"] for r in rs])
            seeds = ", ".join(str(r["seed"]) for r in rs)
            lines.append(f"| {task} | {method} | {len(rs)} ({seeds}) | {rs[0]['evaluations']} | "
                         f"{rs[0]['replications']} | {rs[0]['rows']:,} | {mean:.4f} | "
                         f"({lo:.4f}, {hi:.4f}) | {sum(r['failed'] for r in rs)} | {fallbacks(rs)} | "
                         f"{statistics.fmean(r['wall_s'] for r in rs):.0f} |")
    lines += ["", "BO fallbacks: BO trials at which HVPoI was zero at every candidate BoTorch tried (the predicted "
              "mean dominated by the observed front everywhere), so the trial is a random point (phase `bo-fallback`, "
              "docs/plugins/dpareto.md); \"not recorded\" for runs made before the count was kept.",
              "", f"Total wall time of the runs: {sum(r['wall_s'] for r in rows) / 3600:.2f} h, summed over "
              "the runs (each run in one process on one core; wall times grow with the machine's load)."]
    if missing:
        lines += ["", "**Not run** (planned, not finished when this report was written): "
                  + "; ".join(f"{t} {m} seed {s}" for t, m, s in missing) + "."]
    lines += ["", f"![hypervolume traces and fronts]({args.name}.png)", ""]
    (out / f"{args.name}.md").write_text("\n".join(lines), encoding="utf-8")
    traces: dict[tuple[str, str], list[list[float]]] = {}
    fronts: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        key = (run["row"]["task"], run["row"]["method"])
        traces.setdefault(key, []).append(run["trace"])
        fronts.setdefault(key, run["front"])
    plot(out / f"{args.name}.png", [t for t in tasks if any(r["task"] == t for r in rows)], traces, fronts)


def plot(out, tasks, traces, fronts) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(2, len(tasks), figsize=(5 * len(tasks), 8), squeeze=False)
    for j, task in enumerate(tasks):
        top, bottom = axes[0, j], axes[1, j]
        for (t, method), runs in traces.items():
            if t != task:
                continue
            curves = np.array(runs)
            x = np.arange(1, curves.shape[1] + 1)
            top.plot(x, curves.mean(axis=0), label=f"{method} (mean of {len(runs)})")
            front = np.array([[p["epsilon"], p["error"]] for p in fronts[(t, method)]]).reshape(-1, 2)
            if len(front):
                bottom.step(front[:, 0], front[:, 1], where="post", label=f"{method} (first run)")
        top.set(xscale="log", xlabel="evaluations", ylabel="hypervolume", title=task)
        top.legend(fontsize=7)
        smallest = min((p["epsilon"] for (t, _), f in fronts.items() if t == task for p in f), default=1e-2)
        bottom.set(xscale="log", xlim=(min(1e-2, smallest / 2), 10), xlabel="ε (one model, δ = 1e-5)",
                   ylabel="test error")
        bottom.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
