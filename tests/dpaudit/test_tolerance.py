"""Tests of dpaudit.tolerance: the one relative slack between a recomputed value and a recorded one."""

from __future__ import annotations

import math

from dpaudit.tolerance import REL_TOL, within


def test_within_allows_rounding_and_nothing_more() -> None:
    assert REL_TOL == 1e-9
    assert within(1.0 + 0.5e-9, 1.0)
    assert not within(1.0 + 2e-9, 1.0)
    assert within(0.0, 0.0) and not within(1e-300, 0.0)


def test_a_nan_is_never_within() -> None:
    assert not within(math.nan, 1.0)
    assert not within(1.0, math.nan)
