"""The private front's sensitivity formula (plugins/dpareto/formulas.py) against brute force over every neighbouring
pair of small evaluation sets, under both relations, for the value the code releases: the count over the public
n_eval clipped to [0, 1] (private_front.clip_rate), on sets larger than n_eval too, where the unclipped rate exceeds
1; and the broken variant it replaces (the realised, private size as divisor and noise scale under add/remove), whose
privacy loss is shown to be unbounded."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import FORMULAS, Neighbouring, from_formula
from dpaudit.testing import max_neighbour_change
from dpaudit_plugins.dpareto.formulas import FORMULA_ID
from dpaudit_plugins.dpareto.private_front import clip_rate

N_EVAL = 4
REPLICATIONS = 2
SHARES = tuple(k / REPLICATIONS for k in range(REPLICATIONS + 1))
"""w(x), the fraction of a trial's R = 2 models that misclassify an evaluation record: 0, 1/2 or 1."""


def exact_rate(data: tuple[float, ...]) -> float:
    """The mean error count over the public constant n_eval (above 1 on a set of more than n_eval records)."""
    return sum(data) / N_EVAL


def released_rate(data: tuple[float, ...]) -> float:
    """What a private-front trial puts through the Laplace mechanism: the exact rate clipped to [0, 1]."""
    return clip_rate(exact_rate(data))


@pytest.mark.parametrize("relation", list(Neighbouring))
def test_the_formula_is_the_exact_sensitivity_under_both_relations(relation):
    sizes = range(0, N_EVAL + 3) if relation is Neighbouring.ADD_REMOVE else range(1, N_EVAL + 3)
    assert exact_rate((1.0,) * max(sizes)) > 1  # the sets include ones whose unclipped rate exceeds 1
    found = max_neighbour_change(released_rate, SHARES, relation, sizes=sizes, norm="abs")
    formula = from_formula(FORMULA_ID, relation, n_eval=N_EVAL)
    assert found.value <= formula.value * (1 + 1e-12)  # an upper bound, whatever the realised size
    assert found.value == pytest.approx(formula.value)  # and attained: the formula is not loose
    assert formula.formula in FORMULAS and formula.recompute(relation) == formula.value  # what verify recomputes


def test_a_bad_n_eval_is_refused():
    for bad in (0, -3, 2.5):
        with pytest.raises(InvalidParameter):
            from_formula(FORMULA_ID, "add_remove", n_eval=bad)


def laplace_log_density(x: np.ndarray, centre: float, scale: float) -> np.ndarray:
    return -np.abs(x - centre) / scale - math.log(2 * scale)


def test_the_realised_size_as_divisor_under_add_remove_has_unbounded_privacy_loss():
    """The broken variant: release rate(D) = count / |D| with Laplace scale 1 / (|D| ε), |D| private under add/remove.

    D = three records all misclassified, D' = D plus one more: both rates are 1, but the scales differ (1/(3ε) and
    1/(4ε)), so the log-density ratio grows linearly in the output and exceeds any ε. The formula's scale (public
    n_eval) is the same for both, and its loss never exceeds ε (checked on the same outputs)."""
    epsilon = 0.5
    data, neighbour = (1.0,) * 3, (1.0,) * 4
    outputs = np.linspace(-20, 20, 4001) / epsilon
    broken = (laplace_log_density(outputs, sum(data) / len(data), 1 / (len(data) * epsilon))
              - laplace_log_density(outputs, sum(neighbour) / len(neighbour), 1 / (len(neighbour) * epsilon)))
    assert np.abs(broken).max() > 10 * epsilon  # the broken variant is caught: no ε-DP at all
    scale = from_formula(FORMULA_ID, "add_remove", n_eval=N_EVAL).value / epsilon
    sound = (laplace_log_density(outputs, released_rate(data), scale)
             - laplace_log_density(outputs, released_rate(neighbour), scale))
    assert np.abs(sound).max() <= epsilon * (1 + 1e-12)


def test_the_released_value_is_the_exact_rate_clipped_to_the_unit_interval():
    assert [clip_rate(v) for v in (-0.5, 0.0, 0.25, 1.0, (N_EVAL + 1) / N_EVAL, math.inf)] == [0, 0, 0.25, 1, 1, 1]
    assert [released_rate((1.0,) * n) for n in (N_EVAL, N_EVAL + 1)] == [1.0, 1.0]  # reviewer R4's neighbours
