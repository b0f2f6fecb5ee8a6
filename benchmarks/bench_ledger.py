"""Ledger cost: durable append against a bare write+fsync, and reading + verifying a 10^5-record ledger.

Run: ``.venv/bin/python benchmarks/bench_ledger.py [--appends N] [--records N]``. Prints:

1. ``Ledger.append`` (hash, canonical JSON, flock, size check, one ``os.write``, ``fsync``) per record, against
   ``os.write`` + ``os.fsync`` of the very same bytes on an ``O_APPEND`` descriptor in the same directory. The
   ratio is the price of the ledger's bookkeeping on top of the durability it must pay anyway. Also the session's
   signed head checkpoint after each append (:func:`dpaudit.head.write_head`: an Ed25519 signature and one
   ``pwrite`` into its slot, no fsync), as a ratio to ``Ledger.append``: what it adds to every record.
2. ``read_records`` and ``verify_chain`` on a ledger of ``--records`` records (built in memory, written once),
   in records per second, against ``json.loads`` of every line (the floor for any JSON-lines reader).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dpaudit.head import write_head
from dpaudit.ledger import GENESIS_PREV, Ledger, Record, read_records, verify_chain


def _charge_body(i: int) -> dict[str, object]:
    """A body shaped like a session's charge record (about 400 bytes)."""
    return {
        "event": {
            "kind": "poisson_subsampled_gaussian",
            "noise_multiplier": 1.1 + i * 1e-6,
            "sampling_rate": 0.01,
            "steps": 100,
            "neighbouring": "add_remove",
            "sensitivity": {"value": 1.0, "formula": "clipping", "inputs": {"max_grad_norm": 1.0}},
            "assumptions": [],
        },
        "plugin": "opacus-training",
        "mechanism": "dp-sgd",
        "epsilon_spent": 0.0123456789 * (i % 7),
        "bound_source": "rdp",
    }


def bench_append(directory: Path, n: int, rounds: int = 10) -> None:
    """Alternate ``rounds`` blocks of ledger appends and plain writes, so that disk and load drift hit both."""
    per_round = max(1, n // rounds)
    ledger = Ledger.create(directory / "append.jsonl")
    fd = os.open(directory / "plain.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    ledger_s = plain_s = head_s = 0.0
    key = Ed25519PrivateKey.generate()
    sizes: list[int] = []
    try:
        ledger.append("open", {"budget": {"epsilon": 8.0, "delta": 1e-5}})
        for r in range(rounds):
            bodies = [_charge_body(r * per_round + i) for i in range(per_round)]
            start = time.perf_counter()
            records = [ledger.append("charge", body) for body in bodies]
            ledger_s += time.perf_counter() - start
            start = time.perf_counter()
            for record in records:
                write_head(directory, "bench", record, key)
            head_s += time.perf_counter() - start
            lines = [record.to_line().encode("utf-8") for record in records]
            sizes += [len(line) for line in lines]
            start = time.perf_counter()
            for data in lines:
                os.write(fd, data)
                os.fsync(fd)
            plain_s += time.perf_counter() - start
    finally:
        ledger.close()
        os.close(fd)
    total = per_round * rounds
    print(f"append: {total} records of {statistics.mean(sizes):.0f} bytes, each fsync'ed, {rounds} alternating rounds")
    print(f"  Ledger.append        {1e6 * ledger_s / total:9.1f} us/record")
    print(f"  os.write + os.fsync  {1e6 * plain_s / total:9.1f} us/record (same bytes)")
    print(f"  ratio ledger / plain {ledger_s / plain_s:9.2f}")
    print(f"  head checkpoint      {1e6 * head_s / total:9.1f} us/record (sign, pwrite; after each append)")
    print(f"  ratio head / ledger  {head_s / ledger_s:9.2f}")


def _build(path: Path, n: int) -> None:
    prev = GENESIS_PREV
    t0 = time.time()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            unhashed = Record(seq=i, type="charge", time=t0 + i * 1e-3, prev=prev, body=_charge_body(i), hash="")
            record = Record(i, unhashed.type, unhashed.time, prev, unhashed.body, unhashed.compute_hash())
            f.write(record.to_line())
            prev = record.hash


def bench_verify(directory: Path, n: int) -> None:
    path = directory / "big.jsonl"
    _build(path, n)
    size_mb = path.stat().st_size / 1e6

    start = time.perf_counter()
    with open(path, encoding="utf-8") as f:
        floor = [json.loads(line) for line in f]
    json_s = time.perf_counter() - start
    assert len(floor) == n

    start = time.perf_counter()
    records, problems = read_records(path)
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    chain = verify_chain(records)
    verify_s = time.perf_counter() - start
    if problems or chain or len(records) != n:
        raise SystemExit(f"benchmark ledger did not verify: {problems[:3]} {chain[:3]}")

    start = time.perf_counter()
    Ledger.open(path).close()
    open_s = time.perf_counter() - start

    total = read_s + verify_s
    print(f"verify: {n} records, {size_mb:.1f} MB")
    print(f"  json.loads per line  {json_s:7.2f} s  {n / json_s:10.0f} records/s")
    print(f"  read_records         {read_s:7.2f} s  {n / read_s:10.0f} records/s")
    print(f"  verify_chain         {verify_s:7.2f} s  {n / verify_s:10.0f} records/s")
    print(f"  read + verify        {total:7.2f} s  {n / total:10.0f} records/s")
    print(f"  ratio (read + verify) / json.loads {total / json_s:.2f}")
    print(f"  Ledger.open          {open_s:7.2f} s  {n / open_s:10.0f} records/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    # In the working directory's file system, not /tmp, which may be a RAM disk where fsync costs nothing.
    with tempfile.TemporaryDirectory(prefix="bench_ledger_", dir=Path.cwd()) as tmp:
        bench_append(Path(tmp), args.appends)
        bench_verify(Path(tmp), args.records)


if __name__ == "__main__":
    main()
