"""``dpaudit verify`` on a 10^5-record ledger, against the bare cost of reading and hashing the same file.

Run: ``.venv/bin/python benchmarks/bench_verify.py [--releases N]``. Builds a real session run with N Laplace
releases (2N + 2 records; 10^5 records for the default N), with fsync disabled *while building only* (the
build is not what is measured), then times:

1. reference: ``json.loads`` and SHA-256 of every ledger line (the floor for any verifier);
2. ``verify_bundle``: chain, head, signature, per-charge sensitivity and privacy-map checks, recomposition with
   the session's accountant and the independent re-check.

Prints both times and their ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from unittest import mock

from dpaudit import Session, from_formula
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.trust import KeyTrust
from dpaudit.verify import verify_bundle


def build_run(root: Path, releases: int) -> Path:
    count = from_formula("count", "add_remove")
    with mock.patch("os.fsync"), Session(epsilon=1e9, delta=1e-6, rng=SeededRandom(0), mirror=False,
                                         store=root) as s:
        for i in range(releases):
            s.laplace(float(i), count, epsilon=0.01, label="count")
    return s.run_dir


def reference(ledger: Path) -> None:
    with open(ledger, "rb") as fh:
        for line in fh:
            json.loads(line)
            hashlib.sha256(line).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--releases", type=int, default=49_999)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_dir = build_run(Path(tmp), args.releases)
        built = time.perf_counter() - t0
        n_records = len((run_dir / "ledger.jsonl").read_bytes().splitlines())
        t0 = time.perf_counter()
        reference(run_dir / "ledger.jsonl")
        ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = verify_bundle(run_dir, allow_not_for_release=True, trust=KeyTrust.default(tmp))
        verify = time.perf_counter() - t0
    assert report.valid, report.reasons
    print(f"built {n_records} records in {built:.1f} s (fsync off while building) on {os.cpu_count()} cores")
    print(f"reference (json.loads + sha256 per line): {ref:.2f} s")
    print(f"verify_bundle:                            {verify:.2f} s  ({n_records / verify:,.0f} records/s)")
    print(f"ratio verify / reference: {verify / ref:.1f}")


if __name__ == "__main__":
    main()
