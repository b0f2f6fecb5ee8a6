"""DPareto's Adult evaluator: the closed-form linear DP-SGD trainer (plugins/dpareto/linear_dpsgd.py) against the
kernel's Opacus DP-SGD (``dpaudit.tuning.training.train_private``, per-example gradients by hooks) on the same trial,
as CPU-time ratios measured in the same run.

Trial: logistic regression on Adult in the a1a construction (30,956 records, 123 features), DP-SGD, σ = 1, C = 1,
lr = 0.01, one epoch at each ``--lots`` (steps = ⌊n/B⌋). Both are audited (a session, a charge per model, the
release); the session's opening and closing are outside the timings. Reported per lot: the reference's CPU seconds
for one model, ours for one model (ratio) and for ``--replications`` models trained as one batch (ratio per model),
the per-step cost from which a Table 1 corner's trial time follows (steps × per-step; 64 epochs at lot 8 is
247,616 steps), and the cost per included (record, replication) pair (an epoch includes about R·n pairs at any
lot, so a trial of E epochs costs about E·R·n times it, plus the noise of its steps). Process CPU time (all threads,
torch pinned to ``--threads``), the median of ``--repeats`` alternating runs. The first call compiles the numba
kernel (or loads it from numba's cache) outside the timings.

Before the compiled kernel (the torch loop it replaced, same machine, ``--lots 8 512 --replications 10 --repeats 1``):
0.095 ms per step at lot 8 and 2.96 ms per step at lot 512 with R = 10, about 0.6 µs per (record, replication).

Run: ``.venv/bin/python benchmarks/bench_dpareto_linear.py [--lots 8 512] [--replications 10] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from dpaudit import Session
from dpaudit.data.adult_a1a import TEST_NAME, TRAIN_NAME, load_a1a_test, load_a1a_train
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.tuning.training import train_private
from dpaudit_plugins.dpareto.linear_dpsgd import LinearTrial, train_linear


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lots", type=int, nargs="+", default=[8, 512])
    parser.add_argument("--replications", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    train, test = load_a1a_train(), load_a1a_test()
    n = len(train)
    with tempfile.TemporaryDirectory() as store, \
            Session(1e9, 1e-3, "bench-dpareto-linear", protected=(TRAIN_NAME,), public=(TEST_NAME,),
                    rng=SeededRandom(0), mirror=False, store=Path(store)) as session:
        view = session.for_plugin("bench", "1")
        warm = LinearTrial("logistic", "sgd", 1, 512, 0.01, 1.0, 1.0)
        train_linear(view, (view.charge(warm.event(n), mechanism="bench"),), warm, train.X, train.y, test.X, test.y,
                     seed=0)  # compiles (or loads) the kernel
        print(f"{'lot':>5} {'steps':>6} {'opacus 1 model':>15} {'ours 1 model':>13} {'ratio':>7} "
              f"{'ours R models':>14} {'ratio/model':>12} {'ours ms/step (R)':>17} {'µs/(record, R)':>15}")
        for lot in args.lots:
            trial = LinearTrial("logistic", "sgd", 1, lot, 0.01, 1.0, 1.0)
            steps = trial.plan(n).steps

            def reference(lot=lot) -> None:
                train_private(view, nn.Linear(train.X.shape[1], 1), train.X, train.y, optimizer="sgd", lr=0.01,
                              epochs=1, batch_size=lot, max_grad_norm=1.0, noise_multiplier=1.0, label="reference")

            def ours(replications: int, trial=trial) -> None:
                charges = tuple(view.charge(trial.event(n), mechanism="bench") for _ in range(replications))
                train_linear(view, charges, trial, train.X, train.y, test.X, test.y, seed=1)

            ref, one, many = [], [], []
            for _ in range(args.repeats):
                ref.append(cpu(reference))
                one.append(cpu(lambda: ours(1)))
                many.append(cpu(lambda: ours(args.replications)))
            r, o, m = (statistics.median(x) for x in (ref, one, many))
            print(f"{lot:>5} {steps:>6} {r:>14.2f}s {o:>12.2f}s {o / r:>6.3f}x {m:>13.2f}s "
                  f"{m / args.replications / r:>11.3f}x {1e3 * m / steps:>17.3f} "
                  f"{1e6 * m / (steps * lot * args.replications):>15.3f}", flush=True)


if __name__ == "__main__":
    main()
