"""The budget authority's throughput: grants per second with 8 concurrent workers, against one thread's plain loop.

Run: ``.venv/bin/python benchmarks/bench_authority.py [--grants N] [--no-ray]``. One grant is a reservation and the
release of its output: two fsynced ledger records. Prints, each measured in this run on a fresh session (budget
ε = 10⁶, so nothing is refused; ε = 10⁻³ Laplace charges, the default ``tightest`` accountant, whose RDP fast path
admits them):

1. the reference: ``Session.charge`` + ``Session.record_release`` in a loop in one thread, N grants;
2. :class:`~dpaudit.authority.BudgetAuthority` with 8 worker threads, N grants in all, each with its own key;
3. the Ray actor (:mod:`dpaudit.authority_ray`, local Ray with 2 CPUs) with 8 Ray tasks, N grants in all (Ray's
   start-up is not timed; skipped with ``--no-ray``);

as grants/s and as a ratio to the reference. The ledger appends are serialised (one hash chain, each record fsynced
before the next), so the ratio above 1 that concurrency could give is bounded by what the fsyncs leave; the ratio
shows what the authority's bookkeeping, and Ray's round trips, cost on top. The load average is printed with the
results (wall-clock figures on a shared machine). Runs are written under a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from dpaudit.authority import BudgetAuthority
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.session import Session

WORKERS = 8
BUDGET = 1e6
EPSILON = 1e-3


def _session(root: Path) -> Session:
    return Session(epsilon=BUDGET, delta=1e-6, name="bench-authority", store=root, mirror=False,
                   rng=SeededRandom(0))


def bench_reference(root: Path, grants: int) -> float:
    """Grants/s of a plain charge + release loop in one thread."""
    session = _session(root)
    event = session.laplace_event(1.0, EPSILON)
    start = time.perf_counter()
    for _ in range(grants):
        session.record_release(session.charge(event, plugin="bench", mechanism="laplace"), 1.0)
    elapsed = time.perf_counter() - start
    session.close()
    return grants / elapsed


def bench_threads(root: Path, grants: int) -> float:
    """Grants/s of 8 threads reserving and releasing through one in-process authority."""
    authority = BudgetAuthority(_session(root))
    event = authority.session.laplace_event(1.0, EPSILON)

    def work(worker: int) -> None:
        for i in range(grants // WORKERS):
            authority.release(authority.reserve(event, key=f"w{worker}/{i}", plugin="bench", mechanism="laplace"), 1.0)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    authority.close()
    return (grants // WORKERS) * WORKERS / elapsed


def bench_ray(root: Path, grants: int) -> float:
    """Grants/s of 8 Ray tasks reserving and releasing through the authority actor."""
    import ray

    from dpaudit.authority_ray import start_authority

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        authority = start_authority(BUDGET, 1e-6, name="bench-authority", store=str(root), mirror=False,
                                    rng=SeededRandom(0))
        return _ray_rate(ray, authority, grants)
    finally:
        ray.shutdown()


def _ray_rate(ray, authority, grants: int) -> float:
    from dpaudit.mechanisms.laplace import laplace_event
    from dpaudit.sensitivity import Neighbouring, Norm, declared

    event = laplace_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "bench"), EPSILON)

    @ray.remote(num_cpus=0.25)
    def work(worker: int) -> None:
        for i in range(grants // WORKERS):
            grant = ray.get(authority.reserve.remote(event, f"w{worker}/{i}", "bench", "laplace"))
            ray.get(authority.release.remote(grant, 1.0))

    ray.get([ray.remote(num_cpus=0.25)(lambda: None).remote() for _ in range(WORKERS)])  # worker processes up
    start = time.perf_counter()
    ray.get([work.remote(w) for w in range(WORKERS)])
    elapsed = time.perf_counter() - start
    ray.get(authority.close.remote())
    return (grants // WORKERS) * WORKERS / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grants", type=int, default=400, help="grants per measurement (default 400)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray actor measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-authority-") as tmp:
        root = Path(tmp)
        reference = bench_reference(root, args.grants)
        print(f"reference: Session.charge + record_release, 1 thread, {args.grants} grants: {reference:.0f} grants/s")
        threads = bench_threads(root, args.grants)
        print(f"BudgetAuthority, {WORKERS} threads: {threads:.0f} grants/s = {threads / reference:.2f}x the reference")
        if not args.no_ray:
            actor = bench_ray(root, args.grants)
            print(f"Ray actor, {WORKERS} Ray tasks: {actor:.0f} grants/s = {actor / reference:.2f}x the reference")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
