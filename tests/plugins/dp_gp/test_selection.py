"""DP hyperparameter selection (Smith et al. 2018, supplement): the truncated cross-validation SSE's sensitivity
attacked by brute force over single-output replacements (and broken smaller bounds caught), the public folds, and
the selection through a session, with verify recomputing the charged sensitivity.

Brute force: on a small design (n = 24, 4 folds, 6 candidates), for 60 output vectors (half uniform in the clipping
interval, half at its ends) every output j is replaced by each end of the interval, and for every j an aimed vector
(each residual's sign set against the move that j causes at that test point, j at one end of the interval) is
attacked the same way; the change of every candidate's score is compared with its bound Δ(θ). The search is what
catches a bound that is too small: the bound without the training-fold terms, and half the derived bound, both fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.errors import BudgetExceeded
from dpaudit.events import PrivacyEvent
from dpaudit.ledger import read_records
from dpaudit.sensitivity import Neighbouring
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dp_gp.formulas import cv_folds, cv_sse_sensitivities, cv_sse_sensitivity
from dpaudit_plugins.dp_gp.release import OutputRule
from dpaudit_plugins.dp_gp.selection import (
    SelectionGrid,
    fold_predictors,
    select_hyperparameters,
    selection_sensitivity,
    truncated_sse,
)

N, FOLDS, LOWER, UPPER = 24, 4, -1.0, 1.0
D = UPPER - LOWER  # normalised with centre 0 and scale 1
CANDIDATES = [[ell, noise] for ell in (0.5, 2.0, 6.0) for noise in (0.01, 0.3)]
RULE = OutputRule(LOWER, UPPER, 0.0, 1.0)


def _design() -> tuple[np.ndarray, np.ndarray]:
    X = np.sort(np.random.default_rng(0).uniform(0, 10, N))[:, None]
    return X, cv_folds(N, FOLDS, "test")


def _worst_changes(error_bound: float) -> np.ndarray:
    """The largest |score(y) − score(y')| seen for each candidate over single-output replacements."""
    X, fold = _design()
    predictors = fold_predictors(X, fold, CANDIDATES, 1.0)
    rng = np.random.default_rng(1)
    worst = np.zeros(len(CANDIDATES))

    def attack(y: np.ndarray, outputs: range | list[int]) -> None:
        nonlocal worst
        base = truncated_sse(predictors, y, error_bound)
        for j in outputs:
            for value in (LOWER, UPPER):
                replaced = y.copy()
                replaced[j] = value
                worst = np.maximum(worst, np.abs(truncated_sse(predictors, replaced, error_bound) - base))

    for trial in range(60):
        attack(rng.uniform(LOWER, UPPER, N) if trial % 2 else rng.choice([LOWER, UPPER], N), range(N))
    for folds in predictors:  # aimed: every residual's sign against the move output j causes at its test point
        for j in range(N):
            sign = np.zeros(N)
            for C, train, test in folds:
                if j in train:
                    sign[test] = np.sign(C[:, list(train).index(j)])
            for amplitude in (0.45 * error_bound, 0.9 * error_bound):
                y = np.clip(amplitude * sign, LOWER, UPPER)
                y[j] = LOWER  # the replacement moves it across the whole interval
                attack(y, [j])
    return worst


@pytest.mark.parametrize("error_bound", [0.5, 4.0])
def test_the_sensitivity_bounds_every_single_output_replacement(error_bound):
    X, fold = _design()
    bound = cv_sse_sensitivities(X, fold, CANDIDATES, 1.0, D, error_bound)
    worst = _worst_changes(error_bound)
    assert np.all(worst <= bound)
    assert np.max(worst / bound) > 0.4  # not vacuous: the search comes within a factor 2.5 for some candidate


def test_smaller_bounds_are_caught_by_the_brute_force():
    """Two broken bounds: the test fold's term alone (dropping the folds where the output trains, as if a training
    output could not move the predictions), and half the derived bound (the search comes within 0.78 of it)."""
    X, fold = _design()
    b = 0.5
    worst = _worst_changes(b)
    assert np.all(worst > min(b * b, 2 * b * D))
    assert np.any(worst > 0.5 * cv_sse_sensitivities(X, fold, CANDIDATES, 1.0, D, b))


def test_folds_are_balanced_public_and_salted():
    fold = cv_folds(287, 10, "kung")
    counts = np.bincount(fold)
    assert counts.max() - counts.min() <= 1 and len(counts) == 10
    assert np.array_equal(fold, cv_folds(287, 10, "kung"))
    assert not np.array_equal(fold, cv_folds(287, 10, "other"))
    with pytest.raises(ValueError, match="at least 20 records"):
        cv_folds(19, 10, "kung")


def test_the_formula_is_the_largest_candidate_bound_and_refuses_add_remove():
    X, fold = _design()
    inputs = {"X": X.tolist(), "candidates": CANDIDATES, "variance": 1.0, "folds": FOLDS, "fold_salt": "test",
              "error_bound": 0.5, **RULE.formula_inputs()}
    expected = float(np.max(cv_sse_sensitivities(X, fold, CANDIDATES, 1.0, D, 0.5)))
    assert cv_sse_sensitivity(inputs, Neighbouring.REPLACE_ONE) == expected
    with pytest.raises(ValueError, match="replace-one"):
        cv_sse_sensitivity(inputs, Neighbouring.ADD_REMOVE)


def test_selection_through_the_session_is_charged_recorded_and_verified(make_session):
    s = make_session(epsilon=5.0, delta=1e-5, protected=("howell1-women",), public=("howell1-women-ages",),
                     neighbouring="replace_one")
    view = s.for_plugin("selection-test", "1")
    women = view.data("howell1-women")
    rule = OutputRule(88.0, 188.0, 138.0, 25.6)
    grid = SelectionGrid(lengthscales=(5.0, 25.0), noises=(0.05, 0.3), variance=1.0, folds=5, error_bound=1.0)
    chosen = select_hyperparameters(view, grid, women.X, women.y, rule, epsilon=1.0)
    assert [chosen.lengthscale, chosen.noise] == grid.candidates[chosen.index]
    s.close()
    (charge,) = [PrivacyEvent.from_dict(r.body["event"]) for r in read_records(s.ledger_path)[0]
                 if r.type == "charge"]
    assert charge.kind == "exponential" and charge.epsilon == 1.0 and charge.n_candidates == 4
    assert charge.sensitivity.recompute(Neighbouring.REPLACE_ONE) == charge.sensitivity.value == chosen.sensitivity
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_a_large_epsilon_picks_the_smallest_truncated_sse_and_a_sign_error_would_not(make_session):
    """At ε = 200 the exponential mechanism puts mass ≥ 1 − 3·exp(−ε·gap/(2Δ)) on the smallest SSE; with this
    design's gap (asserted > Δ/4) that is ≥ 1 − 3e⁻²⁵, so 5 draws out of 5 pick it: a selection that scored +SSE
    (a sign error) would pick the largest instead and fail."""
    X, fold = _design()
    y = np.sin(X[:, 0])  # smooth: the candidates differ clearly in how well they fit it
    grid = SelectionGrid(lengthscales=(0.5, 6.0), noises=(0.01, 0.3), variance=1.0, folds=FOLDS, error_bound=0.5,
                         fold_salt="test")
    scores = truncated_sse(fold_predictors(X, fold, grid.candidates, 1.0), RULE.apply(y), 0.5)
    delta = selection_sensitivity(grid, X, RULE, "replace_one").value
    ordered = np.sort(scores)
    assert ordered[1] - ordered[0] > delta / 4
    s = make_session(epsilon=2000.0, delta=1e-5, protected=("howell1-women",), neighbouring="replace_one")
    view = s.for_plugin("selection-test", "1")
    picks = {select_hyperparameters(view, grid, X, y, RULE, epsilon=200.0).index for _ in range(5)}
    assert picks == {int(np.argmin(scores))}
    s.close()


def test_an_unaffordable_selection_is_refused_before_the_outputs_are_read(make_session):
    X, _ = _design()
    grid = SelectionGrid(lengthscales=(0.5, 6.0), noises=(0.01,), variance=1.0, folds=FOLDS, error_bound=0.5)

    class Exploding:  # outputs that fail if touched
        def __array__(self, *args, **kwargs):
            raise AssertionError("the outputs were read before the budget was asked")

    s = make_session(epsilon=0.5, delta=1e-5, protected=("howell1-women",), neighbouring="replace_one")
    view = s.for_plugin("selection-test", "1")
    with pytest.raises(BudgetExceeded):
        select_hyperparameters(view, grid, X, Exploding(), RULE, epsilon=1.0)
    s.close()
    assert not [r for r in read_records(s.ledger_path)[0] if r.type == "charge"]
