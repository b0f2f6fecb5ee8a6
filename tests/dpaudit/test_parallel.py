"""dpaudit.parallel: results in submission order on every executor, a failed or killed worker reported (never
lost), workers that can draw only their driver's seeds and write nothing."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.parallel import (
    DetachedView,
    ParallelOptions,
    ProcessExecutor,
    RayExecutor,
    ReplaySeeds,
    SequentialExecutor,
    TrialFailure,
    predraw,
)
from dpaudit.sensitivity import Neighbouring


def scaled(shared: int, job: int) -> int:
    """A pure trial: the job times the shared factor; job 3 raises, job 5 kills its own worker process."""
    if job == 3:
        raise ValueError("diverged")
    if job == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return shared * job


def threads(shared: None, job: int) -> int:
    import torch

    return torch.get_num_threads()


def test_sequential_keeps_order_and_reports_a_raising_trial():
    out = SequentialExecutor().map(scaled, 10, [0, 1, 2, 3, 4])
    assert out == [0, 10, 20, TrialFailure("ValueError: diverged"), 40]


def test_process_pool_matches_the_sequential_order_and_pins_one_thread():
    with ProcessExecutor(2) as executor:
        assert executor.map(scaled, 7, [4, 3, 2, 1, 0]) == [28, TrialFailure("ValueError: diverged"), 14, 7, 0]
        assert executor.map(threads, None, [0, 1]) == [1, 1]
        assert executor.map(scaled, 7, []) == []


def test_a_killed_worker_is_a_failure_not_a_lost_trial():
    """Attack: SIGKILL a worker mid-batch. Every job still has an outcome, the killed one (and any the broken pool
    could not finish) a TrialFailure naming the dead worker; a later batch gets a fresh pool."""
    with ProcessExecutor(2) as executor:
        out = executor.map(scaled, 2, [1, 5, 2])
        assert len(out) == 3
        assert isinstance(out[1], TrialFailure) and "worker process died" in out[1].reason
        assert all(o == 2 * j or isinstance(o, TrialFailure) for o, j in zip(out, [1, 5, 2], strict=True))
        assert executor.map(scaled, 2, [1, 2]) == [2, 4]


def test_a_job_the_broken_pool_refuses_is_a_failure_too(monkeypatch):
    """Race found in CI: the first job killed its worker before the last was submitted, and the pool's submit raised
    BrokenProcessPool out of ``map``. Forced here: every submit after the first is refused as by a broken pool."""
    import concurrent.futures

    real_submit = concurrent.futures.ProcessPoolExecutor.submit
    calls = []

    def submit_then_break(self, fn, /, *args, **kwargs):
        calls.append(fn)
        if len(calls) > 1:
            raise concurrent.futures.process.BrokenProcessPool("A child process terminated abruptly")
        return real_submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures.ProcessPoolExecutor, "submit", submit_then_break)
    with ProcessExecutor(2) as executor:
        out = executor.map(scaled, 2, [1, 2, 4])
    assert out[0] == 2
    assert all(isinstance(o, TrialFailure) and "worker process died" in o.reason for o in out[1:])


def test_ray_local_matches_the_sequential_results():
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import a test module
    with RayExecutor(2) as executor:
        out = executor.map(scaled, 3, [2, 3, 5, 1])
        assert out[0] == 6 and out[3] == 3
        assert out[1] == TrialFailure("ValueError: diverged")
        assert isinstance(out[2], TrialFailure) and "worker process died" in out[2].reason
        assert executor.map(threads, None, [0]) == [1]


def test_replay_seeds_give_exactly_the_driver_draws():
    rng, copy = SeededRandom(4), SeededRandom(4)
    draws = predraw(rng, 2**63, 3)
    replay = ReplaySeeds(draws, for_release=False)
    assert [replay.randbelow(2**63) for _ in range(2)] == [copy.randbelow(2**63) for _ in range(2)]
    with pytest.raises(PluginError, match="used 2 of the 3"):
        replay.check_exhausted()
    with pytest.raises(PluginError, match="below 10"):
        replay.randbelow(10)  # another range than the driver drew
    replay.randbelow(2**63)
    replay.check_exhausted()
    with pytest.raises(PluginError, match="more than the 3"):
        replay.randbelow(2**63)
    assert replay.describe() == {"kind": "replay", "draws": 3, "for_release": False}


def test_a_detached_view_writes_nothing():
    view = DetachedView(ReplaySeeds((), True), "cpu", Neighbouring.ADD_REMOVE, charges=(4,))
    assert str(view.device) == "cpu" and view.neighbouring is Neighbouring.ADD_REMOVE

    class Charge:
        seq = 4

    assert view.holds(Charge()) and not view.holds(type("Other", (), {"seq": 5})())
    for name in ("charge", "claim", "record_release", "record_info", "log_public_metrics", "data", "trial"):
        with pytest.raises(PluginError, match="belong to the driver"):
            getattr(view, name)
    assert not hasattr(view, "__deepcopy__")  # dunder look-ups stay AttributeError


@pytest.mark.parametrize("config, kind", [({}, SequentialExecutor), ({"workers": 1}, SequentialExecutor),
                                          ({"workers": 3}, ProcessExecutor)])
def test_options_choose_the_executor(config, kind):
    with ParallelOptions.from_mapping(config).executor() as executor:
        assert type(executor) is kind and executor.workers == config.get("workers", 1)


@pytest.mark.parametrize("bad", [{"workers": 0}, {"workers": 2.0}, {"workers": True}, {"workers": "2"},
                                 {"ray_address": ""}, {"ray_address": 5}])
def test_bad_options_are_refused(bad):
    with pytest.raises(InvalidParameter):
        ParallelOptions.from_mapping(bad)
