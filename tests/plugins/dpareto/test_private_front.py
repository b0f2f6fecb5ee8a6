"""The private front (front: "private", plugins/dpareto/private_front.py) end to end on a cheap charging task with a
protected evaluation set (private_task.py) and once on Adult: every released error is a charged Laplace release, the
search and the front see only released errors, the certificate states what is protected with the budget split, a
plan whose evaluations the budget cannot pay for is refused before any charge, and a forged or un-noised error fails
``dpaudit verify``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import main
from dpaudit.data.adult_a1a import EVAL_NAME, TEST_NAME, TRAIN_NAME
from dpaudit.errors import BudgetExceeded, InvalidParameter, PluginError
from dpaudit.ledger import read_records
from dpaudit.plugin_session import PluginSession
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dpareto import plugin, private_front
from dpaudit_plugins.dpareto.config import BoSettings, DparetoConfig, parse_config
from dpaudit_plugins.dpareto.formulas import FORMULA_ID
from dpaudit_plugins.dpareto.plugin import explore
from dpaudit_plugins.dpareto.private_front import STATEMENT_ID, PrivateFront

from .charging_task import LaplaceTask
from .explore_run import explore_run
from .private_task import EVALUATION, SIZE, TRAINING, ProtectedEvaluationTask, exact_error

SMALL_BO = BoSettings(n_initial=4, n_iterations=2, raw_samples=64, restarts=1, acquisition_maxiter=20, refit_every=2)
EVAL_EPSILON = 0.05


def _private(method="hvpoi", eval_epsilon=EVAL_EPSILON, **kwargs):
    return DparetoConfig(task=ProtectedEvaluationTask(), method=method, bo=SMALL_BO,
                         front=PrivateFront(eval_epsilon, EVALUATION, SIZE), **kwargs)


def _run(make_session, cfg, *, epsilon=50.0, adaptive=True, protected=(TRAINING, EVALUATION), public=()):
    return explore_run(make_session, cfg, epsilon=epsilon, adaptive=adaptive, protected=protected, public=public)


def evaluation_problems(records, out) -> list[str]:
    """What is wrong with a private front's evaluation releases: each non-failed trial needs exactly one charged
    Laplace release labelled for it, after its training charges, whose output clipped to [0, 1] is its error."""
    charges = {r.seq: r for r in records if r.type == "charge"}
    releases = [r for r in records if r.type == "release"]
    problems = []
    for trial in out["trials"]:
        label = private_front.release_label(trial["index"])
        mine = [r for r in releases if r.body["label"] == label]
        if trial["failure"] is not None:
            if mine:
                problems.append(f"trial {trial['index']} failed but released an error")
            continue
        if len(mine) != 1:
            problems.append(f"trial {trial['index']}: {len(mine)} evaluation releases")
            continue
        (release,) = mine
        charge = charges.get(release.body["charge_seq"])
        if charge is None or charge.body["mechanism"] != "laplace" or charge.body["event"]["epsilon"] != EVAL_EPSILON:
            problems.append(f"trial {trial['index']}: the release is not on a Laplace charge at the planned epsilon")
        elif charge.seq < max(trial["charges"], default=0):
            problems.append(f"trial {trial['index']}: released before its training was charged")
        if trial["error"] != min(max(float(release.body["output"]), 0.0), 1.0):
            problems.append(f"trial {trial['index']}: error {trial['error']} is not its release")
    return problems


def test_every_released_error_is_a_charged_laplace_release_the_search_sees_only_them_and_the_bundle_verifies(
        make_session, monkeypatch):
    seen = []
    original = private_front.releaser

    def spying_releaser(*args):
        release = original(*args)

        def spy(error, index):
            released, claim = release(error, index)
            seen.append(released)
            return released, claim

        return spy

    monkeypatch.setattr(plugin, "releaser", spying_releaser)
    cfg = _private()
    session, out, records, certificate = _run(make_session, cfg)
    assert [t["error"] for t in out["trials"]] == seen  # what BO, the front and the hypervolume were given
    ledgered = [r.body["info"]["dpareto_trial"]["error"] for r in records
                if r.type == "info" and "dpareto_trial" in r.body.get("info", {})]
    assert ledgered == seen
    assert evaluation_problems(records, out) == []
    evaluation_charges = [r for r in records if r.type == "charge" and r.body["mechanism"] == "laplace"]
    assert len(evaluation_charges) == cfg.planned_trials  # one evaluation release per trial
    for r in evaluation_charges:
        sensitivity = r.body["event"]["sensitivity"]
        assert sensitivity["formula"] == FORMULA_ID and sensitivity["value"] == pytest.approx(1 / SIZE)
    exact = [exact_error(t["params"]) for t in out["trials"]]
    assert all(t["error"] != e for t, e in zip(out["trials"], exact, strict=True))  # only noisy errors leave
    assert certificate["mechanisms"] == {"dpareto/dpareto-trial": cfg.planned_trials,
                                         "dpareto/laplace": cfg.planned_trials}
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    checks = {c.name: c for c in report.checks}
    assert checks["released-values"].ok and checks["epsilon-claims"].ok


def test_the_certificate_states_what_the_private_front_protects_and_the_budget_split(make_session):
    cfg = _private(method="random", n_trials=3)
    _, out, records, certificate = _run(make_session, cfg, adaptive=False)
    (stated,) = [a for a in certificate["assumptions"] if a["id"] == STATEMENT_ID]
    assert not stated["conditional"]
    assert TRAINING in stated["statement"] and EVALUATION in stated["statement"]
    assert f"each of {cfg.planned_trials} planned trials" in stated["statement"]
    assert f"epsilon {EVAL_EPSILON!r}" in stated["statement"] and f"1/{SIZE}" in stated["statement"]
    evaluation_seqs = {r.seq for r in records if r.type == "charge" and r.body["mechanism"] == "laplace"}
    assert set(stated["charges"]) == evaluation_seqs
    guarantee = out["guarantee"]
    assert guarantee["front"] == "private" and guarantee["protects"] == [TRAINING, EVALUATION]
    assert guarantee["public"] == [] and "protected too" in guarantee["statement"]
    assert guarantee["budget_split"]["evaluation_epsilon_per_trial"] == EVAL_EPSILON
    assert guarantee["budget_split"]["planned_trials"] == cfg.planned_trials
    (plan,) = [r.body["info"]["dpareto_plan"] for r in records
               if r.type == "info" and "dpareto_plan" in r.body.get("info", {})]
    assert plan["front"]["budget_split"] == guarantee["budget_split"]  # fixed before the first trial
    public = DparetoConfig(task=LaplaceTask(), method="random", n_trials=3)
    _, out, _, certificate = _run(make_session, public, adaptive=False, protected=(TRAINING,))
    assert out["guarantee"]["front"] == "public-eval" and "evaluation data are public" in out["guarantee"]["statement"]
    assert STATEMENT_ID not in {a["id"] for a in certificate["assumptions"]}


def test_a_budget_that_pays_for_the_trials_but_not_their_evaluations_is_refused_before_any_charge(make_session):
    trials_only = 3 * 0.5 + 0.01  # every trial's Laplace charge is at most 0.5 (the task's worst case)
    public = DparetoConfig(task=LaplaceTask(), method="random", n_trials=3)
    _, out, _, _ = _run(make_session, public, epsilon=trials_only, adaptive=False, protected=(TRAINING,))
    assert isinstance(out, dict)  # the trials alone fit
    for method, adaptive in (("random", False), ("hvpoi", True)):
        cfg = _private(method=method, eval_epsilon=1.0, n_trials=3)
        _, out, records, _ = _run(make_session, cfg, epsilon=trials_only, adaptive=adaptive)
        assert isinstance(out, BudgetExceeded), out
        assert not [r for r in records if r.type in ("charge", "release")]
        assert not [r for r in records if r.type == "info" and "dpareto_plan" in r.body.get("info", {})]


def _forging(monkeypatch, forge):
    """Make the plugin's releaser state ``forge(released, exact)`` as each trial's error (a broken plugin)."""
    original = private_front.releaser

    def forging_releaser(*args):
        release = original(*args)

        def forged(error, index):
            released, claim = release(error, index)
            return forge(released, error), claim

        return forged

    monkeypatch.setattr(plugin, "releaser", forging_releaser)


@pytest.mark.parametrize("forge", [lambda released, exact: exact,  # the un-noised error published
                                   lambda released, exact: max(released - 0.1, 0.0)])  # a better-looking point
def test_a_forged_front_error_fails_verify(make_session, monkeypatch, forge):
    _forging(monkeypatch, forge)
    session, out, records, _ = _run(make_session, _private(method="random", n_trials=3), adaptive=False)
    assert evaluation_problems(records, out)
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert not report.valid
    assert any(c.name == "released-values" and not c.ok and "is not release" in c.detail for c in report.checks)


def test_skipping_the_evaluation_charge_is_caught(make_session, monkeypatch):
    """The broken variant that publishes each exact error without a release: no charge, no release in the ledger."""

    def uncharged(view, front, task, planned_trials):
        return lambda error, index: (error, {"label": private_front.release_label(index), "value": "error",
                                             "clip": [0.0, 1.0]})

    monkeypatch.setattr(plugin, "releaser", uncharged)
    session, out, records, _ = _run(make_session, _private(method="random", n_trials=3), adaptive=False)
    assert len(evaluation_problems(records, out)) == 3
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert any(c.name == "released-values" and not c.ok and "no release labelled" in c.detail for c in report.checks)


def test_configuration_of_the_front():
    adult = {"task": {"name": "adult-logreg-sgd", "replications": 1, "rows": 600}, "method": "random", "n_trials": 2}
    assert parse_config(adult).front is None and parse_config(adult).task.public == (TEST_NAME,)
    cfg = parse_config({**adult, "front": "private", "evaluation_epsilon": 0.5})
    assert cfg.front == PrivateFront(0.5, EVAL_NAME, 1605)
    assert cfg.task.protected == (TRAIN_NAME, EVAL_NAME) and cfg.task.public == ()
    for bad, match in [({"front": "private"}, "needs evaluation_epsilon"),
                       ({"front": "public-eval", "evaluation_epsilon": 0.5}, "only"),
                       ({"front": "secret"}, "unknown dpareto front"),
                       ({"front": "private", "evaluation_epsilon": 0.0}, "evaluation_epsilon"),
                       ({"front": "private", "evaluation_epsilon": 1.0, "task": {"name": "svt"}},
                        "no evaluation set to protect")]:
        with pytest.raises(InvalidParameter, match=match):
            parse_config({**adult, **bad})
    with pytest.raises(InvalidParameter, match="protected"):  # a task that would read the set as public data
        DparetoConfig(task=LaplaceTask(), front=PrivateFront(0.5, EVALUATION, SIZE))


def test_adult_private_front_reads_the_protected_evaluation_set_and_verifies(make_session):
    config = {"task": {"name": "adult-logreg-sgd", "replications": 1, "rows": 600}, "method": "random",
              "n_trials": 2, "front": "private", "evaluation_epsilon": 0.5}
    cfg = parse_config(config)
    session, out, records, certificate = _run(make_session, cfg, epsilon=1e12, protected=(TRAIN_NAME, EVAL_NAME))
    accesses = [r.body["info"] for r in records if r.type == "info" and "data_access" in r.body.get("info", {})]
    assert {(a["data_access"], a["role"]) for a in accesses} == {(TRAIN_NAME, "protected"), (EVAL_NAME, "protected")}
    assert all("rows" not in a for a in accesses)  # no realised size of a protected set is recorded
    assert out["guarantee"]["protects"] == [TRAIN_NAME, EVAL_NAME]
    assert [r.body["mechanism"] for r in records if r.type == "charge"] == ["dpareto-trial", "laplace"] * 2
    assert STATEMENT_ID in {a["id"] for a in certificate["assumptions"]}
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


@pytest.mark.parametrize(("broken", "expect_pass"), [(None, True), ("half the noise", False)])
def test_the_released_noise_has_the_laplace_scale_of_the_formula(make_session, broken, expect_pass):
    """Seeded statistical test: N = 200 releases of an error of 0.5 at ε = 0.25, n_eval = 200, so the noise is
    Laplace with scale b = 1/(n_eval·ε) = 0.02 (clipping to [0, 1] is 25 b away: negligible). E|noise| = b and
    sd(|noise|) = b, so the mean of |noise| / b has sd 1/√200 ≈ 0.071; the test accepts |mean/b − 1| < 0.25
    (3.5 sd: a sound releaser fails it with probability ≈ 5·10⁻⁴, normal approximation). The broken variant (a
    sensitivity of 1/(2·n_eval), e.g. a count divided by twice the evaluation size) has mean/b = 0.5, 7 sd away from 1
    and 3.5 sd beyond the threshold: caught with power ≈ 0.9998."""
    n, epsilon = 200, 0.25
    front = PrivateFront(epsilon, EVALUATION, SIZE)
    if broken:  # the releaser calibrated for an evaluation set twice the size
        front = PrivateFront(epsilon, EVALUATION, 2 * SIZE)
    with make_session(2 * n * epsilon, 1e-5, adaptive=True, protected=(TRAINING, EVALUATION), public=(),
                      seed=11) as session:
        view = session.for_plugin("dpareto", "test")
        release = private_front.releaser(view, front, ProtectedEvaluationTask(), n)
        noise = np.array([release(0.5, i)[0] - 0.5 for i in range(n)])
    ratio = np.abs(noise).mean() / (1 / (SIZE * epsilon))
    assert bool(abs(ratio - 1) < 0.25) == expect_pass, ratio


def _rewriting(monkeypatch, rewrite):
    """Make the plugin's releaser return ``rewrite(index, exact, released, claim, first)`` for each trial, ``first``
    holding trial 0's (released, claim) (a broken or forging plugin, reviewer R4's noclaim.py)."""
    original = private_front.releaser

    def rewriting_releaser(*args):
        release = original(*args)
        first: list = []

        def rewritten(error, index):
            released, claim = release(error, index)
            first.extend([] if first else [(released, claim)])
            return rewrite(index, error, released, claim, first[0])

        return rewritten

    monkeypatch.setattr(plugin, "releaser", rewriting_releaser)


@pytest.mark.parametrize(("rewrite", "match"), [
    # the exact errors published with no release claim at all
    (lambda i, exact, released, claim, first: (exact, None), "without the release claim"),
    # every trial states trial 0's release (value and claim) as its error
    (lambda i, exact, released, claim, first: (first[0], dict(first[1])), "requires 'dpareto private front: error "
                                                                          "of trial 1"),
    # a claim understating the noise: epsilon 1e-9 and sensitivity 1e-12, not those of the release's charge
    (lambda i, exact, released, claim, first: (released, {**claim, "epsilon": 1e-9, "sensitivity": 1e-12}),
     "its epsilon 1e-09 is not that of release"),
])
def test_a_private_front_with_missing_misnamed_or_understated_claims_fails_verify(make_session, monkeypatch,
                                                                                   rewrite, match):
    _rewriting(monkeypatch, rewrite)
    session, out, records, _ = _run(make_session, _private(method="random", n_trials=3), adaptive=False)
    assert out["guarantee"]["front"] == "private"
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert not report.valid
    (check,) = [c for c in report.checks if c.name == "released-values"]
    assert not check.ok and match in check.detail, check.detail


def test_the_plan_record_requires_every_trial_error_to_claim_its_own_release(make_session):
    _, _, records, _ = _run(make_session, _private(method="random", n_trials=2), adaptive=False)
    (plan,) = [r.body["info"]["dpareto_plan"] for r in records
               if r.type == "info" and "dpareto_plan" in r.body.get("info", {})]
    required = plan["release_claims_required"]
    assert required["statements"] == "dpareto_trial" and required["value"] == "error"
    assert required["label"].replace("{index}", "7") == private_front.release_label(7)
    assert (required["mechanism"], required["epsilon"], required["sensitivity"]) == ("laplace", EVAL_EPSILON, 1 / SIZE)
    public = DparetoConfig(task=LaplaceTask(), method="random", n_trials=2)
    _, _, records, _ = _run(make_session, public, adaptive=False, protected=(TRAINING,))
    (plan,) = [r.body["info"]["dpareto_plan"] for r in records
               if r.type == "info" and "dpareto_plan" in r.body.get("info", {})]
    assert plan["release_claims_required"] is None


@pytest.mark.parametrize("size", [SIZE, SIZE + 1, 3 * SIZE])
def test_an_exact_rate_above_one_is_clipped_before_the_noise_and_released_never_failed(make_session, monkeypatch,
                                                                                      size):
    """Reviewer R4's side channel: every record misclassified on evaluation sets of n_eval and n_eval + 1 records
    (neighbours under add/remove) gives exact rates 1 and (n_eval + 1)/n_eval. Both must be released (charged) with
    the Laplace mechanism applied to 1, the clipped rate: a trial that failed on the second would release nothing
    and tell the two sets apart for free. One trial fails on purpose (TrialFailed, not data-dependent): it needs no
    claim and the bundle verifies."""
    seen = []
    original = PluginSession.laplace

    def spy(self, value, *args, **kwargs):
        seen.append(value)
        return original(self, value, *args, **kwargs)

    monkeypatch.setattr(PluginSession, "laplace", spy)
    cfg = DparetoConfig(task=ProtectedEvaluationTask(fail=lambda p: "raise" if p["k"] == 1 else size / SIZE),
                        method="grid", grid_points=2, front=PrivateFront(EVAL_EPSILON, EVALUATION, SIZE))
    session, out, records, _ = _run(make_session, cfg, adaptive=False)
    failed = [t for t in out["trials"] if t["failure"] is not None]
    assert len(failed) == 2 and all("TrialFailed" in t["failure"] for t in failed)  # the k = 1 points only
    released = [t for t in out["trials"] if t["failure"] is None]
    assert len(released) == 2 and seen == [1.0, 1.0]
    assert all(0.0 <= t["error"] <= 1.0 for t in released)
    assert evaluation_problems(records, out) == []
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


@pytest.mark.parametrize("value", [math.nan, "1", True])
def test_a_private_task_returning_no_number_is_a_bug_not_a_failed_trial(make_session, value):
    cfg = DparetoConfig(task=ProtectedEvaluationTask(fail=lambda p: value), method="random", n_trials=2,
                        front=PrivateFront(EVAL_EPSILON, EVALUATION, SIZE))
    with pytest.raises(PluginError, match="task bug"), make_session(50.0, 1e-5, protected=(TRAINING, EVALUATION),
                                                                     public=()) as session:
        explore(session, cfg)


@pytest.mark.parametrize(("front", "protected", "public"), [
    ({}, [TRAIN_NAME], [TEST_NAME]),
    ({"front": "private", "evaluation_epsilon": 0.5}, [TRAIN_NAME, EVAL_NAME], []),
])
def test_dpaudit_run_declares_only_the_data_sets_of_the_configured_front(tmp_path, front, protected, public):
    """Reviewer R4: a private-front run from the CLI declared the evaluation records public too (the public copy
    beside the protected one). Each run now declares its configured task's sets, in the ledger and certificate."""
    config = tmp_path / "front.json"
    config.write_text(json.dumps({"task": {"name": "adult-logreg-sgd", "replications": 1, "rows": 600},
                                  "method": "random", "n_trials": 2, **front}))
    store = str(tmp_path / "runs")
    result = CliRunner().invoke(main, ["--store", store, "run", "dpareto", "--epsilon", "1e12", "--delta", "1e-3",
                                       "--seed", "1", "--config", str(config), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    records, _ = read_records(Path(out["run_dir"]) / "ledger.jsonl")
    assert (records[0].body["protected"], records[0].body["public"]) == (protected, public)
    certificate = json.loads(Path(out["certificate"]).read_text(encoding="utf-8"))
    assert certificate["public_datasets"] == public
    assert out["results"]["guarantee"]["front"] == (front.get("front") or "public-eval")
