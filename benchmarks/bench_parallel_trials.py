"""Speed-up of randtune's trials in parallel: 16 repetitions (DP-SGD trainings of Adult candidates under one
repeat-and-select charge) with ``workers = 2`` against ``workers = 1``, measured in the same run.

The timed part is the trial loop the ``workers`` key parallelises (:func:`dpaudit_plugins.randtune.plugin.tune`
calls the same ``executor.map(run_repetition, ...)``); the parallel timing includes starting the process pool
(the fork server imports torch once per driver process: the first parallel map pays for it, so it is timed
cold, then warm). The reference is ``workers = 1`` in this process pinned to one torch thread (the per-worker
setting); ``workers = 1`` with torch's default threads (what a user gets) is timed too. Ratios are reference time /
time (above 1: faster). The results are checked equal across all runs.

The dpareto row times :func:`dpaudit_plugins.dpareto.plugin.explore` end to end (charges, data access, the
trials, their records): 16 trials of the ``adult-logreg-sgd`` task (closed-form linear DP-SGD, ``replications``
models per trial) at the points of a seeded random design, ``workers = 2`` against ``workers = 1`` (pinned to one
torch thread) in separate sessions of the same seed, cold (the fork server's first start) then warm; with public
evaluation data and points fixed in advance the runs must give identical trials (checked).

The naive row times :func:`dpaudit_plugins.naive.plugin.tune` end to end (data access, one charge per candidate,
the trainings, their records): a grid of ``--trials`` MLP(32) candidates on ``--rows`` Adult rows, ``workers = 2``
(batches of two candidates, charged before dispatch) against ``workers = 1`` (pinned to one torch thread) in
separate sessions of the same seed, cold then warm; the runs must select the same model with the same scores.

Run: ``.venv/bin/python benchmarks/bench_parallel_trials.py [--trials 16] [--rows 4000] [--epochs 1]
[--dpareto-rows 4000] [--dpareto-replications 2] [--only randtune|dpareto|naive]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import torch

from dpaudit import Session
from dpaudit.data.adult_a1a import TEST_NAME, TRAIN_NAME
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.parallel import ParallelOptions, predraw
from dpaudit.tuning import (
    MECHANISMS,
    SEED_RANGE,
    TUNING_PUBLIC,
    ModelOptions,
    candidate_event,
    parse_candidates,
    tuning_data,
)
from dpaudit.tuning.detached import WorkerInputs
from dpaudit_plugins.dpareto.plugin import run as run_dpareto
from dpaudit_plugins.naive import tune as tune_naive
from dpaudit_plugins.randtune import dominating_event
from dpaudit_plugins.randtune.plugin import (
    SEEDS_PER_REPETITION,
    Repetition,
    RepetitionInputs,
    run_repetition,
)

GRID = [{"lr": lr, "max_grad_norm": 1.0, "noise_multiplier": 1.2, "epochs": 1, "batch_size": 64}
        for lr in (0.1, 0.5, 1.0, 2.0)]


def _timed(options: ParallelOptions, shared: RepetitionInputs, jobs: list[Repetition]) -> tuple[float, list]:
    start = time.perf_counter()
    with options.executor() as executor:
        outcomes = executor.map(run_repetition, shared, jobs)
    seconds = time.perf_counter() - start
    return seconds, [(score, digest) for score, digest, _ in outcomes]


def _dpareto(workers: int, trials: int, rows: int, replications: int) -> tuple[float, list]:
    config = {"task": {"name": "adult-logreg-sgd", "replications": replications, "rows": rows}, "method": "random",
              "n_trials": trials, "workers": workers}
    with tempfile.TemporaryDirectory() as store, Session(
            epsilon=1e12, delta=1e-5, name="bench-parallel-dpareto", protected=(TRAIN_NAME,), public=(TEST_NAME,),
            rng=SeededRandom(0), store=store, mirror=False, adaptive=True) as session:
        start = time.perf_counter()
        out = run_dpareto(session, config)
        seconds = time.perf_counter() - start
    return seconds, [(t["params"], t["epsilon"], t["error"]) for t in out["trials"]]


def dpareto_row(trials: int, rows: int, replications: int) -> None:
    """16 dpareto trials with 2 workers against 1 (module docstring)."""
    print(f"{trials} dpareto trials: adult-logreg-sgd on {rows} a1a rows, {replications} replications per trial, "
          "random design")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    reference, result = _dpareto(1, trials, rows, replications)
    torch.set_num_threads(previous)
    print(f"  workers=1 (1 thread, reference)  {reference:7.2f} s   x1.00")
    for run in ("cold", "warm"):  # cold: the fork server starts and imports the trial's modules (torch) once
        seconds, parallel = _dpareto(2, trials, rows, replications)
        assert parallel == result, "two workers changed the trials"
        print(f"  workers=2 ({run} pool, 1 thread each) {seconds:7.2f} s   x{reference / seconds:.2f} speed-up")
    print("  trials identical")


def _naive(workers: int, trials: int, rows: int, epochs: int) -> tuple[float, dict]:
    grid = [{**c, "noise_multiplier": sigma, "epochs": epochs} for sigma in (1.0, 1.2, 1.5, 2.0) for c in GRID]
    config = {"candidates": (grid * (trials // len(grid) + 1))[:trials], "model": "mlp", "hidden": 32,
              "train_rows": rows, "workers": workers}
    with tempfile.TemporaryDirectory() as store, Session(
            epsilon=1e6, delta=1e-5, name="bench-parallel-naive", protected=("adult-train",), public=TUNING_PUBLIC,
            rng=SeededRandom(0), store=store, mirror=False) as session:
        start = time.perf_counter()
        out = tune_naive(session, config).public
        seconds = time.perf_counter() - start
    return seconds, {k: out[k] for k in ("candidate_index", "model_sha256", "validation_accuracies", "epsilon")}


def naive_row(trials: int, rows: int, epochs: int) -> None:
    """A naive grid of ``trials`` candidates with 2 workers against 1 (module docstring)."""
    print(f"{trials} naive candidates: MLP(32) DP-SGD on {rows} Adult rows, {epochs} epoch(s), batch 64")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    reference, result = _naive(1, trials, rows, epochs)
    torch.set_num_threads(previous)
    print(f"  workers=1 (1 thread, reference)  {reference:7.2f} s   x1.00")
    for run in ("cold", "warm"):
        seconds, parallel = _naive(2, trials, rows, epochs)
        assert parallel == result, "two workers changed the selection or the scores"
        print(f"  workers=2 ({run} pool, 1 thread each) {seconds:7.2f} s   x{reference / seconds:.2f} speed-up")
    print("  selection and scores identical")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--dpareto-rows", type=int, default=4000)
    parser.add_argument("--dpareto-replications", type=int, default=2)
    parser.add_argument("--only", choices=("randtune", "dpareto", "naive"), default=None, help="run one row only")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    if args.only in (None, "naive"):
        naive_row(args.trials, args.rows, args.epochs)
    if args.only == "naive":
        return
    if args.only != "randtune":
        dpareto_row(args.trials, args.dpareto_rows, args.dpareto_replications)
    if args.only == "dpareto":
        return
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    grid = parse_candidates([{**c, "epochs": args.epochs} for c in GRID])
    options = ModelOptions(model="mlp", hidden=32, train_rows=args.rows)
    with tempfile.TemporaryDirectory() as store, Session(
            epsilon=50.0, delta=1e-5, name="bench-parallel", protected=("adult-train",), public=TUNING_PUBLIC,
            rng=SeededRandom(0), store=store, mirror=False) as session:
        view = session.for_plugin("randtune", "0.1.0")
        data = tuning_data(view, options.train_rows, None)
        label = f"{MECHANISMS[options.optimizer]} {options.model}"
        base = dominating_event([candidate_event(c, len(data.y_train), label) for c in grid], "bench")
        charge, _ = view.repeat_and_select(base, "geometric", {"gamma": 0.5}, label="bench")
        shared = RepetitionInputs(training=WorkerInputs(data=data, options=options, device="cpu",
                                                        neighbouring=view.neighbouring, for_release=False),
                                  candidates=grid, charge=charge, label=label)
        jobs = [Repetition(index=view.rng.randbelow(len(grid)),
                           seeds=predraw(view.rng, SEED_RANGE, SEEDS_PER_REPETITION)) for _ in range(args.trials)]
        print(f"{args.trials} randtune repetitions: MLP(32) DP-SGD on {len(data.y_train)} Adult rows, "
              f"{args.epochs} epoch(s), batch 64; {torch.get_num_threads()} torch threads by default")
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        pinned, reference = _timed(ParallelOptions(workers=1), shared, jobs)
        torch.set_num_threads(previous)
        print(f"  workers=1 (1 thread, reference)  {pinned:7.2f} s   x1.00")
        default, result = _timed(ParallelOptions(workers=1), shared, jobs)
        assert result == reference
        print(f"  workers=1 (default threads)      {default:7.2f} s   x{pinned / default:.2f}")
        for run in ("cold", "warm"):
            seconds, result = _timed(ParallelOptions(workers=2), shared, jobs)
            assert result == reference, "a parallel run changed the results"
            print(f"  workers=2 ({run} pool, 1 thread each) {seconds:7.2f} s   x{pinned / seconds:.2f} speed-up")
        print("  results identical across all runs")


if __name__ == "__main__":
    main()
