"""The budget authority as a Ray actor (local Ray, 2 CPUs): workers are Ray tasks in their own processes.

Attacks: 8 task workers with retried keys against one cap (no overrun, no duplicate record, a chain that verifies);
a worker process SIGKILLed between reserve and release (its grant stays charged; a task Ray re-runs reserves with its
key and gets the same grant); the authority actor killed mid-stream and resumed from its ledger. The load test
sends 25 requests per worker against a cap of ε = 0.05 rather than 1,000 (each request is up to two actor round
trips, 10-30 ms each on a shared 2-core machine; the in-process tests, tests/dpaudit/test_authority.py, send 1,000
per worker, and race 8 threads on each of 30 shared keys); the cap is lowered with the requests so that most
requests are still refused at it. One local Ray serves the whole module.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
import ray

from dpaudit.authority_ray import resume_authority, start_authority
from dpaudit.errors import BudgetExceeded
from dpaudit.ledger import read_records
from dpaudit.mechanisms.laplace import laplace_event
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.records import CHARGE, RELEASE, ChargeBody, ReleaseBody
from dpaudit.sensitivity import Neighbouring, Norm, declared
from dpaudit.verify import verify_bundle
from tests.dpaudit._authority_load import spend_requests

EVENTS = tuple(laplace_event(Neighbouring.ADD_REMOVE, declared(1.0, Norm.L1, "test"), e, label="spend")
               for e in (0.001, 0.002, 0.005, 0.01))


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module (2 CPUs, no dashboard), shut down after."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _authority(epsilon: float):
    store = os.environ["DPAUDIT_HOME"]  # the test's store, whose key verify trusts; the actor is told it
    return start_authority(epsilon, 1e-6, name="ray", mirror=False, accountant="basic", rng=SeededRandom(0),
                           store=store), store


def _ledger(authority):
    records, problems = read_records(Path(ray.get(authority.run_dir.remote())) / "ledger.jsonl")
    assert not problems
    charges = [(r.seq, ChargeBody.from_dict(r.body)) for r in records if r.type == CHARGE]
    releases = [ReleaseBody.from_dict(r.body) for r in records if r.type == RELEASE]
    return records, charges, releases


def _close_and_verify(authority, epsilon: float):
    run_dir = Path(ray.get(authority.run_dir.remote()))
    _, charges, _ = _ledger(authority)
    certificate = ray.get(authority.close.remote())
    assert certificate["claim"]["epsilon"] <= epsilon
    assert all(body.epsilon_spent <= epsilon for _, body in charges)
    assert sum((Fraction(body.privacy_event().epsilon) for _, body in charges), Fraction(0)) <= epsilon
    report = verify_bundle(run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    return certificate


@ray.remote(max_retries=0)
def _spend(authority, worker: int, requests: int) -> Counter:
    """One worker task: random sizes, 30% of the requests retry an earlier key with the same event and value."""
    rng = random.Random(worker)
    values: dict[str, float] = {}
    stats: Counter = Counter()
    for key, event in spend_requests(rng, worker, requests, EVENTS):
        try:
            grant = ray.get(authority.reserve.remote(event, key, "worker", "laplace"))
        except BudgetExceeded:
            stats["refused"] += 1
            continue
        ray.get(authority.release.remote(grant, values.setdefault(key, float(rng.randint(0, 9)))))
        stats["granted"] += 1
    return stats


def test_eight_ray_workers_against_one_cap_no_overrun_no_duplicate():
    authority, _ = _authority(0.05)
    stats = sum(ray.get([_spend.options(num_cpus=0.25).remote(authority, w, 25) for w in range(8)]), Counter())
    assert stats["granted"] + stats["refused"] == 200 and stats["granted"] > 5 and stats["refused"] > 50, stats
    _, charges, releases = _ledger(authority)
    assert max(Counter(body.key for _, body in charges).values()) == 1  # zero duplicate records for a key
    released = Counter(r.charge_seq for r in releases)
    assert max(released.values()) == 1 and set(released) == {seq for seq, _ in charges}
    assert ray.get(authority.unreleased.remote()) == ()
    _close_and_verify(authority, 0.05)


@ray.remote
def _reserve_then_die(authority, key: str, marker: str) -> float:
    """Reserve, then SIGKILL this worker process before the release; on a re-run (the marker exists) finish."""
    grant = ray.get(authority.reserve.remote(EVENTS[3], key, "worker", "laplace"))
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    ray.get(authority.release.remote(grant, 7.0))
    return 7.0


def test_a_worker_killed_between_reserve_and_release_leaves_its_grant_charged(tmp_path):
    authority, _ = _authority(1.0)
    with pytest.raises(ray.exceptions.WorkerCrashedError):  # no retry: the worker is gone for good
        ray.get(_reserve_then_die.options(max_retries=0).remote(authority, "dies", str(tmp_path / "died")))
    # re-run by Ray after the kill: the retried reserve gets the same grant, nothing is charged twice
    assert ray.get(_reserve_then_die.options(max_retries=1).remote(authority, "retried",
                                                                   str(tmp_path / "retried"))) == 7.0
    _, charges, releases = _ledger(authority)
    assert [body.key for _, body in charges] == ["dies", "retried"]
    assert [r.charge_seq for r in releases] == [charges[1][0]]
    assert [g.key for g in ray.get(authority.unreleased.remote())] == ["dies"]
    certificate = _close_and_verify(authority, 1.0)
    assert certificate["claim"]["epsilon"] >= 0.02  # both charges count, the one never released included


def test_the_authority_actor_killed_mid_stream_is_resumed_from_its_ledger():
    authority, store = _authority(1.0)
    run_id = ray.get(authority.run_id.remote())
    granted = [ray.get(authority.reserve.remote(EVENTS[i % 4], f"k{i}", "worker", "laplace")) for i in range(6)]
    for grant in granted[:4]:
        ray.get(authority.release.remote(grant, 1.0))
    ray.kill(authority, no_restart=True)  # the actor's process is killed; its ledger stays as it was
    resumed = resume_authority(run_id, store=store, rng=SeededRandom(1))  # a seeded run resumes with a new seed
    assert [g.key for g in ray.get(resumed.unreleased.remote())] == ["k4", "k5"]
    assert ray.get(resumed.reserve.remote(EVENTS[0], "k0", "worker", "laplace")) == granted[0]  # a retry: same
    ray.get(resumed.release.remote(granted[4], 2.0))  # a worker that outlived the authority releases its grant
    ray.get(resumed.release.remote(ray.get(resumed.reserve.remote(EVENTS[1], "k6", "worker", "laplace")), 3.0))
    _, charges, _ = _ledger(resumed)
    assert [body.key for _, body in charges] == [f"k{i}" for i in range(7)]
    assert [g.key for g in ray.get(resumed.unreleased.remote())] == ["k5"]
    _close_and_verify(resumed, 1.0)
