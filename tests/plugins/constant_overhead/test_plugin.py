"""The plugin end to end on a small slice of Adult: the certificate composes T_max rounds (never the realised T) and
the final training's envelope, charged before any record is used; grids varying σ, epochs and B; the fallback when
nothing passes, PrivTrain and the adaptive proposer inside a session, and the session checks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.errors import BudgetExceeded, PluginError
from dpaudit.events import PrivacyEvent, SelfComposedEvent, compose
from dpaudit.ledger import read_records
from dpaudit.verify import verify_bundle
from dpaudit_plugins.constant_overhead import PLUGIN

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

DELTA = 1e-5


def _session(make_session, epsilon: float = 100.0, **kwargs):
    kwargs.setdefault("public", PLUGIN.public)
    return make_session(epsilon, DELTA, **kwargs)


def _records(session, kind: str) -> list:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r for r in records if r.type == kind]


def _infos(session) -> list[dict]:
    return [r.body["info"] for r in _records(session, "info") if r.body["plugin"] == "constant-overhead"]


def test_certificate_composes_t_max_rounds_not_the_realised_count(make_session):
    t_max = 25
    config = {**PLUGIN.smoke_config, "t_max": t_max, "granularity": 0.2}
    s = _session(make_session)
    out = PLUGIN.run(s, config)
    certificate = s.close()
    assert out["charged_iterations"] == t_max and out["realised_iterations"] < t_max
    assert out["stopped_by"] == "step_zero"
    loop = [i for i in _infos(s) if "charged_iterations" in i]
    assert loop[-1]["realised_iterations"] == out["realised_iterations"]
    training, tuning = (PrivacyEvent.from_dict(r.body["event"]) for r in _records(s, "charge"))
    assert isinstance(tuning, SelfComposedEvent) and tuning.count == t_max
    assert tuning.event.sensitivity.value == pytest.approx(1 / config["k"])
    assert tuning.event.max_queries == len(config["candidates"])
    accountant = get_accountant("tightest")
    expected = accountant.epsilon(compose([tuning, training]), DELTA)
    assert certificate["claim"]["epsilon"] == pytest.approx(expected, rel=1e-12)
    realised = replace(tuning, count=out["realised_iterations"])
    assert accountant.epsilon(compose([realised, training]), DELTA) < expected
    assert set(PLUGIN.public) <= set(certificate["public_datasets"])
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
    assert 0.5 < out["test_accuracy"] <= 1.0
    assert not any(key.startswith("util") and key != "utilities_computed" for key in out)


def test_fallback_is_trained_and_released_when_nothing_passes(make_session):
    """u0 = 0.95 and g = 0.04: the first threshold is 0.99, above every utility, with noise scale 4/(kϵ) = 0.02."""
    config = {**PLUGIN.smoke_config, "u0": 0.95, "granularity": 0.04, "epsilon_round": 50.0, "t_max": 1,
              "fallback": 2}
    s = _session(make_session, epsilon=200.0)
    out = PLUGIN.run(s, config)
    s.close()
    assert out["fallback_used"] and out["selected"] == config["candidates"][2]
    assert out["realised_iterations"] == 1
    info = [i for i in _infos(s) if "fallback_used" in i][-1]
    assert info["fallback_used"] and info["iterations"][0]["passed"] is None


def test_privtrain_and_the_local_proposer_run_inside_a_session(make_session):
    config = {**PLUGIN.smoke_config, "partition_training": "privtrain", "proposer": "local", "proposer_batch": 4,
              "t_max": 6, "granularity": 0.02}
    s = _session(make_session)
    out = PLUGIN.run(s, config)
    s.close()
    assert out["utilities_computed"] >= len(config["candidates"])
    tuning = PrivacyEvent.from_dict(_records(s, "charge")[1].body["event"])
    assert tuning.count == 6 and tuning.event.max_queries == 4


@pytest.mark.parametrize("kwargs, match", [({"public": ()}, "public"),
                                           ({"protected": ("other",)}, "protected"),
                                           ({"neighbouring": "replace_one"}, "add/remove")])
def test_session_that_does_not_fit_is_refused_before_any_charge(make_session, kwargs, match):
    s = _session(make_session, **kwargs)
    with pytest.raises(PluginError, match=match):
        PLUGIN.run(s, PLUGIN.smoke_config)
    assert s.spent_epsilon() == 0.0
    s.close()


def test_a_grid_varying_sigma_epochs_and_batch_size_is_trained_under_its_envelope(make_session):
    """The final training is charged (first) as the grid's envelope, largest q, smallest σ, most steps, and the
    selected candidate's run is recorded and released against that charge."""
    grid = [{"lr": 2.0, "max_grad_norm": 1.0, "noise_multiplier": 1.0, "epochs": 1, "batch_size": 64},
            {"lr": 0.5, "max_grad_norm": 2.0, "noise_multiplier": 2.0, "epochs": 2, "batch_size": 32},
            {"lr": 8.0, "max_grad_norm": 0.5, "noise_multiplier": 1.5, "epochs": 1, "batch_size": 128}]
    s = _session(make_session)
    out = PLUGIN.run(s, {**PLUGIN.smoke_config, "candidates": grid})
    s.close()
    charges = _records(s, "charge")
    envelope = PrivacyEvent.from_dict(charges[0].body["event"])
    assert (envelope.sample_rate, envelope.noise_multiplier, envelope.steps) == (128 / 2000, 1.0, 2 * (2000 // 32))
    assert out["training_charge_seq"] == charges[0].seq and len(charges) == 2
    releases = [r for r in _records(s, "release") if r.body["charge_seq"] == charges[0].seq]
    assert [r.body["output"]["model_sha256"] for r in releases] == [out["model_sha256"]]
    info = [i for i in _infos(s) if "covered_by_envelope" in i]  # the kit's training, attributed to this plugin
    assert {r.body["plugin"] for r in _records(s, "info")} == {"constant-overhead"}
    assert {r.body["plugin"] for r in _records(s, "charge") + _records(s, "release")} == {"constant-overhead"}
    assert info[-1]["covered_by_envelope"] and info[-1]["noise_multiplier"] == out["selected"]["noise_multiplier"]
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_a_session_that_cannot_pay_for_the_final_training_refuses_before_touching_data(make_session, monkeypatch):
    monkeypatch.setattr("dpaudit_plugins.constant_overhead.plugin.PartitionUtilities",
                        lambda *a, **k: pytest.fail("utilities computed"))
    s = _session(make_session, epsilon=0.1)
    with pytest.raises(BudgetExceeded):
        PLUGIN.run(s, PLUGIN.smoke_config)
    assert s.spent_epsilon() == 0.0 and not _records(s, "charge")
    s.close()


def test_a_budget_for_the_training_alone_charges_nothing(make_session, monkeypatch):
    """The envelope fits but envelope + T_max rounds do not: refused before either is charged."""
    from dpaudit.tuning import grid_envelope
    from dpaudit_plugins.constant_overhead.config import ConstantOverheadConfig

    monkeypatch.setattr("dpaudit_plugins.constant_overhead.plugin.PartitionUtilities",
                        lambda *a, **k: pytest.fail("utilities computed"))
    cfg = ConstantOverheadConfig.from_mapping(PLUGIN.smoke_config)
    envelope = grid_envelope(cfg.candidates, cfg.train_rows, "envelope")
    alone = get_accountant("tightest").epsilon(envelope, DELTA)
    s = _session(make_session, epsilon=alone * 1.01)
    with pytest.raises(BudgetExceeded):
        PLUGIN.run(s, PLUGIN.smoke_config)
    assert s.spent_epsilon() == 0.0 and not _records(s, "charge")
    s.close()
