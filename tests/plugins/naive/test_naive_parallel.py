"""naive's candidates in parallel: with a seed, one worker writes the ledger the sequential loop always wrote (frozen
below from the code before parallel trials), two workers train the same models and write the same records; a
candidate that fails or whose worker dies keeps its charge and releases nothing, in a ledger that verifies."""

from __future__ import annotations

import importlib.util
import json
import os
import signal

import pytest

from dpaudit import canonical
from dpaudit.errors import InvalidParameter
from dpaudit.ledger import read_records
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.parallel import TrialsFailed
from dpaudit.records import FAILED
from dpaudit.verify import verify_bundle
from dpaudit_plugins.naive import PLUGIN, NaiveConfig, tune
from dpaudit_plugins.naive import plugin as plugin_module

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

CONFIG = {**PLUGIN.smoke_config, "train_rows": 600, "test_rows": 200,
          "candidates": [*PLUGIN.smoke_config["candidates"],
                         {"lr": 1.0, "max_grad_norm": 1.0, "noise_multiplier": 1.0, "epochs": 2, "batch_size": 30}]}

# Frozen from the sequential loop before parallel trials (commit 51192e8; seed 12, ε = 10, δ = 10⁻⁵): the values it
# drew from the session's randomness, in order, and the SHA-256 of its canonical ledger without the open record and
# clock readings, made portable (:func:`_portable`). The models themselves are not frozen: their weights, so their
# digests, differ in the last bits from CPU to CPU (a Sapphire Rapids machine trained other digests than the one the
# first freeze was taken on, with the same draws and the same ledger otherwise; 51192e8 and this code write the same
# ledger byte for byte there).
FROZEN_DRAWS = [4962081040295098078, 6452401368179794041, 7040034410502124773, 8901269978258336017,
                8489528731230206040, 4199297348741437105, 30730008068983558, 6782044423617736265, 6265993257017825784]
FROZEN_PORTABLE_LEDGER_SHA256 = "e71f004e89dfd59dfc08eb011ac540f729fe6c006d9a52ffde5ca49c95732246"


def _run(make_session, ledger_content, **parallel):
    s = make_session(epsilon=10.0, seed=12, protected=PLUGIN.protected, public=PLUGIN.public)
    out = tune(s, {**CONFIG, **parallel}).public
    s.close()
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    out.pop("wall_time_s")
    return out, ledger_content(s.ledger_path)


def _ranked(ledger):
    """Each record type's records in order, every ``charge_seq`` replaced by the charge's rank: the interleaving of
    charges with releases is the only thing a batch of workers may change."""
    out = {}
    charges = [i for i, (kind, _) in enumerate(ledger) if kind == "charge"]
    rank = {}
    for kind, body in ledger:
        inner = body.get("info", body) if kind == "info" else body
        if "charge_seq" in inner:
            seq = inner["charge_seq"]
            rank.setdefault(seq, len(rank))
            inner = {**inner, "charge_seq": rank[seq]}
            body = {**body, "info": inner} if kind == "info" else inner
        out.setdefault(kind, []).append(body)
    assert len(out["charge"]) == len(charges)
    return out


def _portable(value):
    """``value`` without what a CPU's float kernels move: model digests replaced by a mark, floats rounded to 12
    significant digits (the accountants' ε move in the last bits with numpy's vectorised exp and log)."""
    if isinstance(value, dict):
        return {k: "<model digest>" if k == "model_sha256" else _portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.12g}")
    return value


def _drawing(monkeypatch):
    """The values the session's randomness gives, in order, from now on."""
    drawn = []
    draw = SeededRandom.randbelow

    def logged(self, n):
        drawn.append(draw(self, n))
        return drawn[-1]

    monkeypatch.setattr(SeededRandom, "randbelow", logged)
    return drawn


def test_one_worker_writes_the_ledger_of_the_sequential_loop(make_session, ledger_content, monkeypatch):
    """Attack: a driver that charged in another order, labelled the events otherwise, drew the seeds in another
    order or recorded differently would change the draws or the frozen ledger."""
    drawn = _drawing(monkeypatch)
    out, ledger = _run(make_session, ledger_content)
    assert drawn == FROZEN_DRAWS
    assert canonical.sha256_hex(canonical.encode(_portable(ledger))) == FROZEN_PORTABLE_LEDGER_SHA256
    assert out["charges"] == 3


def test_the_portable_ledger_still_tells_a_changed_record(make_session, ledger_content):
    """The portable form is not blind: a candidate's label, a charge's ε in its 10th digit or a record's order
    changes its hash."""
    _, ledger = _run(make_session, ledger_content)
    frozen = canonical.sha256_hex(canonical.encode(_portable(ledger)))
    charge = next(i for i, (kind, _) in enumerate(ledger) if kind == "charge")
    release = next(i for i, (kind, _) in enumerate(ledger) if kind == "release")
    kind, body = ledger[charge]
    edits = [
        ledger[:release] + [("release", {**ledger[release][1], "label": "candidate 9"})] + ledger[release + 1:],
        ledger[:charge] + [(kind, {**body, "epsilon_spent": body["epsilon_spent"] * (1 + 1e-10)})]
        + ledger[charge + 1:],
        [ledger[1], ledger[0], *ledger[2:]],
    ]
    assert all(canonical.sha256_hex(canonical.encode(_portable(edit))) != frozen for edit in edits)


def test_two_workers_train_the_same_models_and_write_the_same_records(make_session, ledger_content):
    """Attack: workers that drew their own seeds, a driver that recorded by arrival order or lost a candidate's
    record would change the models, the scores or a record."""
    sequential, ledger = _run(make_session, ledger_content, workers=1)
    parallel, parallel_ledger = _run(make_session, ledger_content, workers=2)
    assert parallel == sequential
    ranked, parallel_ranked = _ranked(ledger), _ranked(parallel_ledger)
    assert parallel_ranked == ranked  # the same records of each type, in candidate order
    kinds = [kind for kind, _ in parallel_ledger]
    first_release = kinds.index("release")
    assert kinds[:first_release].count("charge") == 3  # the grid was charged before it was dispatched
    assert [kind for kind, _ in ledger].index("release") < [i for i, (k, _) in enumerate(ledger) if k == "charge"][1]
    if importlib.util.find_spec("ray") is not None:  # the optional Ray extra: a local Ray gives the same run
        on_ray, ray_ledger = _run(make_session, ledger_content, workers=2, ray_address="local")
        assert on_ray == sequential and ray_ledger == parallel_ledger


def raising_candidate(shared, job):
    """A candidate that fails in its worker (a module-level function: the worker imports it)."""
    raise FloatingPointError("loss diverged")


def killed_candidate(shared, job):
    """A candidate whose worker process is killed (out of memory, a node lost)."""
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("train, reason", [(raising_candidate, "FloatingPointError: loss diverged"),
                                           (killed_candidate, "worker process died")])
def test_a_failed_candidate_keeps_its_charge_and_releases_nothing(make_session, monkeypatch, train, reason):
    monkeypatch.setattr(plugin_module, "train_one", train)
    with pytest.raises(TrialsFailed, match=reason), make_session(
            epsilon=10.0, protected=PLUGIN.protected, public=PLUGIN.public) as s:
        tune(s, {**CONFIG, "workers": 2})
    records, problems = read_records(s.ledger_path)
    assert not problems
    kinds = [r.type for r in records]
    assert kinds.count("charge") == 3 and "release" not in kinds  # the charges made before dispatch stay
    assert s.close_status == FAILED
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def test_the_workers_keys_are_parsed_and_validated():
    assert NaiveConfig.from_mapping(CONFIG).parallel.workers == 1
    cfg = NaiveConfig.from_mapping({**CONFIG, "workers": 3, "ray_address": "local"})
    assert (cfg.parallel.workers, cfg.parallel.ray_address) == (3, "local")
    for bad in ({"workers": 0}, {"workers": 1.5}, {"workers": True}, {"ray_address": ""}):
        with pytest.raises(InvalidParameter):
            NaiveConfig.from_mapping({**CONFIG, **bad})


def test_cli_workers_and_ray_address_reach_the_naive_config(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from dpaudit.cli import main

    seen = []

    def fake_tune(session, config):
        seen.append(dict(config))
        return plugin_module.NaiveOutcome(public={}, model=None)

    monkeypatch.setattr(plugin_module, "tune", fake_tune)
    config = tmp_path / "naive.json"
    config.write_text(json.dumps(CONFIG))
    base = ["run", "naive", "--epsilon", "10", "--delta", "1e-5", "--seed", "3", "--config", str(config)]
    for extra, expected in ((["--workers", "2"], {"workers": 2}),
                            (["--workers", "3", "--ray-address", "local"], {"workers": 3, "ray_address": "local"})):
        result = CliRunner().invoke(main, [*base, *extra])
        assert result.exit_code == 0, result.output
        assert seen.pop() == {**CONFIG, **expected}


def test_a_claimed_run_needs_its_own_dp_sgd_charge(make_session):
    """``claimed=True`` (the driver charged and claimed the run) without a DP-SGD charge would train uncharged."""
    import numpy as np
    from torch import nn

    from dpaudit.tuning import train_private

    s = make_session(epsilon=10.0, protected=PLUGIN.protected, public=PLUGIN.public)
    view = s.for_plugin(plugin_module.PLUGIN_NAME, plugin_module.VERSION)
    X, y = np.zeros((20, 3)), np.array([0.0, 1.0] * 10)
    with pytest.raises(InvalidParameter, match="claimed"):
        train_private(view, nn.Linear(3, 1), X, y, optimizer="sgd", lr=0.1, epochs=1, batch_size=5,
                      max_grad_norm=1.0, noise_multiplier=1.0, label="x", claimed=True)
    assert s.spent_epsilon() == 0.0
    s.close()
