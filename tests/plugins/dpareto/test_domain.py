"""The declared domain (plugins/dpareto/domain.py) and the objective transforms (plugins/dpareto/objectives.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.dpareto.domain import Domain, Parameter
from dpaudit_plugins.dpareto.objectives import (
    ERROR_CLAMP,
    is_valid_error,
    privacy_transform,
    transform_reference,
    utility_transform,
)

# Avent et al. 2020, Table 1 (the Adult domains)
TABLE_1 = Domain((Parameter("epochs", 1, 64, integer=True), Parameter("lot", 8, 512, integer=True),
                  Parameter("lr", 5e-4, 5e-2, scale="log"), Parameter("noise", 0.1, 16, scale="log"),
                  Parameter("clip", 0.1, 4)))


def test_unit_cube_maps_onto_the_declared_scales():
    values = TABLE_1.from_unit(np.array([[0.0] * 5, [1.0] * 5, [0.5] * 5]))
    np.testing.assert_allclose(values[0], [1, 8, 5e-4, 0.1, 0.1])
    np.testing.assert_allclose(values[1], [64, 512, 5e-2, 16, 4])
    np.testing.assert_allclose(values[2], [round(32.5), 260, math.sqrt(5e-4 * 5e-2), math.sqrt(0.1 * 16), 2.05])


def test_integers_are_rounded_and_snap_is_what_runs():
    rng = np.random.default_rng(0)
    u = rng.random((200, 5))
    values = TABLE_1.from_unit(u)
    assert np.all(values[:, :2] == np.rint(values[:, :2]))
    np.testing.assert_allclose(TABLE_1.from_unit(TABLE_1.snap(u)), values, rtol=1e-12)
    np.testing.assert_allclose(TABLE_1.snap(u)[:, 2:], u[:, 2:], atol=1e-12)  # continuous ones unchanged
    point = TABLE_1.point(values[0])
    assert isinstance(point["epochs"], int) and isinstance(point["lr"], float)
    assert TABLE_1.from_unit(np.array([[-0.5, 1.5, 0.0, 0.0, 0.0]]))[0, :2].tolist() == [1, 512]  # clipped


def test_grid_has_every_combination():
    grid = TABLE_1.grid(3)
    assert grid.shape == (243, 5) and len({tuple(r) for r in grid}) == 243  # Fig. 6: 243 points
    assert set(np.unique(grid)) == {0.0, 0.5, 1.0}


@pytest.mark.parametrize("bad", [dict(name="x", lower=1, upper=1), dict(name="x", lower=0, upper=1, scale="log"),
                                 dict(name="x", lower=0.5, upper=2, integer=True),
                                 dict(name="x", lower=0, upper=1, scale="cubic"), dict(name="", lower=0, upper=1)])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(InvalidParameter):
        Parameter(**bad)


def test_domain_parses_and_refuses_duplicates():
    parsed = Domain.from_list([p.to_dict() for p in TABLE_1.parameters])
    assert parsed == TABLE_1
    with pytest.raises(InvalidParameter, match="distinct"):
        Domain((Parameter("a", 0, 1), Parameter("a", 0, 2)))
    with pytest.raises(InvalidParameter, match="unknown|not allowed|Unknown"):
        Domain.from_list([{"name": "a", "lower": 0, "upper": 1, "scal": "log"}])


def test_transforms_and_the_clamp():
    assert privacy_transform(math.e) == pytest.approx(1.0)
    assert utility_transform(0.5) == pytest.approx(0.0)
    c = ERROR_CLAMP
    assert utility_transform(0.0) == pytest.approx(math.log(c / (1 - c)))
    assert utility_transform(1.0) == pytest.approx(math.log((1 - c) / c))
    assert np.all(np.isfinite(utility_transform(np.array([0.0, 1e-9, 0.3, 1.0]))))
    errors = np.linspace(c, 1 - c, 50)
    assert np.all(np.diff(utility_transform(errors)) > 0)  # monotone: dominance is preserved
    np.testing.assert_allclose(transform_reference((10.0, 1.0)), [math.log(10.0), math.log((1 - c) / c)])


@pytest.mark.parametrize("value, ok", [(0.0, True), (1.0, True), (0.3, True), (np.float32(0.2), True),
                                       (math.nan, False), (math.inf, False), (1.0001, False), (-0.1, False),
                                       (None, False), ("0.3", False), (True, False)])
def test_valid_errors(value, ok):
    assert is_valid_error(value) is ok
