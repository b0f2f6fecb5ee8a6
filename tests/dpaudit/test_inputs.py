"""Bad input is refused before the charge; private NaN and infinity follow one data-independent rule (issue 17.4).

The matrix: for every public entry point (the Session and a plugin's view of it) and every parameter of every
mechanism, each hostile value (NaN, ±inf, -0.0, negative, zero, huge, str, None, list, complex, dict, bool, wrong
shape, empty) ends in a DPAuditError with the ledger's bytes and the spent budget unchanged. Private values (the
data noised, the exponential mechanism's scores, an AboveThreshold query) are instead released under the rule of
dpaudit/mechanisms/private_inputs.py: the tests check that a NaN is released exactly as a 0 would be (same seeded
noise, same output), so the refusal bit of the old behaviour (charge, then raise) is gone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpaudit import Session
from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.mechanisms import private_inputs
from dpaudit.mechanisms.randomness import SeededRandom

WRONG_TYPES: list[Any] = ["abc", None, [1.0, 2.0], 1j, {}, {"a": 1}, True]
#: hostile values of a numeric privacy parameter (ε, δ, Δ, a grid, a count)
NUMBERS: list[Any] = [math.nan, math.inf, -math.inf, -0.0, -1.0, 0.0, 1e308, *WRONG_TYPES]
#: hostile values to noise whose fault does not depend on the numbers (type, dtype, shape, emptiness)
VALUES: list[Any] = [*WRONG_TYPES, (1.0, 2.0), np.array([]), np.zeros((2, 0)), np.array([1j]), np.array(["a"]),
                     np.array([1.0, None], dtype=object), np.array([True]), Fraction(1, 3)]


@pytest.fixture(params=["session", "plugin"])
def entry(request, tmp_path):
    """The two public entry points: the Session itself and a plugin's view of it."""
    session = Session(100.0, 1e-6, store=tmp_path, mirror=False, rng=SeededRandom(0))
    yield session, (session if request.param == "session" else session.for_plugin("p", "1.0"))
    session.close()


def assert_refused(session: Session, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """``call(*args, **kwargs)`` raises a DPAuditError; the ledger's bytes and the spent budget stay as they were."""
    before = session.ledger_path.read_bytes(), session.spent_epsilon()
    with pytest.raises(DPAuditError):
        call(*args, **kwargs)
    assert (session.ledger_path.read_bytes(), session.spent_epsilon()) == before


def _calls(api: Any) -> dict[str, Callable[[Any], Any]]:
    """One call per (mechanism, parameter), the parameter set to the argument; every other argument valid."""
    event = api.laplace_event(1.0, 0.1)
    return {
        "laplace.sensitivity": lambda v: api.laplace(1.0, v, 0.1),
        "laplace.epsilon": lambda v: api.laplace(1.0, 1.0, v),
        "laplace.grid": lambda v: api.laplace(1.0, 1.0, 0.1, grid=v),
        "gaussian.sensitivity": lambda v: api.gaussian(1.0, v, 0.1, 1e-9),
        "gaussian.epsilon": lambda v: api.gaussian(1.0, 1.0, v, 1e-9),
        "gaussian.delta": lambda v: api.gaussian(1.0, 1.0, 0.1, v),
        "gaussian.grid": lambda v: api.gaussian(1.0, 1.0, 0.1, 1e-9, grid=v),
        "exponential.sensitivity": lambda v: api.exponential([1.0, 2.0], v, 0.1),
        "exponential.epsilon": lambda v: api.exponential([1.0, 2.0], 1.0, v),
        "randomized_response.epsilon": lambda v: api.randomized_response(True, v),
        "above_threshold.threshold": lambda v: api.above_threshold(v, 1.0, 0.1, max_queries=3),
        "above_threshold.sensitivity": lambda v: api.above_threshold(0.0, v, 0.1, max_queries=3),
        "above_threshold.epsilon": lambda v: api.above_threshold(0.0, 1.0, v, max_queries=3),
        "above_threshold.max_queries": lambda v: api.above_threshold(0.0, 1.0, 0.1, max_queries=v),
        "above_threshold_rounds.rounds": lambda v: api.above_threshold_rounds(1.0, 0.1, max_queries=3, rounds=v),
        "repeat_and_select.gamma": lambda v: api.repeat_and_select(event, "geometric", {"gamma": v},
                                                                   **_plugin(api)),
        "repeat_and_select.mu": lambda v: api.repeat_and_select(event, "poisson", {"mu": v}, **_plugin(api)),
    }


def _plugin(api: Any) -> dict[str, str]:
    return {"plugin": "p"} if isinstance(api, Session) else {}


CALL_NAMES = [
    "laplace.sensitivity", "laplace.epsilon", "laplace.grid", "gaussian.sensitivity", "gaussian.epsilon",
    "gaussian.delta", "gaussian.grid", "exponential.sensitivity", "exponential.epsilon",
    "randomized_response.epsilon", "above_threshold.threshold", "above_threshold.sensitivity",
    "above_threshold.epsilon", "above_threshold.max_queries", "above_threshold_rounds.rounds",
    "repeat_and_select.gamma", "repeat_and_select.mu"]


#: members of NUMBERS that are valid for a parameter: None picks the default grid, any finite threshold is a valid
#: public threshold, a huge Poisson mean or score sensitivity is valid (if pointless)
VALID: dict[str, list[Any]] = {"laplace.grid": [None], "gaussian.grid": [None], "exponential.sensitivity": [1e308],
                               "above_threshold.threshold": NUMBERS[3:7], "repeat_and_select.mu": [1e308]}


@pytest.mark.parametrize("name", CALL_NAMES)
def test_every_bad_parameter_is_refused_before_the_charge(entry, name):
    session, api = entry
    call = _calls(api)[name]
    valid = VALID.get(name, [])
    for value in NUMBERS:
        if not any(value is v for v in valid):
            assert_refused(session, call, value)


def _extremes(api: Any) -> dict[str, Callable[[], Any]]:
    """Extreme but valid-typed parameters, one call each: every one used to end in a ZeroDivisionError or an
    OverflowError, or (the first) to be charged and then refused by the sampler."""
    return {
        "laplace.scale_beyond_sampler": lambda: api.laplace(1.0, 1.0, 2.0**-50, grid=1.0),  # 2⁵¹ grid units
        "laplace.scale_underflows": lambda: api.laplace(1.0, 1e-300, 1e300),
        "laplace.scale_in_grid_units_overflows": lambda: api.laplace(1.0, 1e-310, 5e-324),
        "laplace.sensitivity_in_grid_units_overflows": lambda: api.laplace(1.0, 1e300, 1.0, grid=1e-300),
        "laplace.dimension_overflows": lambda: api.laplace_event(1.0, 1.0, dimension=10**400),
        "laplace.default_grid_underflows": lambda: api.laplace(1.0, 5e-324, 1.0),
        "gaussian.sigma_beyond_sampler": lambda: api.gaussian(1.0, 1.0, 1e-12, 1e-100),
        "gaussian.tiny_epsilon_and_delta": lambda: api.gaussian(1.0, 1.0, 1e-300, 1e-20),
        "gaussian.delta_underflows": lambda: api.gaussian(1.0, 1.0, 1.0, 5e-324),
        "gaussian.sensitivity_in_grid_units_overflows": lambda: api.gaussian(1.0, 1e300, 1.0, 1e-6, grid=1e-300),
        "above_threshold.scale_underflows": lambda: api.above_threshold(0.0, 1e-300, 1e300, max_queries=3),
        "above_threshold.scale_in_grid_units_overflows": lambda: api.above_threshold(0.0, 1e-310, 5e-324,
                                                                                     max_queries=3),
        "above_threshold.scale_overflows": lambda: api.above_threshold(0.0, 1.7e308, 1.0, max_queries=3, grid=1.0),
    }


@pytest.mark.parametrize("name", sorted(_extremes(None)))
def test_extreme_parameters_are_refused_before_the_charge(entry, name):
    session, api = entry
    assert_refused(session, _extremes(api)[name])


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_values_of_the_wrong_type_dtype_or_shape_are_refused_before_the_charge(entry, mechanism):
    session, api = entry
    for value in VALUES:
        if mechanism == "laplace":
            assert_refused(session, api.laplace, value, 1.0, 0.1)
        else:
            assert_refused(session, api.gaussian, value, 1.0, 0.1, 1e-9)


def test_scores_of_the_wrong_type_or_shape_are_refused_before_the_charge(entry):
    session, api = entry
    for scores in ["ab", None, 1.0, {}, {"a": 1.0}, [], np.array([]), np.zeros((2, 2)), np.array([1j, 2j]),
                   [1.0, "a"], [1.0, None], [1.0, 1j], [1.0, [2.0]], [True, False], np.array(["a", "b"])]:
        assert_refused(session, api.exponential, scores, 1.0, 0.1)
    for monotone in ["yes", None, 1]:
        assert_refused(session, api.exponential, [1.0, 2.0], 1.0, 0.1, monotone=monotone)


def test_labels_plugins_bits_and_bodies_of_the_wrong_type_are_refused(entry):
    session, api = entry
    for label in [None, 1.0, -0.0, ["a"], {}, b"x"]:
        assert_refused(session, api.laplace, 1.0, 1.0, 0.1, label=label)
        assert_refused(session, api.exponential, [1.0], 1.0, 0.1, label=label)
    for bit in [1, 0.0, "True", None, [True], np.array([True])]:
        assert_refused(session, api.randomized_response, bit, 0.1)
    for plugin in [None, "", 1.0, ["p"]]:
        assert_refused(session, session.laplace, 1.0, 1.0, 0.1, plugin=plugin)
        assert_refused(session, session.record_info, plugin, {"a": 1})
    for body in [None, "abc", [1, 2], 1.0]:
        assert_refused(session, api.record_info, *_plugin(api).values(), body)


def test_charge_handles_and_plans_of_the_wrong_type_are_refused(entry):
    session, api = entry
    for bad in [*WRONG_TYPES, 1.0, np.array([1.0])]:
        assert_refused(session, api.claim, bad)
        assert_refused(session, api.record_release, bad, 1.0)
        assert_refused(session, api.check_affordable, bad)
        assert_refused(session, api.check_affordable, [api.laplace_event(1.0, 0.1), bad])
    assert_refused(session, api.check_affordable, [])
    assert_refused(session, api.check_affordable, api.laplace_event(1.0, 0.1))


def test_a_bad_above_threshold_query_is_refused_without_counting(entry):
    session, api = entry
    run = api.above_threshold(0.0, 1.0, 0.1, max_queries=1)
    for value in ["abc", None, [1.0], 1j, {}, True, np.array([1.0]), np.array([])]:
        assert_refused(session, run.test, value)
    run.test(-1e9)  # the one query the round pays for is still there
    rounds = api.above_threshold_rounds(1.0, 0.1, max_queries=1, rounds=1)
    for threshold in [math.nan, math.inf, "abc", None, 1j]:
        assert_refused(session, rounds.next_round, threshold)
    rounds.next_round(0.0)  # the refused thresholds used no round


def _seeded(tmp_path, name: str) -> Session:
    return Session(100.0, 1e-6, store=tmp_path / name, mirror=False, rng=SeededRandom(7))


def _released(tmp_path, name: str, release: Callable[[Session], Any]) -> tuple[Any, list[Any]]:
    """The output of ``release`` in a fresh seeded session, and the outputs its ledger recorded."""
    with _seeded(tmp_path, name) as session:
        out = release(session)
        recorded = [r.body["output"] for r in session._ledger.records() if r.type == "release"]
    return out, recorded


@pytest.mark.parametrize("private, imputed", [
    (math.nan, 0.0), (math.inf, private_inputs.BOUND), (-math.inf, -private_inputs.BOUND),
    (1e308, private_inputs.BOUND), (10**400, private_inputs.BOUND), (-(10**400), -private_inputs.BOUND),
    (np.float32("nan"), 0.0), (np.float64("-inf"), -private_inputs.BOUND),
])
@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_a_non_finite_private_value_is_released_as_its_imputed_value(tmp_path, mechanism, private, imputed):
    """No refusal bit: a NaN (infinity, huge value) is charged and released exactly as the imputed value would be."""
    def run(value):
        if mechanism == "laplace":
            return lambda s: s.laplace(value, 1.0, 0.5)
        return lambda s: s.gaussian(value, 1.0, 0.5, 1e-9)

    assert _released(tmp_path, "private", run(private)) == _released(tmp_path, "imputed", run(imputed))


def test_arrays_follow_the_rule_coordinate_by_coordinate(tmp_path):
    private = np.array([[math.nan, 1.5], [math.inf, -math.inf]], dtype=np.float32)
    imputed = np.array([[0.0, 1.5], [private_inputs.BOUND, -private_inputs.BOUND]])
    out_private, rec_private = _released(tmp_path, "private", lambda s: s.laplace(private, 1.0, 0.5))
    out_imputed, rec_imputed = _released(tmp_path, "imputed", lambda s: s.laplace(imputed, 1.0, 0.5))
    assert np.array_equal(out_private, out_imputed) and rec_private == rec_imputed
    assert np.isfinite(out_private).all() and out_private.shape == (2, 2)


def test_exponential_scores_and_above_threshold_queries_follow_the_rule(tmp_path):
    bound = private_inputs.BOUND
    for private, imputed in [([math.nan, 1.0], [0.0, 1.0]), ([math.inf, 1.0, -math.inf], [bound, 1.0, -bound]),
                             (np.array([math.nan, 3.0]), [0.0, 3.0])]:
        def choose(scores):
            return lambda s: s.exponential(scores, 1.0, 0.5)
        assert _released(tmp_path, "p", choose(private)) == _released(tmp_path, "i", choose(imputed))
    for private, imputed in [(math.nan, 0.0), (math.inf, bound), (-math.inf, -bound)]:
        def answers(value):
            return lambda s: s.above_threshold(0.5, 1.0, 0.5, max_queries=3).test(value)
        assert _released(tmp_path, "p", answers(private)) == _released(tmp_path, "i", answers(imputed))


def test_the_rule_keeps_finite_values_and_exact_numbers():
    assert private_inputs.into_domain(-0.0) == 0.0 and private_inputs.into_domain(3) == 3
    assert private_inputs.into_domain([Fraction(1, 3), 2]) == [Fraction(1, 3), 2]
    ints = np.arange(4)
    assert private_inputs.into_domain(ints) is ints
    values = np.array([1.0, -2.5])
    assert np.array_equal(private_inputs.into_domain(values), values)


def test_a_noise_scale_that_overflows_is_refused_before_the_charge(entry):
    session, api = entry
    assert_refused(session, api.laplace, 1.0, 1e300, 1e-10)
    with pytest.raises(InvalidParameter, match="not a finite number"):
        api.laplace_event(1e300, 1e-10)
