"""Opening a mirrored Session in a fresh process, against bare Python start-up measured in the same run.

Each figure is measured in its own fresh process (``--repeats`` times; median), with a warm embedded MLflow store
(created once, untimed, before the measurements) and a fresh run folder per process:

* floor: the wall time of ``python -c "import dpaudit"``;
* ``Session(...)``: the constructor alone, timed inside the child (key, store id, ledger, open record; the MLflow
  mirror only queued); target <= 0.5 s;
* until the mirror has connected: the constructor plus the wait for the mirror's worker to import MLflow, check
  the store and create the run (``SessionMirror.wait``): what opening cost before the mirror was lazy;
* the whole child process (``from dpaudit import Session``, open, close), for reference.

Prints the ratios of each to the floor, and whether MLflow was imported when the constructor returned.
Usage: ``python benchmarks/bench_session_open.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.5

CHILD = """
import json, sys, time
start = time.perf_counter()
from dpaudit import Session
imported = time.perf_counter()
s = Session(1.0, 1e-6, name="bench-open", store=sys.argv[1], tracking_uri=sys.argv[2])
opened = time.perf_counter()
mlflow_at_open = "mlflow" in sys.modules
assert s._tracking.wait()
connected = time.perf_counter()
s.close()
print(json.dumps({"import": imported - start, "open": opened - imported, "connected": connected - imported,
                  "mlflow_at_open": mlflow_at_open, "error": repr(s._tracking.error)}))
"""


def wall(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_LOGGING_LEVEL": "WARNING"}
    with tempfile.TemporaryDirectory(prefix="dpaudit-bench-open-") as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlruns' / 'mlflow.db'}"
        child = [sys.executable, "-c", CHILD]
        wall(child + [str(Path(tmp) / "warm-up"), uri], env)  # creates the store (not timed)
        floor, opens, connects, processes, at_open = [], [], [], [], []
        for i in range(args.repeats):
            floor.append(wall([sys.executable, "-c", "import dpaudit"], env)[0])
            seconds, out = wall(child + [str(Path(tmp) / f"runs-{i}"), uri], env)
            result = json.loads(out.strip().splitlines()[-1])
            assert result["error"] == "None", result["error"]
            opens.append(result["open"])
            connects.append(result["connected"])
            processes.append(seconds)
            at_open.append(result["mlflow_at_open"])
    base = statistics.median(floor)
    rows = [("python -c 'import dpaudit' (floor)", base),
            ("Session(...) with the mirror on", statistics.median(opens)),
            ("... until the mirror has connected", statistics.median(connects)),
            ("whole process: import, open, close", statistics.median(processes))]
    print(f"median of {args.repeats} fresh processes, warm store, fresh run folder each")
    for name, seconds in rows:
        print(f"{name:38s}: {seconds:7.3f} s  ratio {seconds / base:6.1f}x")
    opened = statistics.median(opens)
    print(f"Session open {opened:.3f} s (target <= {TARGET_S} s: {'met' if opened <= TARGET_S else 'NOT met'}); "
          f"MLflow imported when the constructor returned: {any(at_open)}")


if __name__ == "__main__":
    main()
