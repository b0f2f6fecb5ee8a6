"""Every kernel sensitivity formula against brute force over small neighbouring data sets, under both relations.

For each formula in dpaudit/sensitivity.py and each neighbouring relation it accepts, the true sensitivity of the
query it describes is computed by enumerating every neighbouring pair of small data sets built from candidate
records that include the extremes (values beyond the clipping bounds, opposite signs, gradients longer than the
clipping norm). The formula must bound that maximum, and attain it: each kernel formula is tight. A deliberately
wrong formula (the replace-one value used under add/remove, a missing factor 2) is caught by the same enumeration.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import FORMULAS, Neighbouring, from_formula
from dpaudit.testing.sensitivity import max_neighbour_change

ADD, REPLACE = Neighbouring.ADD_REMOVE, Neighbouring.REPLACE_ONE
VALUES = (-7.0, -2.0, 0.0, 1.5, 3.0, 9.0)  # below, inside and above every clipping range used here
RANGES = ((0.0, 5.0), (2.0, 5.0), (-3.0, 1.0), (-4.0, -1.0))
GRADIENTS = ((3.0, 4.0), (-3.0, -4.0), (0.3, 0.4), (0.0, 0.0), (-1.0, 2.0), (6.0, 0.0))
CLIP_NORMS = (0.5, 1.0, 2.5)
SIZES = (0, 1, 2, 3)


def _clipped(values, lower: float, upper: float) -> np.ndarray:
    return np.clip(np.asarray(values, dtype=float), lower, upper)


def _bounded_sum(lower: float, upper: float):
    return lambda data: float(_clipped(data, lower, upper).sum())


def _clipped_gradient_sum(clip_norm: float):
    def query(data) -> np.ndarray:
        total = np.zeros(2)
        for g in data:
            g = np.asarray(g, dtype=float)
            norm = float(np.linalg.norm(g))
            total += g * min(1.0, clip_norm / norm) if norm > 0 else g
        return total

    return query


def _sizes(relation: Neighbouring) -> tuple[int, ...]:
    return SIZES if relation is ADD else SIZES[1:]  # replace-one needs a record to replace


def _assert_tight(formula_value: float, brute: float) -> None:
    """The formula bounds the true change (up to float rounding of the enumeration) and is attained."""
    assert brute <= formula_value * (1 + 1e-12)
    assert brute == pytest.approx(formula_value, rel=1e-12)


@pytest.mark.parametrize("relation", [ADD, REPLACE])
@pytest.mark.parametrize(("lower", "upper"), RANGES)
def test_bounded_sum_is_the_largest_change(relation: Neighbouring, lower: float, upper: float) -> None:
    brute = max_neighbour_change(_bounded_sum(lower, upper), VALUES, relation, sizes=_sizes(relation), norm="abs")
    _assert_tight(from_formula("bounded_sum", relation, lower=lower, upper=upper).value, brute.value)


def test_bounded_sum_over_a_single_point_range() -> None:
    """Clipped to [c, c], adding a record still moves the sum by |c|; replacing one never moves it, and a
    sensitivity must be > 0, so the formula refuses rather than state 0."""
    brute = max_neighbour_change(_bounded_sum(1.5, 1.5), VALUES, ADD, sizes=SIZES, norm="abs")
    _assert_tight(from_formula("bounded_sum", ADD, lower=1.5, upper=1.5).value, brute.value)
    assert max_neighbour_change(_bounded_sum(1.5, 1.5), VALUES, REPLACE, sizes=(1, 2), norm="abs").value == 0.0
    with pytest.raises(InvalidParameter):
        from_formula("bounded_sum", REPLACE, lower=1.5, upper=1.5)


@pytest.mark.parametrize("relation", [ADD, REPLACE])
def test_count_is_the_largest_change(relation: Neighbouring) -> None:
    query = lambda data: float(sum(v > 0 for v in data))  # noqa: E731 - any public predicate
    brute = max_neighbour_change(query, VALUES, relation, sizes=_sizes(relation), norm="abs")
    _assert_tight(from_formula("count", relation).value, brute.value)


@pytest.mark.parametrize("relation", [ADD, REPLACE])
@pytest.mark.parametrize("bit", [
    lambda data: float(any(v > 2 for v in data)),  # does some record exceed a public threshold?
    lambda data: float(sum(v > 0 for v in data) % 2),  # parity of a count: flips with every record that counts
], ids=["any", "parity"])
def test_bit_is_the_largest_change(relation: Neighbouring, bit) -> None:
    brute = max_neighbour_change(bit, VALUES, relation, sizes=_sizes(relation), norm="abs")
    _assert_tight(from_formula("bit", relation).value, brute.value)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize(("lower", "upper"), RANGES)
def test_bounded_mean_with_public_n_is_the_largest_replace_one_change(n: int, lower: float, upper: float) -> None:
    query = lambda data: float(_clipped(data, lower, upper).mean())  # noqa: E731
    brute = max_neighbour_change(query, VALUES, REPLACE, sizes=(n,), norm="abs")
    _assert_tight(from_formula("bounded_mean", REPLACE, lower=lower, upper=upper, n=n).value, brute.value)


def test_bounded_mean_is_refused_under_add_remove() -> None:
    """Under add/remove n is not public: (upper − lower)/n would be a bound for a size no one may know."""
    with pytest.raises(InvalidParameter, match="replace-one"):
        from_formula("bounded_mean", ADD, lower=0.0, upper=1.0, n=10)


@pytest.mark.parametrize("relation", [ADD, REPLACE])
@pytest.mark.parametrize("clip_norm", CLIP_NORMS)
def test_clipped_gradient_sum_is_the_largest_l2_change(relation: Neighbouring, clip_norm: float) -> None:
    brute = max_neighbour_change(_clipped_gradient_sum(clip_norm), GRADIENTS, relation, sizes=_sizes(relation),
                                 norm="l2")
    _assert_tight(from_formula("clipped_gradient_sum", relation, clip_norm=clip_norm).value, brute.value)


def test_every_kernel_formula_is_checked_here() -> None:
    """A kernel formula added without a brute-force test above fails here (plugins' formulas have their own)."""
    kernel = {f.id for f in FORMULAS.values() if f.compute.__module__ == "dpaudit.sensitivity"}
    assert kernel == {"bounded_sum", "count", "bit", "bounded_mean", "clipped_gradient_sum"}


@pytest.mark.parametrize(("formula", "inputs"), [
    ("bounded_sum", {"lower": 5.0, "upper": 2.0}),
    ("bounded_sum", {"lower": -math.inf, "upper": 2.0}),
    ("bounded_sum", {"lower": 0.0, "upper": math.nan}),
    ("bounded_mean", {"lower": 0.0, "upper": 1.0, "n": 0}),
    ("bounded_mean", {"lower": 1.0, "upper": 0.0, "n": 3}),
    ("clipped_gradient_sum", {"clip_norm": 0.0}),
    ("clipped_gradient_sum", {"clip_norm": -1.0}),
])
def test_formulas_refuse_bad_inputs(formula: str, inputs: dict) -> None:
    with pytest.raises(InvalidParameter):
        from_formula(formula, REPLACE, **inputs)


# --- the brute force catches wrong formulas -------------------------------------------------------------------


def test_brute_force_catches_the_replace_one_sum_bound_used_under_add_remove() -> None:
    """upper − lower is the replace-one bound; under add/remove with 0 < lower it is too small (3 < 5 here)."""
    lower, upper = 2.0, 5.0
    wrong = upper - lower
    brute = max_neighbour_change(_bounded_sum(lower, upper), VALUES, ADD, sizes=SIZES, norm="abs")
    assert brute.value == 5.0 > wrong
    assert brute.neighbour == (*brute.data, 9.0)  # adding a record clipped to the upper bound


def test_brute_force_catches_a_gradient_sum_bound_missing_the_factor_two() -> None:
    """Under replace-one a clipped gradient can be swapped for its opposite: 2C, not C."""
    brute = max_neighbour_change(_clipped_gradient_sum(1.0), GRADIENTS, REPLACE, sizes=(1, 2), norm="l2")
    assert brute.value == pytest.approx(2.0) and brute.value > 1.0


def test_brute_force_refuses_abs_norm_for_a_vector_query() -> None:
    with pytest.raises(InvalidParameter, match="one-dimensional"):
        max_neighbour_change(_clipped_gradient_sum(1.0), GRADIENTS, ADD, sizes=(0,), norm="abs")


def test_brute_force_needs_pairs() -> None:
    with pytest.raises(InvalidParameter, match="no neighbouring pairs"):
        max_neighbour_change(_bounded_sum(0.0, 1.0), VALUES, REPLACE, sizes=(0,), norm="abs")
