"""The dpareto plugin end to end on a cheap charging task (charging_task.py): every trial charged and ledgered,
the reference point recorded and never replaced, failed trials kept away from the GPs, the front's guarantee
stated, and a plan the budget cannot pay for refused before the first trial."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from dpaudit.errors import BudgetExceeded, InvalidParameter
from dpaudit.events import PrivacyEvent
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dpareto import search, surrogate
from dpaudit_plugins.dpareto.config import BoSettings, DparetoConfig, parse_config
from dpaudit_plugins.dpareto.objectives import transform_reference
from dpaudit_plugins.dpareto.plugin import PLUGIN_NAME
from dpaudit_plugins.dpareto.task import TrialPlan
from dpaudit_plugins.dpareto.trials import TRIAL_MECHANISM

from .charging_task import LaplaceTask, fail_above
from .explore_run import explore_run

SMALL_BO = BoSettings(n_initial=4, n_iterations=2, raw_samples=64, restarts=1, acquisition_maxiter=20, refit_every=2)


def _run(make_session, cfg, *, epsilon=5.0, adaptive=True):
    return explore_run(make_session, cfg, epsilon=epsilon, adaptive=adaptive, protected=("private data set",))


def _infos(records, key):
    return [r.body["info"][key] for r in records if r.type == "info" and key in r.body.get("info", {})]


def test_every_trial_is_charged_and_ledgered_and_the_bundle_verifies(make_session):
    cfg = DparetoConfig(task=LaplaceTask(), method="hvpoi", bo=SMALL_BO)
    session, out, records, certificate = _run(make_session, cfg)
    charges = {r.seq: r for r in records if r.type == "charge"}
    assert len(charges) == cfg.planned_trials == len(out["trials"])
    for r in charges.values():
        assert r.body["plugin"] == PLUGIN_NAME and r.body["mechanism"] == TRIAL_MECHANISM
    ledgered = _infos(records, "dpareto_trial")
    assert [t["index"] for t in ledgered] == list(range(cfg.planned_trials))
    for trial in ledgered:
        (seq,) = trial["charges"]
        event = PrivacyEvent.from_dict(charges[seq].body["event"])
        assert event.epsilon == pytest.approx(trial["params"]["eps"])  # the charge is the trial's own
        assert trial["epsilon"] == pytest.approx(event.epsilon, rel=1e-12)  # the accountant's ε of the charge
    assert certificate["mechanisms"] == {f"{PLUGIN_NAME}/{TRIAL_MECHANISM}": cfg.planned_trials}
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def test_front_and_hypervolume_are_reported(make_session):
    cfg = DparetoConfig(task=LaplaceTask(), method="random", n_trials=6)
    _, out, _, _ = _run(make_session, cfg)
    points = np.array([[t["epsilon"], t["error"]] for t in out["trials"]])
    front = np.array([[t["epsilon"], t["error"]] for t in out["front"]])
    for p in points:  # no trial dominates a front point, every trial is weakly dominated by one
        assert any(np.all(f <= p) for f in front)
    for f in front:
        assert not any(np.all(p <= f) and np.any(p < f) for p in points)
    assert out["hypervolume"]["reference_point"] == [10.0, 1.0]
    assert out["hypervolume"]["value"] == out["hypervolume_trace"][-1] > 0
    assert all(a <= b for a, b in zip(out["hypervolume_trace"], out["hypervolume_trace"][1:], strict=False))


def test_reference_point_is_recorded_once_and_never_replaced(make_session, monkeypatch):
    reference = (0.2, 0.6)  # several trials lie beyond it: GPflowOpt would have moved it to the worst observation
    seen = []
    original = search.HypervolumePoI

    def spy(model, observed, ref):
        seen.append(np.array(ref))
        return original(model, observed, ref)

    monkeypatch.setattr(search, "HypervolumePoI", spy)
    cfg = DparetoConfig(task=LaplaceTask(), method="hvpoi", bo=SMALL_BO, reference_point=reference)
    _, out, records, _ = _run(make_session, cfg)
    plans = _infos(records, "dpareto_plan")
    assert len(plans) == 1 and plans[0]["reference_point"] == list(reference)
    first_trial = min(r.seq for r in records if r.type == "info" and "dpareto_trial" in r.body["info"])
    assert next(r.seq for r in records if r.type == "info" and "dpareto_plan" in r.body["info"]) < first_trial
    assert any(t["epsilon"] > reference[0] or t["error"] > reference[1] for t in out["trials"])
    assert len(seen) == SMALL_BO.n_iterations
    for ref in seen:
        np.testing.assert_array_equal(ref, transform_reference(reference))
    assert out["hypervolume"]["reference_point"] == list(reference)


@pytest.mark.parametrize("outcome", [math.nan, 1.7, -0.1, "raise"])
def test_failed_trials_are_recorded_and_never_reach_the_utility_gp(make_session, monkeypatch, outcome):
    fed = []
    original = surrogate.make_gp

    def spy(x, y, previous=None, fit=True):
        fed.append(np.asarray(y, dtype=float).copy())
        return original(x, y, previous, fit)

    monkeypatch.setattr(surrogate, "make_gp", spy)
    cfg = DparetoConfig(task=LaplaceTask(fail=fail_above(0.25, outcome)), method="hvpoi", bo=SMALL_BO)
    _, out, records, _ = _run(make_session, cfg)
    failed = [t for t in out["trials"] if t["failure"] is not None]
    assert failed and out["failed_trials"] == len(failed)
    assert all(t["error"] is None for t in failed)
    assert {t["index"] for t in failed} == {t["index"] for t in _infos(records, "dpareto_trial") if t["failure"]}
    assert all(np.isfinite(y).all() for y in fed)  # never NaN, never log/logit of a bad number
    valid = len(out["trials"]) - len(failed)
    utility_sizes = [len(y) for y in fed[1::2]]
    assert max(utility_sizes) <= valid
    assert all(t["failure"] is None for t in out["front"])
    assert len([r for r in records if r.type == "charge"]) == cfg.planned_trials  # a failed trial's charge stands


def test_certificate_states_which_front_guarantee_applies(make_session):
    bo = DparetoConfig(task=LaplaceTask(), method="hvpoi", bo=SMALL_BO)
    _, out, records, certificate = _run(make_session, bo)
    assert out["guarantee"]["name"] == "adaptive-renyi-filter"
    (ledgered,) = _infos(records, "dpareto_front")  # in the signed ledger, not only in the output
    assert ledgered["guarantee"] == out["guarantee"] and ledgered["hypervolume"] == out["hypervolume"]
    assert certificate["claim"]["accountant"] == "renyi-filter"
    assert "privacy-parameters-adaptive-renyi-filter" in {a["id"] for a in certificate["assumptions"]}
    fixed = DparetoConfig(task=LaplaceTask(), method="grid", grid_points=2)
    _, out, _, certificate = _run(make_session, fixed, adaptive=False)
    assert out["guarantee"]["name"] == "fixed-plan"
    assert "privacy-parameters-fixed-in-advance" in {a["id"] for a in certificate["assumptions"]}
    for point in out["front"]:
        oracle = point["epsilon_oracle"]
        assert oracle["accountant"] == "basic" and oracle["neighbouring"] == "add_remove"
        assert {"version", "sampling", "delta"} <= set(oracle)


def test_bo_refuses_a_session_that_is_not_adaptive(make_session):
    cfg = DparetoConfig(task=LaplaceTask(), method="hvpoi", bo=SMALL_BO)
    _, out, records, _ = _run(make_session, cfg, adaptive=False)
    assert isinstance(out, InvalidParameter) and "--adaptive" in str(out)
    assert not [r for r in records if r.type == "charge"]


@pytest.mark.parametrize("method", ["hvpoi", "random", "grid"])
def test_a_budget_that_cannot_pay_for_every_trial_is_refused_before_the_first(make_session, method):
    task = LaplaceTask()
    cfg = DparetoConfig(task=task, method=method, bo=SMALL_BO, n_trials=7, grid_points=3)
    # 7 trials (9 on the grid) at most 0.5 each: 1.0 pays for a few but not for all
    _, out, records, _ = _run(make_session, cfg, epsilon=1.0, adaptive=method == "hvpoi")
    assert isinstance(out, BudgetExceeded)
    assert not [r for r in records if r.type in ("charge", "release")]
    assert not _infos(records, "dpareto_trial") and not _infos(records, "dpareto_plan")
    assert task.evaluated == []


def test_a_trial_beyond_the_declared_worst_case_is_refused_before_its_charge(make_session):
    class Understated(LaplaceTask):
        def worst_case(self, view) -> tuple:
            return self._plan(0.06, view).events  # below most of the domain

    cfg = DparetoConfig(task=Understated(), method="hvpoi", bo=SMALL_BO)
    _, out, records, _ = _run(make_session, cfg)
    assert isinstance(out, InvalidParameter) and "worst case" in str(out)
    assert not [r for r in records if r.type == "charge"]


class Forged(LaplaceTask):
    """Charges correctly but reports ε/100 (the reviewer's forged front)."""

    def _plan(self, eps: float, view) -> TrialPlan:
        plan = super()._plan(eps, view)
        return TrialPlan(events=plan.events, epsilon=plan.epsilon / 100, oracle=plan.oracle)


@pytest.mark.parametrize("method", ["random", "hvpoi"])
def test_a_task_stating_less_than_its_charges_cost_is_refused_before_any_charge(make_session, method):
    cfg = DparetoConfig(task=Forged(), method=method, bo=SMALL_BO, n_trials=3)
    _, out, records, _ = _run(make_session, cfg)
    assert isinstance(out, InvalidParameter) and "states epsilon" in str(out)
    assert not [r for r in records if r.type == "charge"] and not _infos(records, "dpareto_trial")


def test_every_points_epsilon_is_rederived_by_verify_from_the_charges_it_names(make_session):
    cfg = DparetoConfig(task=LaplaceTask(), method="random", n_trials=3)
    session, out, records, _ = _run(make_session, cfg)
    for trial in _infos(records, "dpareto_trial"):
        assert trial["certified"] is True
        assert trial["epsilon_claim"]["models"] == [trial["charges"]]
        assert trial["epsilon_claim"]["accountant"] == "basic" and trial["epsilon_claim"]["delta"] == 1e-5
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    (check,) = [c for c in report.checks if c.name == "epsilon-claims"]
    assert check.ok and check.detail.startswith("3 stated epsilons"), check.detail


def test_an_uncharged_trial_says_its_epsilon_is_the_oracles_not_certified(make_session):
    cfg = parse_config({"task": {"name": "svt", "orders": 2}, "method": "random", "n_trials": 2})
    _, _, records, _ = _run(make_session, cfg, epsilon=1.0, adaptive=False)
    trials = _infos(records, "dpareto_trial")
    assert len(trials) == 2
    assert all(t["certified"] is False and "epsilon_claim" not in t and not t["charges"] for t in trials)


def test_a_grid_beyond_the_bound_is_refused_before_it_is_built(monkeypatch):
    def never(*args):
        raise AssertionError("the grid was built")

    importlib.import_module("dpaudit_plugins.dpareto.tasks_adult")  # its first import (numba's) uses itertools.product
    monkeypatch.setattr("itertools.product", never)
    with pytest.raises(InvalidParameter, match="at most 100000"):
        parse_config({"task": {"name": "adult-logreg-sgd"}, "method": "grid", "grid_points": 11})
    with pytest.raises(InvalidParameter, match="at most 100000"):
        LaplaceTask.domain.grid(400)


def test_configuration_is_checked_without_a_session():
    cfg = parse_config({"task": {"name": "svt"}, "method": "random", "n_trials": 5})
    assert cfg.planned_trials == 5
    assert parse_config({"task": {"name": "svt"}, "method": "grid", "grid_points": 4}).planned_trials == 16
    assert parse_config({"task": {"name": "svt"}}).planned_trials == 64
    for bad, match in [({"task": {"name": "svt"}, "method": "random", "n_iterations": 3}, "n_iterations"),
                       ({"task": {"name": "nope"}}, "unknown dpareto task"),
                       ({"task": {"name": "svt"}, "method": "bayes"}, "unknown dpareto method"),
                       ({"task": {"name": "svt"}, "reference_point": [10, 0]}, "reference_point"),
                       ({"method": "random"}, "task")]:
        with pytest.raises(InvalidParameter, match=match):
            parse_config(bad)


def test_the_front_plot_is_attached_as_a_public_artifact(make_session, monkeypatch):
    """The PNG goes through Session.log_public_artifact (whose MLflow side tests/dpaudit/test_session_mirror.py
    checks); here: the plugin hands it over and the ledger holds its digest."""
    import hashlib

    from dpaudit_plugins.dpareto import plugin
    from dpaudit_plugins.dpareto.plugin import FRONT_PLOT

    drawn, original = [], plugin.front_png

    def spy(*args):
        drawn.append(original(*args))
        return drawn[-1]

    monkeypatch.setattr(plugin, "front_png", spy)
    cfg = DparetoConfig(task=LaplaceTask(fail=fail_above(0.4)), method="random", n_trials=5)
    _, _, records, _ = _run(make_session, cfg, adaptive=False)
    (png,) = drawn
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert _infos(records, "public_artifact") == [{"name": FRONT_PLOT, "bytes": len(png),
                                                   "artifact_path": f"plugins/{PLUGIN_NAME}",
                                                   "sha256": hashlib.sha256(png).hexdigest()}]
