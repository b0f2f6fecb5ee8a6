"""The SVT task (Avent et al. 2020, Alg. 1, App. B): the privacy oracle is an upper bound on the exact privacy loss,
the vectorised algorithm is Alg. 1, the utility oracle is 1 − mean F1, and the exact front is the non-dominated set."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Neighbouring
from dpaudit_plugins.dpareto.task import Task
from dpaudit_plugins.dpareto.tasks_svt import (
    SVTTask,
    build,
    exact_front,
    f1_scores,
    svt_budget_split,
    svt_epsilon,
    svt_outputs,
)


def test_oracle_is_the_sum_of_the_two_laplace_budgets():
    """ε = 1/b1 + 2C/b2 (Lyu et al. Thm. 4 with ε1 = 1/b1, ε2 = 2C/b2) equals App. B's closed form."""
    C = np.arange(1, 31, dtype=float)
    b = np.geomspace(1e-2, 1e2, 30)
    b1, b2 = svt_budget_split(C, b)
    np.testing.assert_allclose(b1 + b2, b)
    np.testing.assert_allclose(svt_epsilon(C, b), 1 / b1 + 2 * C / b2, rtol=1e-12)
    assert svt_epsilon(4, 1.0) == pytest.approx((1 + 2) * (1 + 4))  # (2C)^{1/3} = 2 at C = 4


def _standard_laplace_sf(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, 0.5 * np.exp(-np.abs(x)), 1 - 0.5 * np.exp(-np.abs(x)))


def _output_probability(w: tuple[int, ...], q: tuple[int, ...], C: int, b1: float, b2: float) -> float:
    """P[Alg. 1 outputs w | true answers q], by quadrature over the threshold noise ρ ~ Lap(b1) (exact up to the
    quadrature's error, ~1e-9 relative here): given ρ, the query tests are independent."""
    rho = np.linspace(-60 * b1 - 3, 60 * b1 + 3, 200_001)
    density = np.exp(-np.abs(rho) / b1) / (2 * b1)
    ones = np.flatnonzero(w)
    stop = ones[C - 1] + 1 if len(ones) >= C else len(w)
    for i in range(stop):
        above = _standard_laplace_sf((0.5 + rho - q[i]) / b2)
        density = density * (above if w[i] else 1 - above)
    return float(np.trapezoid(density, rho))


def _max_privacy_loss(m: int, C: int, b: float) -> float:
    """max over every pair of answer vectors q, q' ∈ {0, 1}^m (each query moves by at most 1: any pair is a pair of
    neighbours for some sensitivity-1 queries) and every output w of log P[w | q] / P[w | q']."""
    b1, b2 = (float(x) for x in svt_budget_split(C, b))
    outputs = [w for w in itertools.product((0, 1), repeat=m)
               if sum(w) < C or (sum(w) == C and not any(w[np.flatnonzero(w)[C - 1] + 1:]))]
    log_p = np.log([[_output_probability(w, q, C, b1, b2) for w in outputs]
                    for q in itertools.product((0, 1), repeat=m)])
    return float((log_p[:, None, :] - log_p[None, :, :]).max())


@pytest.mark.parametrize(("m", "C", "b"), [(4, 1, 2.0), (3, 2, 1.0)])
def test_oracle_bounds_the_exact_privacy_loss(m, C, b):
    """The closed form is an upper bound on the exact worst-case privacy loss of small instances."""
    assert _max_privacy_loss(m, C, b) <= float(svt_epsilon(C, b)) * (1 + 1e-6)


def test_exact_loss_refutes_the_monotone_query_oracle():
    """Attack: the oracle without the factor 2 (ε2 = C/b2, valid only for monotone queries) is below the exact loss
    of an instance whose queries move in opposite directions, so the check above would catch that mistake."""
    b1, b2 = svt_budget_split(1, 2.0)
    broken = float(1 / b1 + 1 / b2)
    assert _max_privacy_loss(4, 1, 2.0) > broken * 1.05


def _alg1_loop(q: np.ndarray, C: int, b1: float, b2: float, rho: float, nu: np.ndarray) -> np.ndarray:
    """Alg. 1 line by line, from the same standard Laplace draws."""
    w = np.zeros(len(q), dtype=bool)
    count = 0
    for i in range(len(q)):
        if q[i] + b2 * nu[i] >= 0.5 + b1 * rho:
            w[i] = True
            count += 1
            if count >= C:
                break
    return w


def test_vectorised_outputs_equal_the_sequential_algorithm():
    rng = np.random.default_rng(7)
    answers = rng.random((6, 40)) < 0.3
    rho, nu = rng.laplace(size=6), rng.laplace(size=(6, 40))
    C = np.array([1.0, 3.0, 10.0, 30.0])
    b = np.array([0.05, 0.5, 2.0, 20.0])
    b1, b2 = svt_budget_split(C, b)
    w = svt_outputs(answers, C, b1, b2, rho, nu)
    for p in range(len(C)):
        for r in range(len(answers)):
            expected = _alg1_loop(answers[r].astype(float), int(C[p]), b1[p], b2[p], rho[r], nu[r])
            np.testing.assert_array_equal(w[p, r], expected)


def test_f1_by_hand():
    truth = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=bool)
    w = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]], dtype=bool)
    # perfect; nothing found; TP = 1, FP = 2, FN = 1: 2 / (2 + 2 + 1)
    np.testing.assert_allclose(f1_scores(truth, w), [1.0, 0.0, 2 / 5])


def test_utility_oracle_limits_and_determinism():
    task = SVTTask()
    # almost no noise and C >= 10: every true one is found, nothing else: error 0
    assert task.error(10, 1e-2) == pytest.approx(0.0)
    # almost no noise and C = 1: one true positive of ten, F1 = 2/11
    assert task.error(1, 1e-2) == pytest.approx(1 - 2 / 11)
    # huge noise: a coin flip per query against the threshold, far from the support
    assert task.error(30, 1e2) > 0.7
    # common random numbers: the same point gives the same value, vectorised or not
    C, b = np.array([3, 10, 25]), np.array([0.1, 1.0, 10.0])
    np.testing.assert_array_equal(task.error(C, b), [task.error(c, x) for c, x in zip(C, b, strict=True)])
    assert not np.array_equal(SVTTask(seed=1).error(C, b), task.error(C, b))


def test_exact_front_is_the_non_dominated_set_of_the_grid():
    grid = exact_front(SVTTask(orders=5), b_points=40)
    assert len(grid.C) == 30 * 40
    points = np.column_stack([grid.epsilon, grid.error])
    for i in np.flatnonzero(grid.front):
        dominated = np.all(points <= points[i], axis=1) & np.any(points < points[i], axis=1)
        assert not dominated.any()
    for i in np.flatnonzero(~grid.front)[:200]:
        dominated = np.all(points <= points[i], axis=1) & np.any(points < points[i], axis=1)
        duplicate = np.all(points == points[i], axis=1) & grid.front
        assert dominated.any() or duplicate.any()


def test_task_protocol_plan_and_worst_case():
    task = build({"orders": 5})
    assert isinstance(task, Task)

    class View:
        neighbouring = Neighbouring.ADD_REMOVE

    plan = task.plan({"C": 4, "b": 1.0}, View())
    assert plan.events == () and plan.epsilon == pytest.approx(15.0)
    assert plan.oracle.accountant == "svt-closed-form" and plan.oracle.delta == 0.0
    assert task.worst_case(View()) == ()  # nothing is charged, so nothing bounds the budget
    assert math.isfinite(task.evaluate({"C": 4, "b": 1.0}, (), View(), seed=0))


@pytest.mark.parametrize(("C", "b"), [(0, 1.0), (1.5, 1.0), (2, 0.0), (2, -1.0), (2, math.nan)])
def test_bad_hyperparameters_are_refused(C, b):
    with pytest.raises(InvalidParameter):
        svt_epsilon(C, b)


@pytest.mark.parametrize("config", [{"queries": 0}, {"ones": 0}, {"ones": 101}, {"oders": 5}, {"seed": -1}])
def test_bad_configuration_is_refused(config):
    with pytest.raises(InvalidParameter):
        build(config)
