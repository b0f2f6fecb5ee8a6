"""Parameter validation: clear errors for bad privacy parameters and configurations."""

from __future__ import annotations

import math

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_delta, check_epsilon, check_known_keys, check_probability


@pytest.mark.parametrize("bad", [-1.0, 0.0, math.nan, math.inf, "1", True, None])
def test_epsilon_refuses(bad):
    with pytest.raises(InvalidParameter, match="epsilon"):
        check_epsilon(bad)


@pytest.mark.parametrize("bad", [-1e-9, 1.0, 1.5, math.nan])
def test_delta_refuses(bad):
    with pytest.raises(InvalidParameter, match="delta"):
        check_delta(bad)


def test_delta_zero_only_when_allowed():
    assert check_delta(0.0) == 0.0
    with pytest.raises(InvalidParameter):
        check_delta(0.0, allow_zero=False)


def test_probability_and_count():
    assert check_probability("q", 1.0) == 1.0
    with pytest.raises(InvalidParameter):
        check_probability("q", 0.0)
    with pytest.raises(InvalidParameter):
        check_count("steps", 1.5)


def test_known_keys():
    check_known_keys({"a": 1}, {"a", "b"}, "demo")
    with pytest.raises(InvalidParameter, match=r"unknown demo config keys \['c'\]"):
        check_known_keys({"a": 1, "c": 2}, {"a", "b"}, "demo")
    with pytest.raises(InvalidParameter, match="mapping"):
        check_known_keys([1, 2], {"a"}, "demo")
