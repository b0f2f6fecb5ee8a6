"""naive: one DP-SGD charge per candidate, the best by public validation accuracy, the total by composition."""

from __future__ import annotations

import pytest

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent
from dpaudit.ledger import read_records
from dpaudit.verify import verify_bundle
from dpaudit_plugins.naive import PLUGIN, tune

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

CONFIG = dict(PLUGIN.smoke_config)


def test_one_charge_per_candidate_and_the_composed_bound(make_session):
    grid = CONFIG["candidates"] + [{"lr": 1.0, "max_grad_norm": 1.0, "noise_multiplier": 1.0, "epochs": 1,
                                    "batch_size": 40}]
    s = make_session(epsilon=10.0, public=PLUGIN.public)
    out = tune(s, {**CONFIG, "candidates": grid}).public
    cert = s.close()
    records, _ = read_records(s.ledger_path)
    charges = [PrivacyEvent.from_dict(r.body["event"]) for r in records if r.type == "charge"]
    assert len(charges) == 3 and all(isinstance(e, PoissonSubsampledGaussianEvent) for e in charges)
    assert [e.noise_multiplier for e in charges] == [c["noise_multiplier"] for c in grid]
    assert sum(r.type == "release" for r in records) == 3
    assert out["epsilon"] == pytest.approx(cert["claim"]["epsilon"], rel=1e-12)
    assert out["attained_by"] == cert["claim"]["attained_by"] in ("rdp", "pld")
    assert out["epsilon"] == min(v for v in out["bounds"].values() if isinstance(v, float))
    assert out["bounds"]["basic"].startswith("not applicable")
    scores = out["validation_accuracies"]
    assert out["candidate_index"] == max(range(3), key=lambda i: (scores[i], i))
    assert out["selected"] == grid[out["candidate_index"]] and out["wall_time_s"] > 0
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_fit_budget_scales_every_sigma_by_one_factor_so_the_grid_fits(make_session):
    """The smoke grid costs 0.53 > ε = 0.3 (δ = 10⁻⁵); with ``fit_budget`` every σ is multiplied by one factor,
    recorded before the first charge, and the certificate stays within the budget."""
    s = make_session(epsilon=0.3, public=PLUGIN.public)
    out = tune(s, {**CONFIG, "fit_budget": True}).public
    cert = s.close()
    records, _ = read_records(s.ledger_path)
    factor = out["noise_factor"]
    assert factor > 1.0 and cert["claim"]["epsilon"] <= 0.3
    first_charge = next(i for i, r in enumerate(records) if r.type == "charge")
    assert any(r.type == "info" and r.body["info"].get("noise_factor") == factor for r in records[:first_charge])
    sigmas = [PrivacyEvent.from_dict(r.body["event"]).noise_multiplier for r in records if r.type == "charge"]
    assert sigmas == pytest.approx([c["noise_multiplier"] * factor for c in CONFIG["candidates"]], rel=1e-12)
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
    spent = make_session(epsilon=2.0, public=PLUGIN.public, name="spent")
    spent.laplace(1.0, 1.0, 0.1)
    with pytest.raises(PluginError, match="fresh session"):
        tune(spent, {**CONFIG, "fit_budget": True})
    spent.close()


@pytest.mark.parametrize("bad", [{"candidates": []}, {"optimizer": "rmsprop"}, {"distribution": "geometric"},
                                 {"fit_budget": "yes"}])
def test_bad_configs(make_session, bad):
    s = make_session()
    with pytest.raises(InvalidParameter):
        tune(s, {**CONFIG, **bad})
    s.close()


def test_a_grid_the_budget_cannot_pay_for_trains_nothing(make_session, monkeypatch):
    from dpaudit.errors import BudgetExceeded
    from dpaudit_plugins.naive import PLUGIN

    monkeypatch.setattr("dpaudit.tuning.detached.train_candidate", lambda *a, **k: pytest.fail("trained"))
    s = make_session(epsilon=0.05, public=PLUGIN.public)
    with pytest.raises(BudgetExceeded):
        PLUGIN.run(s, PLUGIN.smoke_config)
    assert s.spent_epsilon() == 0.0
    s.close()
