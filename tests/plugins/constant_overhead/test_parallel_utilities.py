"""The grid's partition models in parallel (``workers``): the same utilities, results and ledger as one worker; a
partition model that fails or whose worker dies caches nothing and fails the run with its charges kept."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.ledger import read_records
from dpaudit.parallel import ProcessExecutor, SequentialExecutor, TrialsFailed
from dpaudit.records import FAILED
from dpaudit.tuning import Candidate
from dpaudit.verify import verify_bundle
from dpaudit_plugins.constant_overhead import PLUGIN, ConstantOverheadConfig, PartitionUtilities
from dpaudit_plugins.constant_overhead.partition_training import ValidationScorer, as_float_tensor

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

RNG = np.random.default_rng(3)
X = RNG.normal(size=(60, 3))
Y = (X[:, 0] > 0).astype(float)
MEMBERS = [np.arange(i, 60, 3) for i in range(3)]
CANDIDATES = (Candidate(lr=0.5, max_grad_norm=1.0, noise_multiplier=1.0, epochs=2, batch_size=4),
              Candidate(lr=4.0, max_grad_norm=0.5, noise_multiplier=1.0, epochs=1, batch_size=4))
SCORER = ValidationScorer(mode="privtrain", model_kind="logreg", hidden=1, n_features=3, X_val=as_float_tensor(X),
                          y_val=as_float_tensor(Y))


def failing_scorer(X, y, candidate, seed):
    """A partition model that diverges (module level: a spawned worker imports it)."""
    raise FloatingPointError("diverged")


def killed_scorer(X, y, candidate, seed):
    os.kill(os.getpid(), signal.SIGKILL)


def test_precompute_in_parallel_gives_the_sequential_utilities():
    sequential = PartitionUtilities(X, Y, MEMBERS, SCORER, base_seed=5)
    expected = [sequential(c) for c in CANDIDATES]
    for executor in (SequentialExecutor(), ProcessExecutor(2)):
        u = PartitionUtilities(X, Y, MEMBERS, SCORER, base_seed=5)
        u.precompute([*CANDIDATES, CANDIDATES[0]], executor)
        assert u.computed() == 2 and [u(c) for c in CANDIDATES] == expected
        u.precompute(CANDIDATES, executor)  # cached: nothing runs again
        assert u.computed() == 2


@pytest.mark.parametrize("scorer, reason", [(failing_scorer, "FloatingPointError: diverged"),
                                            (killed_scorer, "worker process died")])
def test_a_failed_partition_model_caches_nothing(scorer, reason):
    u = PartitionUtilities(X, Y, MEMBERS, scorer, base_seed=5)
    with pytest.raises(TrialsFailed, match=reason):
        u.precompute(CANDIDATES, ProcessExecutor(2))
    assert u.computed() == 0


def _run(make_session, **parallel):
    s = make_session(100.0, 1e-5, public=PLUGIN.public, seed=2)
    out = PLUGIN.run(s, {**PLUGIN.smoke_config, **parallel})
    s.close()
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
    records, problems = read_records(s.ledger_path)
    assert not problems
    return out, [(r.type, r.body) for r in records if r.type != "open"]


def test_the_plugin_with_two_workers_matches_one(make_session):
    one, ledger = _run(make_session)
    two, parallel_ledger = _run(make_session, workers=2)
    assert {k: v for k, v in two.items() if k != "wall_time_s"} == {k: v for k, v in one.items() if k != "wall_time_s"}
    assert parallel_ledger == ledger


def test_a_failure_in_a_worker_fails_the_run_with_its_charges(make_session, monkeypatch):
    monkeypatch.setattr("dpaudit_plugins.constant_overhead.plugin.ValidationScorer",
                        lambda **kwargs: failing_scorer)
    with pytest.raises(TrialsFailed, match="diverged"), make_session(100.0, 1e-5, public=PLUGIN.public) as s:
        PLUGIN.run(s, {**PLUGIN.smoke_config, "workers": 2})
    records, _ = read_records(s.ledger_path)
    assert [r.type for r in records].count("charge") == 2 and "release" not in [r.type for r in records]
    assert s.close_status == FAILED
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


@pytest.mark.parametrize("bad", [{"workers": 0}, {"workers": 1.5}, {"ray_address": ""}])
def test_bad_parallel_keys_are_refused(bad):
    with pytest.raises(InvalidParameter):
        ConstantOverheadConfig.from_mapping({**PLUGIN.smoke_config, **bad})
