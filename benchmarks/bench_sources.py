"""Loading a user's CSV source (dpaudit/data/sources.py ``load_source``) against ``pandas.read_csv`` of the same file.

Writes a CSV of ``--rows`` rows (an id, 10 float features, a 0/1 label) under a temporary folder, then prints the
seconds of ``pandas.read_csv`` alone (the floor: every source is read whole by it) and of ``load_source`` (the read,
the header check, the numeric, finiteness, id and label checks, the float32 conversion), their ratio, and the
process's peak resident memory after each. Run: ``.venv/bin/python benchmarks/bench_sources.py [--rows N]``
(the figures in docs/data.md are for ``--rows 1000000``).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dpaudit.data import csv
from dpaudit.data.sources import load_source


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    rows = parser.parse_args().rows
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "source.csv"
        rng = np.random.default_rng(0)
        table = np.column_stack([np.arange(rows), rng.normal(size=(rows, 10)), rng.integers(0, 2, rows)])
        np.savetxt(path, table, delimiter=",", header="id," + ",".join(f"f{i}" for i in range(10)) + ",y",
                   comments="", fmt="%.6g")
        del table
        start = time.perf_counter()
        pd.read_csv(path)
        floor, floor_peak = time.perf_counter() - start, _peak_mib()
        start = time.perf_counter()
        load_source(csv("bench", path, target="y", id_column="id", classes=2))
        loaded = time.perf_counter() - start
        print(f"{rows} rows, {path.stat().st_size / 2**20:.1f} MiB: pandas.read_csv {floor:.2f} s (peak "
              f"{floor_peak:.0f} MiB), load_source {loaded:.2f} s (peak {_peak_mib():.0f} MiB), "
              f"ratio {loaded / floor:.2f}")


if __name__ == "__main__":
    main()
