"""Start-up cost of the ``dpaudit`` command line, against bare Python and ``import click`` measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_cli.py [--repeats N] [--run RUN] [--only COMMAND...]``. Each command
runs ``--repeats`` times as a fresh subprocess (the way a user runs it); the median wall time is printed, absolute
and as a ratio to the two floors, with the median CPU time (user + system) of the process, which moves less than the
wall time when other jobs share the cores:

1. ``python -c pass`` (interpreter start-up, site packages);
2. ``python -c "import click"`` (the least any click program pays).

The commands, each run as the console script runs it (``dpaudit.cli.program``): ``--help``, an argument error,
``report``, ``export``, ``verify`` and ``account`` (``laplace`` and ``dpsgd``, and ``account ledger`` of the run).
``verify``, ``report``, ``export`` and ``account ledger`` read a demo-like run: ``--run`` names one (e.g. a full
``dpaudit demo`` run folder), otherwise the small seeded demo of the tests (constant-overhead selection + DP-SGD on
2000 Adult records, 1 epoch; its ledger has the demo's shape: AboveThreshold rounds and DP-SGD charges) is built
first in a temporary store, which is not what is measured.
The targets (issue 14): help, argument errors, report and export under 0.5 s; verify and account under 1.5 s.
Run it from a folder other than the checkout to time another copy of the package through ``PYTHONPATH`` (in the
checkout, ``python -c`` puts the working directory first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TARGETS = {"help": 0.5, "argument error": 0.5, "report": 0.5, "export": 0.5, "verify": 1.5, "account laplace": 1.5,
           "account dpsgd": 1.5, "account ledger": 1.5}


def build_demo_run(root: Path) -> Path:
    """The tests' small seeded demo in the store ``root``; returns its run folder."""
    from dpaudit.demo import DEMO_CANDIDATES, run_demo

    small = {"candidates": [dict(c) for c in DEMO_CANDIDATES[2:5]], "k": 4, "t_max": 3, "fallback": 0,
             "train_rows": 2000, "test_rows": 1000}
    summary = run_demo(store=root, seed=0, epochs=1, overrides=small, echo=lambda _: None)
    return Path(summary["run_dir"])


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_seconds(argv: list[str] | Callable[[int], list[str]], repeats: int, env: dict[str, str],
                   ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(median wall time, median CPU time) of ``argv`` (or ``argv(i)`` for repetition i) as a fresh process; fails
    loudly on an unexpected exit status."""
    times, cpu = [], []
    for i in range(repeats):
        argv_i = argv(i) if callable(argv) else argv
        t0, c0 = time.perf_counter(), _children_cpu()
        done = subprocess.run(argv_i, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        cpu.append(_children_cpu() - c0)
        if done.returncode not in ok:
            raise SystemExit(f"{' '.join(argv_i)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return statistics.median(times), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--run", type=Path, default=None, help="a demo run folder (default: build the small demo)")
    parser.add_argument("--only", nargs="+", choices=sorted(TARGETS), default=None, help="measure these commands only")
    args = parser.parse_args()
    python = sys.executable
    dpaudit = [python, "-c", "from dpaudit.cli import program; program()"]  # what the console script runs
    with tempfile.TemporaryDirectory() as tmp:
        store = args.run.resolve().parent if args.run is not None else Path(tmp) / "store"  # its key is trusted
        env = {**os.environ, "DPAUDIT_HOME": str(store), "MLFLOW_TRACKING_URI": f"sqlite:///{Path(tmp) / 'mlflow.db'}"}
        os.environ.update(env)
        run = args.run if args.run is not None else build_demo_run(store)
        export_dir = Path(tmp) / "export"
        commands = {
            "help": (dpaudit + ["--help"], (0,)),
            "argument error": (dpaudit + ["verify", "--no-such-option"], (2,)),
            "report": (dpaudit + ["report", str(run)], (0,)),
            "export": (lambda i: dpaudit + ["export", str(run), str(export_dir / str(i))], (0,)),
            # exit 1 is accepted: a run made by an older version may fail the report check; the time is the point
            "verify": (dpaudit + ["verify", str(run), "--allow-not-for-release"], (0, 1)),
            "account laplace": (dpaudit + ["account", "laplace", "--sensitivity", "1", "--epsilon", "0.5"], (0,)),
            "account dpsgd": (dpaudit + ["account", "dpsgd", "--sample-rate", "0.0157", "--noise-multiplier", "1.0",
                                         "--steps", "192", "--delta", "1e-5"], (0,)),
            "account ledger": (dpaudit + ["account", "ledger", str(run)], (0,)),
        }
        floor, floor_cpu = median_seconds([python, "-c", "pass"], args.repeats, env)
        click, _ = median_seconds([python, "-c", "import click"], args.repeats, env)
        print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, median of {args.repeats} runs each")
        print(f"python -c pass:          {floor:6.3f} s (CPU {floor_cpu:.3f} s)")
        print(f"python -c 'import click': {click:6.3f} s")
        print(f"{'command':<16} {'seconds':>8} {'/ python':>9} {'/ click':>8} {'CPU s':>7} {'target':>7}")
        for name, (argv, ok) in commands.items():
            if args.only is not None and name not in args.only:
                continue
            seconds, cpu = median_seconds(argv, args.repeats, env, ok)
            verdict = "ok" if seconds <= TARGETS[name] else "OVER"
            print(f"{name:<16} {seconds:8.3f} {seconds / floor:9.1f} {seconds / click:8.1f} {cpu:7.3f} "
                  f"{TARGETS[name]:6.1f}s {verdict}")
        print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
