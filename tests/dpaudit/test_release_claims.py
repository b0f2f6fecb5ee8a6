"""``release_claim`` statements (dpaudit/epsilon_claims.py) are compared by ``dpaudit verify`` with the labelled
release they name: an honest value passes; a forged or un-noised value, a release that does not exist or comes after
the statement, a claimed mechanism, epsilon or sensitivity that is not the release's charge's, and a malformed claim
fail the ``released-values`` check; a ``release_claims_required`` plan makes a missing, misnamed, shared or
understated claim fail it; a ledger without such statements gets no check."""

from __future__ import annotations

import pytest

from dpaudit.verify import verify_bundle

LABEL = "noisy count of something"


def _released_values(make_session, statement, *, releases=1, after=False):
    """Verify a run that released ``releases`` Laplace counts labelled LABEL, then stated ``statement(outputs)``
    (before the releases when ``after``)."""
    with make_session(5.0, 1e-5) as session:
        view = session.for_plugin("claimer", "1")
        if after and statement is not None:
            view.record_info({"point": statement([0.0])})
        outputs = [float(view.laplace(0.5, 1.0, 1.0, label=LABEL)) for _ in range(releases)]
        if not after and statement is not None:
            view.record_info({"point": statement(outputs)})
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    return [c for c in report.checks if c.name == "released-values"], report


def _claim(value, **overrides):
    return {"error": value, "release_claim": {"label": LABEL, "value": "error", "clip": [0.0, 1.0],
                                              "mechanism": "laplace", "epsilon": 1.0, "sensitivity": 1.0,
                                              **overrides}}


def test_an_honest_value_passes(make_session):
    (check,), report = _released_values(make_session, lambda out: _claim(min(max(out[-1], 0.0), 1.0)))
    assert check.ok and report.valid, report.reasons


def test_the_latest_release_with_the_label_is_the_one_meant(make_session):
    (check,), report = _released_values(make_session, lambda out: _claim(out[-1], clip=[-1e9, 1e9]), releases=3)
    assert check.ok, check.detail


@pytest.mark.parametrize(("statement", "kwargs", "match"), [
    (lambda out: _claim(0.5, clip=[-1e9, 1e9]), {}, "is not release"),  # the exact (un-noised) value
    (lambda out: _claim(out[-1] - 0.1, clip=[-1e9, 1e9]), {}, "is not release"),  # a better-looking value
    (lambda out: _claim(out[0], clip=[-1e9, 1e9]), {"releases": 2}, "is not release"),  # an earlier release's
    (lambda out: _claim(0.5, label="never released"), {}, "no release labelled"),
    (lambda out: _claim(0.0), {"after": True}, "no release labelled"),  # released only after the statement
    (lambda out: {"error": 0.5, "release_claim": {"label": LABEL}}, {}, "malformed"),
    (lambda out: _claim("low"), {}, "malformed"),
    # a claim understating the noise of the release it names: its charge was epsilon 1, sensitivity 1 (reviewer R4)
    (lambda out: _claim(min(max(out[-1], 0.0), 1.0), epsilon=1e-9), {}, "its epsilon 1e-09 is not that of release"),
    (lambda out: _claim(min(max(out[-1], 0.0), 1.0), sensitivity=1e-12), {}, "its sensitivity 1e-12 is not"),
    (lambda out: _claim(min(max(out[-1], 0.0), 1.0), mechanism="gaussian"), {}, "its mechanism 'gaussian' is not"),
    (lambda out: {"error": min(max(out[-1], 0.0), 1.0),
                  "release_claim": {"label": LABEL, "value": "error", "clip": [0.0, 1.0]}}, {}, "its mechanism None"),
])
def test_a_value_that_is_not_its_release_fails(make_session, statement, kwargs, match):
    (check,), report = _released_values(make_session, statement, **kwargs)
    assert not check.ok and match in check.detail and not report.valid


def test_a_ledger_without_release_claims_has_no_check(make_session):
    checks, report = _released_values(make_session, None)
    assert checks == [] and report.valid, report.reasons


REQUIRED = {"statements": "point", "index": "index", "label": "release {index}", "value": "error",
            "mechanism": "laplace", "epsilon": 1.0, "sensitivity": 1.0}


def _planned(make_session, points, *, plan=REQUIRED, releases=3, later_plan=False):
    """Verify a run that records ``plan`` (a release_claims_required plan), releases ``releases`` Laplace counts
    labelled ``release {i}``, then states ``points(outputs)`` (a list of ``point`` bodies), optionally after a
    second plan record of None (which ends the first)."""
    with make_session(10.0, 1e-5) as session:
        view = session.for_plugin("claimer", "1")
        view.record_info({"plan": {"release_claims_required": plan}})
        outputs = [min(max(float(view.laplace(0.5, 1.0, 1.0, label=f"release {i}")), 0.0), 1.0)
                   for i in range(releases)]
        if later_plan:
            view.record_info({"plan": {"release_claims_required": None}})
        for body in points(outputs):
            view.record_info({"point": body})
    report = verify_bundle(session.run_dir, allow_not_for_release=True)
    return [c for c in report.checks if c.name == "released-values"], report


def _point(index, value, **overrides):
    claim = {"label": f"release {index}", "value": "error", "clip": [0.0, 1.0], "mechanism": "laplace",
             "epsilon": 1.0, "sensitivity": 1.0, **overrides}
    return {"index": index, "error": value, "release_claim": claim}


def test_a_plan_whose_every_point_claims_its_own_release_passes(make_session):
    def points(out):  # point 2 failed: it states no error and needs no claim
        return [_point(0, out[0]), _point(1, out[1]), {"index": 2, "error": None}]

    (check,), report = _planned(make_session, points)
    assert check.ok and report.valid, report.reasons


@pytest.mark.parametrize(("points", "match"), [
    (lambda out: [_point(0, out[0]), {"index": 1, "error": 0.5}], "without the release claim"),  # exact, unclaimed
    (lambda out: [_point(0, out[0]), {**_point(0, out[0]), "index": 1}], "requires 'release 1'"),  # trial 0's
    (lambda out: [_point(0, out[0]), {**_point(0, out[0]), "index": 0}], "claimed by more than one"),
    (lambda out: [_point(0, out[0], epsilon=1e-9, sensitivity=1e-12)], "differ from record"),
    (lambda out: [{"error": 0.5, "release_claim": {}}], "no whole-number 'index'"),
])
def test_a_plan_refuses_a_point_without_its_own_claim(make_session, points, match):
    checks, report = _planned(make_session, points)
    assert any(not c.ok and match in c.detail for c in checks) and not report.valid, checks


def test_a_plan_of_none_ends_the_requirement_and_a_malformed_plan_fails(make_session):
    (check,), report = _planned(make_session, lambda out: [_point(0, out[0]), {"index": 1, "error": 0.5}],
                                later_plan=True)
    assert check.ok, check.detail
    checks, report = _planned(make_session, lambda out: [], plan={"statements": "point"})
    assert any(not c.ok and "malformed release_claims_required" in c.detail for c in checks) and not report.valid
