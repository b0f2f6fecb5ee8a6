"""One run at scale: a 10^7-coordinate Laplace release and an over-budget refusal, against floors measured here.

Run: ``.venv/bin/python benchmarks/bench_release.py [--size N]``. Prints:

1. ``Session.laplace`` of an N-coordinate float64 array (charge, exact vectorised discrete Laplace noise, sidecar
   ``.npy`` written and fsynced, release record) in seconds and peak traced memory (tracemalloc, which numpy
   reports to) as a multiple of the array's size, against the floor: ``np.save`` + fsync + SHA-256 of the same
   array, which any durable release of it must pay.
2. The refusal of an over-budget request (budget ε = 1000, 30 earlier releases at ε = 10, a request at ε = 5000,
   the default ``tightest`` accountant), against one RDP admission of the same candidate (the filter's fast path).

Everything is written under a ``tempfile.TemporaryDirectory`` that is removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from dpaudit.accounting import get_accountant
from dpaudit.errors import BudgetExceeded
from dpaudit.events import compose
from dpaudit.session import Session


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
    session = Session(10.0, 1e-5, store=root / "store", mirror=False)
    tracemalloc.start()
    start = time.perf_counter()
    out = session.laplace(array, sensitivity=1.0, epsilon=1.0, label="histogram")
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    session.close()
    assert out.shape == array.shape
    print(f"laplace release of {size:.0e} float64 ({array.nbytes / 2**20:.0f} MiB): {elapsed:.2f} s, "
          f"peak traced memory {peak / 2**20:.0f} MiB = {peak / array.nbytes:.2f}x the array")
    print(f"  floor np.save + fsync + sha256: {floor:.2f} s; ratio {elapsed / floor:.1f}x")


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
    with tempfile.TemporaryDirectory(prefix="dpaudit-bench-") as folder:
        bench_release(Path(folder), args.size)
        bench_refusal(Path(folder))


if __name__ == "__main__":
    main()
