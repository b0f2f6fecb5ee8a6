"""The dp-gp sensitivity formulas against brute force: every single-output replacement on many random public
designs moves the whitened prediction by at most the recorded Δ, a broken Δ is caught, and the paper's b(K⁻¹) is
checked for where it holds and where it does not."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Neighbouring, Sensitivity
from dpaudit_plugins.dp_gp.cloaking import solve_cloaking
from dpaudit_plugins.dp_gp.formulas import (
    CLOAKING_FORMULA,
    STANDARD_FORMULA,
    cloaking_covariance,
    cloaking_matrix,
    paper_b_bound,
    paper_c,
    rounding_margin,
)
from dpaudit_plugins.dp_gp.release import GpModel, OutputRule, plan_cloaking, plan_standard

REPLACE = Neighbouring.REPLACE_ONE
RULE = OutputRule(clip_lower=-2.0, clip_upper=3.0, centre=0.5, scale=2.0)  # d = 2.5
D = 2.5


def _kernel(A, B, ell, v):
    """An independent EQ kernel (explicit differences, no expansion of the square)."""
    diff = (A[:, None, :] - B[None, :, :]) / np.asarray(ell, dtype=float)
    return v * np.exp(-0.5 * np.sum(diff * diff, axis=2))


def _mean(X, y, Xs, ell, v, noise, m=0.0):
    """The exact posterior mean by a plain linear solve (independent of the plugin's Cholesky code)."""
    return m + _kernel(Xs, X, ell, v) @ np.linalg.solve(_kernel(X, X, ell, v) + noise * np.eye(len(X)), y - m)


def _cases(count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for i in range(count):
        n, dim, P = int(rng.integers(3, 40)), 1 + i % 2, int(rng.integers(2, 25))
        X = rng.uniform(0, 10, (n, dim))
        if i % 3 == 0:
            X[1] = X[0]  # repeated inputs: the case where a single output has the most leverage
        Xs = rng.uniform(-3, 13, (P, dim))
        ell = float(rng.uniform(0.3, 5.0)) if dim == 1 else rng.uniform(0.3, 5.0, dim).tolist()
        yield X, Xs, ell, float(rng.uniform(0.2, 3.0)), float(rng.uniform(0.05, 1.0)), rng


def _worst_whitened_change(X, Xs, ell, v, noise, M, rng):
    """max over every output i and sign of ‖L⁻¹(f*(y') − f*(y))‖₂, y' = y with y_i moved by ±d within the clip."""
    L = np.linalg.cholesky(M)
    y = rng.uniform(RULE.clip_lower, RULE.clip_upper, len(X))
    base = _mean(X, RULE.apply(y), Xs, ell, v, noise)
    worst = 0.0
    for i in range(len(X)):
        for value in (RULE.clip_lower, RULE.clip_upper):  # the extreme replacements: a move of up to d
            y2 = y.copy()
            y2[i] = value
            change = np.linalg.solve(L, _mean(X, RULE.apply(y2), Xs, ell, v, noise) - base)
            moved = abs(RULE.apply(y2)[i] - RULE.apply(y)[i])
            worst = max(worst, float(np.linalg.norm(change)) * D / max(moved, 1e-300))  # scaled to a full move of d
    return worst


def test_cloaking_sensitivity_bounds_every_replacement_and_is_tight():
    for X, Xs, ell, v, noise, rng in _cases(30):
        plan = plan_cloaking(GpModel(X, ell, v, noise), RULE, Xs, REPLACE)
        worst = _worst_whitened_change(X, Xs, ell, v, noise, plan.covariance, rng)
        assert worst <= plan.sensitivity.value
        assert worst >= plan.sensitivity.value * (1 - 1e-6)  # the bound is attained: Δ = d·max_i ‖L⁻¹c_i‖


def test_dropped_square_root_of_eq_9_is_caught():
    """dp4gp's Δ = d·max_i c_iᵀM⁻¹c_i (eq. (9) without its square root) understates Δ whenever the constraint is
    slack (max_i c_iᵀM⁻¹c_i < 1): brute force exceeds it."""
    X, Xs, ell, v, noise, rng = next(_cases(1, seed=3))
    C, _ = cloaking_matrix(X, Xs, ell, v, noise)
    design = solve_cloaking(C)
    M = cloaking_covariance(C, design.lambdas * 4.0, design.floor * 4.0)  # a feasible M with max constraint 1/4
    L = np.linalg.cholesky(M)
    quad = np.sum(np.linalg.solve(L, C) ** 2, axis=0)
    broken, correct = D * float(np.max(quad)), D * math.sqrt(float(np.max(quad)))
    worst = _worst_whitened_change(X, Xs, ell, v, noise, M, rng)
    assert worst > broken * 1.5
    assert worst <= correct * (1 + 1e-9)


def test_standard_sensitivity_bounds_the_rkhs_and_every_whitened_change():
    for X, Xs, ell, v, noise, rng in _cases(30, seed=1):
        plan = plan_standard(GpModel(X, ell, v, noise), RULE, Xs, REPLACE)
        K = _kernel(X, X, ell, v) + noise * np.eye(len(X))
        A = np.linalg.inv(K)
        rkhs = D * np.sqrt(np.max(np.einsum("in,ij,jn->n", A, _kernel(X, X, ell, v), A)))
        assert rkhs <= plan.sensitivity.value <= rkhs * (1 + 1e-6)
        assert _worst_whitened_change(X, Xs, ell, v, noise, plan.covariance, rng) <= plan.sensitivity.value


def test_paper_b_bound_holds_for_unit_variance_and_fails_above_it():
    """b(K⁻¹) bounds the RKHS change when k(x, x) ≤ 1 ((K⁻¹)_nn ≥ 1/K_nn gives a_n − σ²‖a‖² ≤ a_n²); with a
    kernel variance v > 1 it does not (n = 1: RKHS change = √v·b), so dpaudit never certifies with it."""
    for X, _, ell, _, noise, _ in _cases(30, seed=2):
        plan = plan_standard(GpModel(X, ell, 1.0, noise), RULE, X[:2], REPLACE)
        assert plan.sensitivity.value <= D * paper_b_bound(X, ell, 1.0, noise) * (1 + 1e-6)
    X = np.array([[0.0], [50.0]])  # far apart: K is diagonal, b = 1/(v + σ²), the RKHS change is √v/(v + σ²)
    plan = plan_standard(GpModel(X, 1.0, 4.0, 0.5), RULE, X, REPLACE)
    assert plan.sensitivity.value == pytest.approx(D * 2.0 * paper_b_bound(X, 1.0, 4.0, 0.5), rel=1e-9)


def test_paper_constants():
    assert paper_c(0.01) == pytest.approx(math.sqrt(2 * math.log(200)))
    with pytest.raises(InvalidParameter):
        paper_c(1.0)


def test_verify_recomputation_rejects_tampered_lambdas_and_floor():
    X, Xs, ell, v, noise, _ = next(_cases(1, seed=4))
    plan = plan_cloaking(GpModel(X, ell, v, noise), RULE, Xs, REPLACE)
    recorded = json.loads(json.dumps(plan.sensitivity.to_dict()))  # as the ledger record holds it
    assert Sensitivity.from_dict(recorded).recompute(REPLACE) <= plan.sensitivity.value
    for key, factor in (("lambdas", 0.5), ("floor", 1e-3)):
        forged = dict(recorded, inputs=dict(recorded["inputs"]))
        value = forged["inputs"][key]
        forged["inputs"][key] = [x * factor for x in value] if isinstance(value, list) else value * factor
        if key == "floor":
            forged["inputs"]["lambdas"] = [0.0] * len(forged["inputs"]["lambdas"])  # only the floor left
        # a smaller M than the one the noise was drawn from: the recomputed Δ exceeds the recorded one
        assert Sensitivity.from_dict(forged).recompute(REPLACE) > plan.sensitivity.value * 1.01


def test_formulas_refuse_add_remove_and_bad_inputs():
    X = np.linspace(0, 1, 5)[:, None]
    model = GpModel(X, 0.3, 1.0, 0.1)
    with pytest.raises(InvalidParameter, match="replace-one"):
        plan_standard(model, RULE, X, Neighbouring.ADD_REMOVE)
    with pytest.raises(InvalidParameter, match="clip_lower < clip_upper"):
        OutputRule(1.0, 1.0, 0.0, 1.0)
    with pytest.raises(InvalidParameter, match="lambdas"):
        cloaking_covariance(np.ones((2, 3)), [1.0, -1.0, 0.0], 1e-6)
    with pytest.raises(InvalidParameter, match="ill-conditioned"):
        rounding_margin((100, 1e14))
    with pytest.raises(InvalidParameter, match="dimensions"):
        plan_cloaking(model, RULE, [[0.0, 1.0]], REPLACE)


def test_formula_ids_are_registered_with_l2_norm():
    from dpaudit.sensitivity import FORMULAS, Norm

    assert FORMULAS[CLOAKING_FORMULA].norm is Norm.L2 and FORMULAS[STANDARD_FORMULA].norm is Norm.L2
