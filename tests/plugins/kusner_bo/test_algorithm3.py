"""Algorithm 3 (Kusner et al. 2015): the sensitivity bound checked by brute force over add/remove and replace-one
neighbours of the validation set (the training set is public and fixed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.sensitivity import Neighbouring
from dpaudit.verify import verify_bundle
from dpaudit_plugins.kusner_bo.algorithm3 import algorithm3_sensitivity_for, run_algorithm3
from dpaudit_plugins.kusner_bo.erm import clip_to_unit_ball, fit_logistic, signed_labels
from dpaudit_plugins.kusner_bo.losses import RAMP, SIGMOID, get_loss, validation_score
from dpaudit_plugins.kusner_bo.sensitivity import FORMULA_ID, algorithm3_sensitivity
from dpaudit_plugins.kusner_bo.validation_set import fixed_size

TAU = 1e-9
LAMBDAS = tuple(np.geomspace(0.05, 2.0, 8))


def _problem(seed: int, n: int = 40, m: int = 20, d: int = 3):
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=d)
    X = clip_to_unit_ball(rng.normal(size=(n + m, d)) / math.sqrt(d))
    y = (X @ w_true + 0.3 * rng.normal(size=n + m) > 0).astype(float)
    return X[:n], y[:n], X[n:], y[n:]


def _replacement_pool(models, d: int, rng) -> list[tuple[np.ndarray, float]]:
    """Random records plus, for every fitted ŵ, the records with the extreme margins ±‖ŵ‖ (the worst cases)."""
    pool = [(x, float(s)) for x in clip_to_unit_ball(rng.normal(size=(6, d))) for s in (-1.0, 1.0)]
    for w in models:
        u = w / np.linalg.norm(w)
        pool += [(u, 1.0), (u, -1.0)]
    return pool


def _neighbours(X_val, ys, pool, neighbouring):
    """Every replace-one neighbour (each record swapped for each pool record), or every add/remove neighbour (each
    record removed; each pool record inserted first, in the middle and last of the canonical order)."""
    m = len(ys)
    if neighbouring == "replace_one":
        for i in range(m):
            for x, s in pool:
                Xn, yn = X_val.copy(), ys.copy()
                Xn[i], yn[i] = x, s
                yield Xn, yn
        return
    for i in range(m):
        yield np.delete(X_val, i, axis=0), np.delete(ys, i)
    for j in (0, m // 2, m):
        for x, s in pool:
            yield np.insert(X_val, j, x, axis=0), np.insert(ys, j, s)


def _worst_change(X_train, y_train, X_val, y_val, loss, lambdas=LAMBDAS, seed=0, neighbouring="replace_one",
                  m0=None) -> float:
    """max over λ, λ' ∈ Λ and every neighbour V' of |f_V(ŵ_λ) − f_V'(ŵ_λ')|, f over the fixed-size set of m0."""
    m0 = m0 or len(y_val)
    models = [fit_logistic(X_train, y_train, lam, tolerance=TAU).weights for lam in lambdas]
    ys = signed_labels(y_val)
    f_V = [validation_score(w, *fixed_size(X_val, ys, m0), loss) for w in models]
    pool = _replacement_pool(models, X_val.shape[1], np.random.default_rng(seed))
    worst = 0.0
    for Xn, yn in _neighbours(X_val, ys, pool, neighbouring):
        f_Vn = [validation_score(w, *fixed_size(Xn, yn, m0), loss) for w in models]
        worst = max(worst, max(abs(a - b) for a in f_V for b in f_Vn))
    return worst


def _bound(loss, m, lambdas=LAMBDAS) -> float:
    return algorithm3_sensitivity(lambda_min=min(lambdas), lambda_max=max(lambdas), lipschitz=loss.lipschitz,
                                  g_max=loss.upper, m=m, solver_tolerance=TAU)


def test_sensitivity_by_hand():
    # λ ∈ [0.5, 2], L = 1, g* = 1, m = 10, τ = 0: 1·(2 − 0.5) + min(1, 2·1/0.5)/10 = 1.5 + 0.1
    assert algorithm3_sensitivity(lambda_min=0.5, lambda_max=2.0, lipschitz=1.0, g_max=1.0, m=10,
                                  solver_tolerance=0.0) == pytest.approx(1.6, rel=1e-12)
    # sigmoid (L = 1/4), λ ∈ [4, 4], m = 2, τ = 0.1: 0.25·(0 + 0.2/4) + min(1, 2·0.25·1.1/4)/2 = 0.0125 + 0.06875
    assert algorithm3_sensitivity(lambda_min=4.0, lambda_max=4.0, lipschitz=0.25, g_max=1.0, m=2,
                                  solver_tolerance=0.1) == pytest.approx(0.08125, rel=1e-12)


@pytest.mark.parametrize("neighbouring", ["replace_one", "add_remove"])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("loss", [RAMP, SIGMOID], ids=lambda loss: loss.name)
def test_brute_force_change_is_within_the_bound(seed, loss, neighbouring):
    X_train, y_train, X_val, y_val = _problem(seed)
    worst = _worst_change(X_train, y_train, X_val, y_val, loss, seed=seed, neighbouring=neighbouring)
    assert 0.0 < worst <= _bound(loss, len(y_val))


@pytest.mark.parametrize(("neighbouring", "m0"), [("replace_one", 20), ("add_remove", 20), ("add_remove", 15),
                                                   ("add_remove", 25)])
@pytest.mark.parametrize("lam", [0.25, 0.5, 1.0, 2.0, 4.0, 8.0])
@pytest.mark.parametrize("loss", [RAMP, SIGMOID], ids=lambda loss: loss.name)
def test_brute_force_per_record_change_at_one_lambda(lam, loss, neighbouring, m0):
    """Λ = {λ}: only the per-record term min{g*, 2L(1 + τ)/λ}/m₀ remains (|V| = 20; m₀ = 15 truncates, 25 pads);
    the worst neighbour reaches 6-45 % of it (logistic training keeps ‖ŵ_λ‖ well below the 1/λ the bound
    allows), so a bound 20× too small, e.g. with 1/m₀² in place of 1/m₀ (m₀ ≥ 20), is caught."""
    X_train, y_train, X_val, y_val = _problem(0)
    worst = _worst_change(X_train, y_train, X_val, y_val, loss, lambdas=(lam,), neighbouring=neighbouring, m0=m0)
    bound = _bound(loss, m0, lambdas=(lam,))
    assert worst <= bound
    assert worst > bound / 20  # a per-record term 20× too small (g/m₀² for m₀ ≥ 20) would be exceeded


def test_brute_force_catches_a_bound_without_the_between_lambda_term():
    """A deliberately wrong bound (only the per-record term, as if BO always tried the same λ) is exceeded."""
    X_train, y_train, X_val, y_val = _problem(0)
    too_small = min(RAMP.upper, 2 * RAMP.lipschitz / min(LAMBDAS)) / len(y_val)
    assert _worst_change(X_train, y_train, X_val, y_val, RAMP) > too_small


def test_fitted_weights_move_as_theorem_7_says():
    X_train, y_train, _, _ = _problem(1)
    fits = [fit_logistic(X_train, y_train, lam, tolerance=TAU) for lam in LAMBDAS]
    for a in fits:
        assert np.linalg.norm(a.weights) <= (1 + TAU) / a.lam  # ‖ŵ_λ‖ ≤ (1 + τ)/λ
        for b in fits:
            if a.lam < b.lam:  # ‖ŵ_λ − ŵ_λ'‖ ≤ (λ' − λ)/(λλ') + τ/λ + τ/λ'
                gap = (b.lam - a.lam) / (a.lam * b.lam) + TAU / a.lam + TAU / b.lam
                assert np.linalg.norm(a.weights - b.weights) <= gap


def test_the_papers_per_record_term_is_too_small_by_two():
    """Hinge training on n copies of (x, +1), ‖x‖ = 1, λ = 2 > 1: ŵ = x/λ (λŵ − x = 0 with every margin < 1).

    Swapping a validation record (x, −1) for (x, +1) under the sigmoid loss (L = 1/4) changes m·f by
    σ(1/2) − σ(−1/2) = tanh(1/4) = 0.2449, above the paper's L/λ_min = 0.125 and below 2L/λ_min = 0.25.
    """
    lam, x = 2.0, np.array([0.6, 0.8])
    w = x / lam
    change = abs(validation_score(w, x[None, :], np.array([1.0]), SIGMOID)
                 - validation_score(w, x[None, :], np.array([-1.0]), SIGMOID))
    assert change == pytest.approx(math.tanh(0.25), rel=1e-12)
    assert change > SIGMOID.lipschitz / lam
    assert change <= algorithm3_sensitivity(lambda_min=lam, lambda_max=lam, lipschitz=SIGMOID.lipschitz,
                                            g_max=1.0, m=1, solver_tolerance=0.0)


@pytest.mark.parametrize("neighbouring", ["replace_one", "add_remove"])
def test_release_through_the_session_verifies(make_session, neighbouring):
    X_train, y_train, X_val, y_val = _problem(2)
    with make_session(epsilon=1.0, neighbouring=neighbouring, protected=("toy validation",),
                      public=("toy training",)) as s:
        out = run_algorithm3(s, X_train, y_train, X_val, y_val, LAMBDAS, loss=RAMP, epsilon=0.5, T=8,
                             validation_size=len(y_val))
        assert s.spent_epsilon() == pytest.approx(0.5, rel=1e-6)
    assert math.isfinite(out.value) and out.steps == 8
    assert out.sensitivity.formula == FORMULA_ID
    assert out.sensitivity.value == _bound(RAMP, len(y_val))
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def test_proposer_outside_lambda_is_refused(make_session):
    X_train, y_train, X_val, y_val = _problem(0)
    with make_session(neighbouring="replace_one") as s, pytest.raises(PluginError):
        run_algorithm3(s, X_train, y_train, X_val, y_val, LAMBDAS, loss=RAMP, epsilon=0.5, T=2,
                       validation_size=20, proposer=lambda history: 3.0)


@pytest.mark.parametrize("bad", [
    lambda: algorithm3_sensitivity_for((), RAMP, 5, "replace_one", TAU),
    lambda: algorithm3_sensitivity_for((0.0, 1.0), RAMP, 5, "replace_one", TAU),
    lambda: algorithm3_sensitivity(lambda_min=2.0, lambda_max=1.0, lipschitz=1.0, g_max=1.0, m=5,
                                   solver_tolerance=0.0),
    lambda: algorithm3_sensitivity_for((1.0,), RAMP, 0, "replace_one", TAU),
    lambda: get_loss("hinge"),
    lambda: fit_logistic(np.ones((3, 2)), np.array([0.0, 1.0, 1.0]), 1.0, tolerance=TAU),  # rows of norm √2
    lambda: fit_logistic(np.eye(2), np.array([0.0, 2.0]), 1.0, tolerance=TAU),
])
def test_bad_input_raises(bad):
    with pytest.raises(InvalidParameter):
        bad()


def test_formula_recomputes_to_one_value_for_both_relations():
    sens = algorithm3_sensitivity_for(LAMBDAS, SIGMOID, 20, "add_remove", TAU)
    assert sens.recompute(Neighbouring.REPLACE_ONE) == sens.recompute(Neighbouring.ADD_REMOVE) == sens.value


def test_fixed_size_truncates_and_pads_with_the_zero_record():
    X, ys = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]]), np.array([1.0, -1.0, -1.0])
    Xt, yt = fixed_size(X, ys, 2)
    assert np.array_equal(Xt, X[:2]) and np.array_equal(yt, ys[:2])
    Xp, yp = fixed_size(X, ys, 5)
    assert np.array_equal(Xp[3:], np.zeros((2, 2))) and np.array_equal(yp, [1.0, -1.0, -1.0, 1.0, 1.0])
    with pytest.raises(InvalidParameter):
        fixed_size(X, ys[:2], 2)
