"""naive: one DP-SGD charge per candidate, the best by public validation accuracy, the total by composition."""

from __future__ import annotations

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent
from dpaudit.ledger import read_records
from dpaudit.verify import verify_bundle
from plugins.naive import PLUGIN, tune

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


@pytest.mark.parametrize("bad", [{"candidates": []}, {"optimizer": "rmsprop"}, {"distribution": "geometric"}])
def test_bad_configs(make_session, bad):
    s = make_session()
    with pytest.raises(InvalidParameter):
        tune(s, {**CONFIG, **bad})
    s.close()
