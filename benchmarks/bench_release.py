"""One run at scale: 10^7-coordinate Laplace and Gaussian releases and an over-budget refusal, against floors.

Run: ``.venv/bin/python benchmarks/bench_release.py [--size N]``. Prints:

1. ``Session.laplace`` and ``Session.gaussian`` of an N-coordinate float64 array (charge, exact vectorised discrete
   noise, sidecar ``.npy`` written and fsynced, release record): the time of one release (and its process CPU
   time, less sensitive to other jobs on a shared machine), and the peak traced memory (tracemalloc, which numpy
   reports to) of a second, identical release as a multiple of the array's size (tracing slows numpy's many small
   allocations, so time and memory are measured on separate releases). Each against the floor: ``np.save`` +
   fsync + SHA-256 of the same array, which any durable release of it must pay.
2. The refusal of an over-budget request (budget ε = 1000, 30 earlier releases at ε = 10, a request at ε = 5000,
   the default ``tightest`` accountant), against one RDP admission of the same candidate (the filter's fast path).

The load average is printed with the results (the figures are wall-clock times). Everything is written under a
``tempfile.TemporaryDirectory`` that is removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dpaudit.accounting import get_accountant
from dpaudit.errors import BudgetExceeded
from dpaudit.events import compose
from dpaudit.session import Session

#: the releases measured: name -> the Session call on the array
RELEASES: dict[str, Callable[[Session, np.ndarray], np.ndarray]] = {
    "laplace": lambda session, array: session.laplace(array, sensitivity=1.0, epsilon=1.0, label="histogram"),
    "gaussian": lambda session, array: session.gaussian(array, sensitivity=1.0, epsilon=1.0, delta=1e-6,
                                                        label="gradient"),
}


def _floor_save(array: np.ndarray, path: Path) -> float:
    start = time.perf_counter()
    with open(path, "wb") as file:
        np.save(file, array)
        file.flush()
        os.fsync(file.fileno())
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 22):
            digest.update(block)
    return time.perf_counter() - start


def bench_release(root: Path, size: int) -> None:
    array = np.random.default_rng(0).normal(size=size)
    floor = _floor_save(array, root / "floor.npy")
    print(f"floor np.save + fsync + sha256 of {size:.0e} float64 ({array.nbytes / 2**20:.0f} MiB): {floor:.2f} s")
    session = Session(100.0, 1e-5, store=root / "store", mirror=False)
    for name, release in RELEASES.items():
        start, cpu = time.perf_counter(), time.process_time()
        out = release(session, array)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert out.shape == array.shape
        del out
        tracemalloc.start()
        release(session, array)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"{name} release: {elapsed:.2f} s = {elapsed / floor:.1f}x the floor (CPU {cpu:.2f} s); "
              f"peak traced memory {peak / 2**20:.0f} MiB = {peak / array.nbytes:.2f}x the array")
    session.close()


def bench_refusal(root: Path) -> None:
    session = Session(1000.0, 1e-5, store=root / "refusal", mirror=False)
    for _ in range(30):
        session.laplace(1.0, sensitivity=1.0, epsilon=10.0)
    event = session.laplace_event(1.0, 5000.0)
    rdp = get_accountant("rdp")
    candidate = compose([*session._filter.events, event])  # noqa: SLF001  (the filter's own candidate)
    start = time.perf_counter()
    rdp.epsilon(candidate, 1e-5)
    floor = time.perf_counter() - start
    start = time.perf_counter()
    try:
        session.laplace(1.0, sensitivity=1.0, epsilon=5000.0)
    except BudgetExceeded:
        pass
    else:
        raise AssertionError("the over-budget request was admitted")
    elapsed = time.perf_counter() - start
    session.close()
    print(f"over-budget refusal (budget 1000, 30 releases, request 5000): {elapsed * 1e3:.2f} ms; "
          f"floor one RDP bound {floor * 1e3:.2f} ms; ratio {elapsed / floor:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10**7)
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="dpaudit-bench-") as folder:
        bench_release(Path(folder), args.size)
        bench_refusal(Path(folder))


if __name__ == "__main__":
    main()
