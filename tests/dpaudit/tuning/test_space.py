"""Search spaces (dpaudit.tuning.space): grid products, random and Sobol designs drawn from the session's random
source only, integer and categorical parameters, the mapping form, and a seeded statistical test of the log scale."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.tuning import space as space_module
from dpaudit.tuning.space import Parameter, SearchSpace, draw_settings


def test_grid_is_the_product_of_the_parameters_grids_with_integers_deduplicated():
    space = SearchSpace((Parameter("lr", "float", 0.01, 1.0, log=True, points=3),
                         Parameter("epochs", "int", 1, 2, points=4),
                         Parameter("opt", "categorical", choices=("sgd", "adam"))))
    settings = draw_settings(space, SeededRandom(0))
    assert [s["lr"] for s in settings[::4]] == pytest.approx([0.01, 0.1, 1.0])
    assert len(settings) == 3 * 2 * 2  # epochs 1, 1.33, 1.67, 2 rounds to {1, 2}
    assert {s["epochs"] for s in settings} == {1, 2} and {s["opt"] for s in settings} == {"sgd", "adam"}


@pytest.mark.parametrize("design", ["random", "sobol"])
def test_draws_depend_on_the_random_source_alone_and_stay_in_range(design):
    space = SearchSpace((Parameter("lr", "float", 1e-3, 1.0, log=True), Parameter("b", "int", 16, 256),
                         Parameter("act", "categorical", choices=("relu", "tanh"))), design=design, samples=16)
    first, again, other = (draw_settings(space, SeededRandom(s)) for s in (7, 7, 8))
    assert first == again and first != other
    for s in first:
        assert 1e-3 <= s["lr"] <= 1.0 and 16 <= s["b"] <= 256 and isinstance(s["b"], int)
        assert s["act"] in ("relu", "tanh")


def _log_lr(rng_seed: int, n: int) -> np.ndarray:
    space = SearchSpace((Parameter("lr", "float", 1e-4, 1.0, log=True),), design="random", samples=n)
    return np.log10([s["lr"] for s in draw_settings(space, SeededRandom(rng_seed))])


def test_log_uniform_draws_are_uniform_in_log_space_and_a_linear_draw_is_caught(monkeypatch):
    # n = 2000 draws: KS against U(-4, 0) at alpha = 1e-3. Power: a linear-scale draw puts 90% of its mass above
    # 10^-1, a KS distance of ~0.65, rejected with probability > 1 - 1e-100 at this n.
    assert stats.kstest(_log_lr(0, 2000), stats.uniform(loc=-4, scale=4).cdf).pvalue > 1e-3

    def linear(self, u):  # the broken variant: ignores the log scale
        return float(self.low + u * (self.high - self.low))

    monkeypatch.setattr(space_module.Parameter, "value", linear)
    assert stats.kstest(_log_lr(0, 2000), stats.uniform(loc=-4, scale=4).cdf).pvalue < 1e-3


def test_integer_and_categorical_draws_cover_every_value_evenly():
    # 6000 draws over 3 integers and 3 choices: chi-square goodness of fit at alpha = 1e-3 (seeded)
    space = SearchSpace((Parameter("k", "int", 1, 3), Parameter("c", "categorical", choices=("a", "b", "c"))),
                        design="random", samples=6000)
    rng = SeededRandom(3)
    units = [(rng.randbelow(2**53) / 2**53, rng.randbelow(2**53) / 2**53) for _ in range(6000)]
    ks = [space.parameters[0].value(u) for u, _ in units]
    cs = [space.parameters[1].value(v) for _, v in units]
    assert stats.chisquare(np.bincount(ks)[1:]).pvalue > 1e-3
    assert stats.chisquare([cs.count(c) for c in "abc"]).pvalue > 1e-3
    assert len(draw_settings(space, SeededRandom(0))) == 9  # duplicates dropped: at most 3 x 3 distinct settings


def test_mapping_form_fixed_values_and_round_trip():
    space = SearchSpace.from_mapping({"design": "sobol", "samples": 4, "parameters": {
        "lr": {"low": 0.1, "high": 1.0, "log": True}, "batch_size": {"low": 8, "high": 64, "int": True},
        "opt": {"choices": ["sgd", "adam"]}, "epochs": 2}})
    settings = draw_settings(space, SeededRandom(0))
    assert len(settings) == 4 and all(s["epochs"] == 2 for s in settings)
    assert space.to_dict()["parameters"][0] == {"name": "lr", "kind": "float", "low": 0.1, "high": 1.0, "log": True,
                                                "points": 3}


@pytest.mark.parametrize("raw, match", [
    ({"parameters": {}}, "non-empty table"),
    ({"parameters": {"lr": {"low": 0.0, "high": 1.0, "log": True}}}, "log scale needs low > 0"),
    ({"parameters": {"lr": {"low": 2.0, "high": 1.0}}}, "exceeds high"),
    ({"parameters": {"lr": {"low": 1, "high": 2, "step": 1}}}, "unknown key"),
    ({"parameters": {"n": {"low": 1.5, "high": 4, "int": True}}}, "integer bounds"),
    ({"parameters": {"lr": {"low": math.nan, "high": 1.0}}}, "NaN"),
    ({"parameters": {"c": {"choices": []}}}, "choices"),
    ({"design": "bayes", "parameters": {"a": 1}}, "design"),
    ({"samples": 0, "parameters": {"a": 1}}, "samples"),
    ({"parameters": {"a": 1}, "extra": 1}, "unknown search-space key"),
])
def test_bad_spaces_are_refused(raw, match):
    with pytest.raises(InvalidParameter, match=match):
        SearchSpace.from_mapping(raw)
