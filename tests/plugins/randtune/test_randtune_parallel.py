"""randtune's repetitions in parallel: with a seed, 1 worker, 2 processes and a local Ray give the same selection,
the same confidential scores and the same ledger; a repetition that fails or whose worker dies releases nothing and
leaves the repeat-and-select charge in a ledger that verifies."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from dpaudit.ledger import read_records
from dpaudit.parallel import TrialsFailed
from dpaudit.records import FAILED
from dpaudit.verify import verify_bundle
from dpaudit_plugins.randtune import PLUGIN, RandTuneConfig, tune
from dpaudit_plugins.randtune import plugin as plugin_module

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

CONFIG = {**PLUGIN.smoke_config, "train_rows": 600, "test_rows": 200}
K = 4


def _run(make_session, monkeypatch, ledger_content, **parallel):
    monkeypatch.setattr("dpaudit.session.sample_repetitions", lambda *a: K)
    s = make_session(epsilon=10.0, seed=12)
    outcome = tune(s, {**CONFIG, **parallel})
    s.close()
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    return outcome, ledger_content(s.ledger_path)


def test_sequential_and_parallel_runs_are_identical(make_session, monkeypatch, ledger_content):
    """Attack: a parallel path that drew a repetition's seeds in another order, let a worker draw its own, or
    selected by arrival order would change the scores, the selection or the ledger; none may differ."""
    sequential, ledger = _run(make_session, monkeypatch, ledger_content)
    parallel, parallel_ledger = _run(make_session, monkeypatch, ledger_content, workers=2)
    assert parallel.repetitions == sequential.repetitions == K
    assert parallel.validation_scores == sequential.validation_scores
    assert len({index for index, _ in sequential.validation_scores}) > 1  # both candidates were tried
    assert parallel.public == sequential.public and parallel.public["model_sha256"]
    assert parallel_ledger == ledger
    if "ray" in sys.modules or _has_ray():
        on_ray, ray_ledger = _run(make_session, monkeypatch, ledger_content, workers=2, ray_address="local")
        assert on_ray.validation_scores == sequential.validation_scores and on_ray.public == sequential.public
        assert ray_ledger == ledger


def _has_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def raising_repetition(shared, job):
    """A repetition that fails in its worker (a module-level function: the spawned worker imports it)."""
    raise FloatingPointError("loss diverged")


def killed_repetition(shared, job):
    """A repetition whose worker process is killed (out of memory, a node lost)."""
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("repetition, reason", [(raising_repetition, "FloatingPointError: loss diverged"),
                                                (killed_repetition, "worker process died")])
def test_a_failed_repetition_releases_nothing_and_keeps_the_charge(make_session, monkeypatch, repetition, reason):
    monkeypatch.setattr("dpaudit.session.sample_repetitions", lambda *a: 2)
    monkeypatch.setattr(plugin_module, "run_repetition", repetition)
    with pytest.raises(TrialsFailed, match=reason), make_session(epsilon=10.0) as s:
        tune(s, {**CONFIG, "workers": 2})
    records, problems = read_records(s.ledger_path)
    assert not problems
    assert [r.type for r in records].count("charge") == 1 and "release" not in [r.type for r in records]
    assert s.close_status == FAILED
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def test_the_workers_keys_are_validated_before_anything_runs():
    assert RandTuneConfig.from_mapping({**CONFIG, "workers": 3}).parallel.workers == 3
    with pytest.raises(ValueError, match="workers"):
        RandTuneConfig.from_mapping({**CONFIG, "workers": 0})


def test_cli_workers_and_ray_address_reach_the_plugin_config(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from dpaudit.cli import main

    seen = []

    def fake_tune(session, config):
        seen.append(dict(config))
        return plugin_module.RandTuneOutcome(public={}, model=None, repetitions=0, validation_scores=(),
                                             wall_time_s=0.0)

    monkeypatch.setattr(plugin_module, "tune", fake_tune)
    config = tmp_path / "randtune.json"
    config.write_text(json.dumps(CONFIG))
    base = ["run", "randtune", "--epsilon", "10", "--delta", "1e-5", "--seed", "3", "--config", str(config)]
    for extra, expected in ((["--workers", "2"], {"workers": 2}),
                            (["--workers", "3", "--ray-address", "local"], {"workers": 3, "ray_address": "local"}),
                            ([], {})):
        result = CliRunner().invoke(main, [*base, *extra])
        assert result.exit_code == 0, result.output
        assert seen.pop() == {**CONFIG, **expected}
    refused = CliRunner().invoke(main, ["run", "opacus-training", "--epsilon", "10", "--delta", "1e-5",
                                        "--workers", "2"])  # a plugin without parallel trials
    assert refused.exit_code == 2 and "workers" in refused.output and not seen
    zero = CliRunner().invoke(main, [*base, "--workers", "0"])
    assert zero.exit_code == 2 and not seen


def test_parallel_repetitions_reproduce_the_in_driver_loop(make_session, monkeypatch):
    """Attack: a parallel path whose seeds differ from the sequential loop's (drawn in another order, or by the
    workers themselves) would train other models than a run without workers always did. Reference: the loop
    before parallel trials, each repetition drawing its index and then training on the session's own view."""
    from dpaudit.tuning import MECHANISMS, ModelOptions, accuracy, candidate_event, train_candidate, tuning_data
    from dpaudit_plugins.randtune import dominating_event

    monkeypatch.setattr("dpaudit.session.sample_repetitions", lambda *a: 3)
    s = make_session(epsilon=10.0, seed=12)
    outcome = tune(s, {**CONFIG, "workers": 2})
    s.close()

    reference = make_session(epsilon=10.0, seed=12)
    view = reference.for_plugin(plugin_module.PLUGIN_NAME, plugin_module.VERSION)
    cfg = RandTuneConfig.from_mapping(CONFIG)
    options = ModelOptions.from_mapping(CONFIG)
    data = tuning_data(view, options.train_rows, options.test_rows)
    label = f"{MECHANISMS[options.optimizer]} {options.model} on adult-train"
    base = dominating_event([candidate_event(c, len(data.y_train), label) for c in cfg.candidates], "base")
    charge, k = view.repeat_and_select(base, cfg.distribution, cfg.parameters, label="reference")
    scores = []
    for _ in range(k):
        index = view.rng.randbelow(len(cfg.candidates))
        result = train_candidate(view, cfg.candidates[index], data, options, label=label, charge=charge)
        scores.append((index, accuracy(result, data.X_val, data.y_val, view), result.model_sha256))
    reference.close()
    assert tuple((index, score) for index, score, _ in scores) == outcome.validation_scores
    best = plugin_module.select_best((index, score, digest, None) for index, score, digest in scores)
    assert best is not None and best[1] == outcome.public["model_sha256"]
