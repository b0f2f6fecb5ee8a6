"""dpareto's trials in parallel (docs/plugins/dpareto.md, "Parallel trials").

The frozen outputs below were produced by the sequential code *before* trials could run in parallel (same
configurations, ``SeededRandom(7)``): ``workers = 1`` must reproduce them bit for bit, the ledger's record sequence
included (the qLogNEHVI points to 10⁻⁴: their acquisition optimum moves in the last digits from CPU to CPU), and
``workers = 2`` must be reproducible under a seed.
"""

from __future__ import annotations

import pytest

from dpaudit.data.adult_a1a import EVAL_NAME, TEST_NAME, TRAIN_NAME
from dpaudit.epsilon_claims import RELEASE_CLAIM_KEY
from dpaudit.errors import InvalidParameter
from dpaudit.parallel import Executor, ParallelOptions, SequentialExecutor, TrialFailure
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dpareto.config import DparetoConfig, parse_config
from dpaudit_plugins.dpareto.plugin import run
from dpaudit_plugins.dpareto.search import Observations
from dpaudit_plugins.dpareto.trials import Trial

from .charging_task import LaplaceTask

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ADULT_RANDOM = {"task": {"name": "adult-logreg-sgd", "replications": 2, "rows": 600}, "method": "random",
                "n_trials": 3, "front": "private", "evaluation_epsilon": 0.5}
SVT_BO = {"task": {"name": "svt"}, "method": "qlognehvi", "n_initial": 3, "n_iterations": 2, "raw_samples": 32,
          "restarts": 1, "acquisition_maxiter": 10, "mc_samples": 16}

# (params, epsilon, released error) of the sequential code, SeededRandom(7); the second error re-frozen when the linear
# trainer's noise became float64 (review: float32 draws are cut off at 5.77σ), the only change in these outputs
FROZEN_ADULT = [
    ({"epochs": 32, "batch_size": 23, "lr": 0.0013056066848993093, "noise_multiplier": 0.5365226337077108,
      "max_grad_norm": 1.41981700527869}, 36.847745155318066, 0.2440067659657321),
    ({"epochs": 38, "batch_size": 64, "lr": 0.014718026599769703, "noise_multiplier": 15.957224564820965,
      "max_grad_norm": 3.291259656794839}, 0.47536205886573796, 0.22759260611370719),
    ({"epochs": 43, "batch_size": 213, "lr": 0.008889797800327271, "noise_multiplier": 3.8605974766235067,
      "max_grad_norm": 0.22367354186423963}, 4.154177289720412, 0.24276917834890968),
]
FROZEN_ADULT_RECORDS = ["dpareto_plan"] + [
    "charge", "charge", "data_access", "data_access", "charge_seq", "release", "charge_seq", "release",
    "charge", "release", "public_metrics", "dpareto_trial"] * 3 + ["dpareto_front", "public_artifact", "close"]
"""Per trial: its two replications' charges, the two data accesses, each model's run info and release, the
error's Laplace charge and release, the metrics and the trial's info; then the front, the artifact, the close."""
FROZEN_SVT = [
    ({"C": 8, "b": 0.018953107541497996}, 1364.9184573569883, 0.11111111111111116),
    ({"C": 26, "b": 3.4151803648381533}, 20.691191428752333, 0.8085714285714286),
    ({"C": 19, "b": 0.15110490813296662}, 355.14964209830276, 0.039263415455635275),
    ({"C": 14, "b": 100.0}, 0.4125746155599256, 0.8757894736842106),
    ({"C": 10, "b": 35.12082860132115}, 0.8850155833939078, 0.8837894736842105),
]


def _run(make_session, ledger_content, config, protected, public_data=()):
    with make_session(1e12, 1e-5, seed=7, adaptive=True, protected=protected, public=public_data) as session:
        out = run(session, config)
    ledger = ledger_content(session.ledger_path)
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    return out, ledger


def _kind(kind, body):
    """An ``info`` record's first key, else the record's type."""
    return next(iter(body["info"])) if kind == "info" else kind


def _points(out):
    return [(t["params"], t["epsilon"], t["error"]) for t in out["trials"]]


def test_one_worker_reproduces_the_sequential_code_bit_for_bit_adult_private_front(make_session, ledger_content):
    """Attack: a split trial that moved a charge, a data access, a claim, a seed draw or the error's Laplace release
    changes the points BO picks, the released errors or the ledger's record sequence."""
    out, ledger = _run(make_session, ledger_content, ADULT_RANDOM, (TRAIN_NAME, EVAL_NAME))
    assert _points(out) == FROZEN_ADULT
    assert [_kind(kind, body) for kind, body in ledger] == FROZEN_ADULT_RECORDS


def _close_to(points, frozen, rel):
    """``points`` equal to ``frozen`` in their parameter names, integers and count, every float within ``rel``."""
    def same(a, b):
        if isinstance(a, float) or isinstance(b, float):
            return a == pytest.approx(b, rel=rel)
        if isinstance(a, (tuple, list)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
        return type(a) is type(b) and a == b
    return same(points, frozen)


def test_one_worker_reproduces_the_sequential_code_svt_qlognehvi(make_session, ledger_content):
    """Same trials as the sequential code, to the last digits that the CPU's kernels move: qLogNEHVI's acquisition
    is optimised by L-BFGS-B through torch, whose float64 reductions differ by CPU (a Sapphire Rapids machine moved
    the fifth trial's b by 5e-6 relative). A moved seed draw or charge gives other points altogether."""
    out, _ = _run(make_session, ledger_content, SVT_BO, (TRAIN_NAME,))
    assert _close_to(_points(out), FROZEN_SVT, rel=1e-4)
    assert not _close_to(_points(out)[:4] + [({"C": 10, "b": 35.2}, *FROZEN_SVT[4][1:])], FROZEN_SVT, rel=1e-4)


def test_two_worker_processes_run_the_trials_of_the_sequential_path_and_charge_each_batch_before_it_runs(
        make_session, ledger_content):
    """Attack: a worker that drew its own seed, results taken in arrival order, a split trial that differs from the
    task's in-driver evaluation, or a private-front error released by the worker (or not at all) would change the
    trials or fail verification; a trial dispatched before its charge would show a data access ahead of the
    charges of its batch. With public evaluation data and a fixed plan the session draws only the trials' seeds, in
    trial order, so two workers must give exactly the sequential trials."""
    public = {**ADULT_RANDOM, "task": {**ADULT_RANDOM["task"], "replications": 1}}
    public.pop("front"), public.pop("evaluation_epsilon")
    sequential, _ = _run(make_session, ledger_content, public, (TRAIN_NAME,), public_data=(TEST_NAME,))
    parallel, _ = _run(make_session, ledger_content, {**public, "workers": 2}, (TRAIN_NAME,), public_data=(TEST_NAME,))
    assert _points(parallel) == _points(sequential)

    private, ledger = _run(make_session, ledger_content, {**ADULT_RANDOM, "workers": 2}, (TRAIN_NAME, EVAL_NAME))
    assert all(t["failure"] is None for t in private["trials"])
    kinds = [_kind(kind, body) for kind, body in ledger]
    # batch 1 = trials 0 and 1 (two replications each): all charged before either reads data; batch 2 = trial 2
    assert kinds[1:6] == ["charge"] * 4 + ["data_access"]
    releases = [body for kind, body in ledger if kind == "release" and "private front" in body.get("label", "")]
    assert [t[RELEASE_CLAIM_KEY]["label"] for t in private["trials"]] == [body["label"] for body in releases]


def test_bo_proposes_batches_of_the_worker_count(make_session, ledger_content):
    """Batch BO on the SVT example (workers = 2, a process pool): HVPoI's kriging-believer batches and
    qLogNEHVI's q-batches give distinct points and every planned trial once; the same run under the same seed."""
    for method in ("hvpoi", "qlognehvi"):
        config = {**SVT_BO, "method": method, "n_iterations": 4, "workers": 2}
        if method == "hvpoi":
            config.pop("mc_samples")
        out, _ = _run(make_session, ledger_content, config, (TRAIN_NAME,))
        if method == "hvpoi":
            again, _ = _run(make_session, ledger_content, config, (TRAIN_NAME,))
            assert _points(out) == _points(again)
        points = [tuple(t["params"].values()) for t in out["trials"]]
        phases = [t["phase"] for t in out["trials"]]
        assert len(points) == 7 and phases[:3] == ["initial"] * 3 and set(phases[3:]) <= {"bo", "bo-fallback"}
        assert points[3] != points[4] and points[5] != points[6]  # a batch's points differ


class _DyingExecutor(Executor):
    """Two "workers" in this process; reports the second job it runs as a worker that died (out of memory, a node
    lost)."""

    workers = 2

    def __init__(self) -> None:
        self.jobs = 0

    def map(self, fn, shared, jobs):
        outcomes = []
        for outcome in SequentialExecutor().map(fn, shared, jobs):
            self.jobs += 1
            outcomes.append(TrialFailure("worker process died: killed") if self.jobs == 2 else outcome)
        return outcomes


def test_a_trial_whose_worker_died_keeps_its_charges_and_never_reaches_the_gp(make_session, monkeypatch,
                                                                               ledger_content):
    monkeypatch.setattr(ParallelOptions, "executor", lambda self: _DyingExecutor())
    config = {**ADULT_RANDOM, "task": {**ADULT_RANDOM["task"], "replications": 1}}
    out, ledger = _run(make_session, ledger_content, config, (TRAIN_NAME, EVAL_NAME))
    failed = out["trials"][1]
    assert failed["error"] is None and "worker process died" in failed["failure"]
    assert failed["charges"] and RELEASE_CLAIM_KEY not in failed
    assert len([k for k, _ in ledger if k == "charge"]) == 5  # 3 trials + 2 error releases: the dead one's stays
    released = {body["charge_seq"] for kind, body in ledger if kind == "release"}
    assert not set(failed["charges"]) & released  # nothing of the dead trial was released
    trials = [Trial(t["index"], t["phase"], (0.0,), t["params"], t["epsilon"], None, t["error"], t["failure"], ())
              for t in out["trials"]]
    assert Observations.of(trials).valid.tolist() == [True, False, True]


def test_parallel_options_are_parsed_and_a_task_without_split_trials_is_refused():
    assert parse_config({**SVT_BO, "workers": 3, "ray_address": "local"}).parallel == ParallelOptions(3, "local")
    with pytest.raises(InvalidParameter, match="workers"):
        parse_config({**SVT_BO, "workers": 0})
    with pytest.raises(InvalidParameter, match="cannot run them in parallel"):  # before any session exists
        DparetoConfig(task=LaplaceTask(), parallel=ParallelOptions(workers=2))
