"""randtune: one repeat-and-select charge before any training, nothing about K in the ledger, a verified certificate."""

from __future__ import annotations

import pytest

import dpaudit.tuning.detached as detached
from dpaudit.accounting import get_accountant
from dpaudit.errors import BudgetExceeded, InvalidParameter, PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent, RepeatAndSelectEvent
from dpaudit.ledger import read_records
from dpaudit.verify import verify_bundle
from dpaudit_plugins.randtune import PLUGIN, dominating_event, tune

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

CONFIG = dict(PLUGIN.smoke_config)


def _records(session):
    records, problems = read_records(session.ledger_path)
    assert not problems
    return records


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_one_repeat_and_select_charged_before_training_and_certified(make_session, monkeypatch):
    s = make_session(epsilon=10.0, public=PLUGIN.public)
    charges_at_training = []
    real_train = detached.train_candidate

    def spy(session, *args, **kwargs):
        charges_at_training.append(sum(r.type == "charge" for r in _records(s)))  # session: the plugin's view
        assert kwargs["charge"] is not None
        return real_train(session, *args, **kwargs)

    monkeypatch.setattr(detached, "train_candidate", spy)
    outcome = tune(s, CONFIG)
    s.close()
    records = _records(s)
    charges = [r for r in records if r.type == "charge"]
    assert len(charges) == 1 and charges_at_training == [1] * outcome.repetitions
    event = PrivacyEvent.from_dict(charges[0].body["event"])
    assert isinstance(event, RepeatAndSelectEvent) and isinstance(event.event, PoissonSubsampledGaussianEvent)
    assert event.distribution == "geometric" and event.gamma == 0.5
    releases = [r for r in records if r.type == "release"]
    assert len(releases) == 1 and releases[0].body["output"]["candidate_index"] == outcome.public["candidate_index"]
    assert {r.body["plugin"] for r in records if "plugin" in r.body} == {"randtune"}  # commitment and data included
    cert = s.close()
    assert cert["claim"]["epsilon"] == pytest.approx(get_accountant("tightest").epsilon(event, 1e-5), rel=1e-12)
    assert cert["claim"]["attained_by"] == "rdp"
    assert any(a["id"] == "randtune-hidden-repetitions" for a in cert["assumptions"])
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def test_the_ledger_does_not_depend_on_k(make_session):
    """Runs with different realised K leave the same sequence of record types, and no record mentions K."""
    shapes, ks = set(), set()
    for seed in range(6):
        s = make_session(epsilon=10.0, seed=seed)
        outcome = tune(s, CONFIG)
        s.close()
        ks.add(outcome.repetitions)
        shapes.add(tuple(r.type for r in _records(s)))
        assert len(outcome.validation_scores) == outcome.repetitions
        assert not {"repetitions", "K", "validation_scores"} & _keys([r.body for r in _records(s)])
        assert set(outcome.public) >= {"selected", "test_accuracy", "validation_accuracy"}
        assert "wall_time_s" not in outcome.public
    assert len(ks) > 1 and len(shapes) == 1


def test_poisson_with_no_repetition_releases_nothing(make_session, monkeypatch):
    monkeypatch.setattr("dpaudit.session.sample_repetitions", lambda *a: 0)
    s = make_session(epsilon=10.0)
    out = tune(s, {**CONFIG, "distribution": "poisson", "gamma": None, "mu": 2.0})
    assert out.repetitions == 0 and out.model is None and out.public["selected"] is None
    assert [r.body["output"] for r in _records(s) if r.type == "release"] == [{"selected": None}]
    s.close()


def test_grids_varying_noise_and_epochs_use_the_dominating_envelope(make_session):
    grid = [{"lr": 1.0, "max_grad_norm": 1.0, "noise_multiplier": 2.0, "epochs": 1, "batch_size": 40},
            {"lr": 1.0, "max_grad_norm": 2.0, "noise_multiplier": 1.5, "epochs": 2, "batch_size": 20}]
    s = make_session(epsilon=20.0)
    tune(s, {**CONFIG, "candidates": grid})
    (charge,) = [r for r in _records(s) if r.type == "charge"]
    base = PrivacyEvent.from_dict(charge.body["event"]).event
    assert (base.sample_rate, base.noise_multiplier, base.steps) == (0.02, 1.5, 200)
    assert base.sensitivity.value == 2.0
    s.close()


def test_a_grid_without_a_dominating_base_is_refused(make_session, monkeypatch):
    monkeypatch.setattr("dpaudit_plugins.randtune.base_event.rdp_dominated", lambda event, by: False)
    s = make_session(epsilon=10.0)
    with pytest.raises(PluginError, match="not dominated"):
        tune(s, CONFIG)
    assert not [r for r in _records(s) if r.type == "charge"]
    s.close()
    with pytest.raises(PluginError):
        dominating_event([], "empty")


def test_tiny_budget_trains_nothing(make_session, monkeypatch):
    monkeypatch.setattr(detached, "train_candidate", lambda *a, **k: pytest.fail("trained"))
    s = make_session(epsilon=0.01)
    with pytest.raises(BudgetExceeded):
        tune(s, CONFIG)
    s.close()


@pytest.mark.parametrize("bad", [
    {"candidates": []}, {"distribution": "binomial"}, {"gamma": None}, {"mu": 3.0}, {"model": "cnn"},
    {"typo": 1}, {"candidates": [{"lr": 1.0}]}, {"train_rows": 0},
])
def test_bad_configs(make_session, bad):
    s = make_session()
    with pytest.raises(InvalidParameter):
        tune(s, {**CONFIG, **bad})
    s.close()


def test_refuses_an_unprotected_training_set(make_session):
    s = make_session(protected=("something else",))
    with pytest.raises(PluginError):
        tune(s, CONFIG)
    s.close()


def test_record_times_and_closed_at_do_not_reveal_k(make_session, monkeypatch):
    """Attack: read K off the exported ledger as (release time − charge time) / training time. Two runs, K = 1 and
    K = 3 (fixed by a patched sampler), each training taking 600 s on a hand-advanced ledger clock: every record
    from the repeat-and-select charge on carries the charge's time, the certificates' closed_at are equal, the
    ledgers' times are identical, and both verify. Before the fix the release came ~600·K s after the charge."""
    import dpaudit.ledger as ledger_module

    real_train = detached.train_candidate
    times, closed = {}, {}
    for k in (1, 3):
        clock = {"now": 1.7e9}

        class Clock:
            @staticmethod
            def time(clock=clock) -> float:
                clock["now"] += 1.0
                return clock["now"]

        def slow_train(*args, clock=clock, **kwargs):
            clock["now"] += 600.0
            return real_train(*args, **kwargs)

        monkeypatch.setattr(ledger_module, "time", Clock)
        monkeypatch.setattr("dpaudit.session.sample_repetitions", lambda *a, k=k: k)
        monkeypatch.setattr(detached, "train_candidate", slow_train)
        s = make_session(epsilon=10.0)
        outcome = tune(s, CONFIG)
        cert = s.close()
        assert outcome.repetitions == k
        records = _records(s)
        (charge,) = [r for r in records if r.type == "charge"]
        assert {r.time for r in records[charge.seq:]} == {charge.time}
        assert any(a["id"] == "randtune-hidden-repetitions" and "frozen" in a["statement"]
                   for a in cert["assumptions"])
        report = verify_bundle(s.run_dir, allow_not_for_release=True)
        assert report.valid, report.reasons
        times[k] = [r.time for r in records]
        closed[k] = cert["run"]["closed_at"]
    assert times[1] == times[3] and closed[1] == closed[3]
