"""The elastic loop (Ding et al. 2023, Alg. 1 l. 12-34): the state update, the non-randomized world of Lemma 1,
the T_max cap, and refusal of bad parameters and batches."""

from __future__ import annotations

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.constant_overhead.loop import LoopState, advance, run_elastic_loop, threshold_of
from dpaudit_plugins.constant_overhead.proposers import GridProposer


class ExactRound:
    """A noiseless round (the paper's "non-randomized world", Def. 5): ⊤ iff value ≥ threshold."""

    def __init__(self, threshold: float, log: list[float]) -> None:
        self.threshold = threshold
        log.append(threshold)

    def test(self, value: float) -> bool:
        return value >= self.threshold


def _exact(log: list[float]):
    return lambda threshold: ExactRound(threshold, log)


def test_advance_follows_algorithm_1():
    s = LoopState()
    assert threshold_of(s, 0.5, 0.1) == pytest.approx(0.6)
    s = advance(s, "a")  # pass: u += g·step, step doubles
    assert (s.units, s.step, s.selected, s.iterations) == (1, 2, "a", 1)
    s = advance(s, None)  # fail: step halves, s* kept
    assert (s.units, s.step, s.selected, s.iterations) == (1, 1, "a", 2)
    assert advance(s, None).step == 0


@pytest.mark.parametrize("n_units, expected_T", [(1, 3), (7, 7), (8, 9), (13, 11), (100, 19)])
def test_noiseless_loop_reaches_u_star_in_lemma_1_iterations(n_units, expected_T):
    """u* = u0 + g·n exactly. Lemma 1's walk: k passes to 2^k − 1 (the largest such ≤ n), then step halves from
    2^k to 0 (k + 1 iterations) with a pass and an extra halving for each of the m one-bits of n' = n − 2^k + 1:
    T = 2k + 1 + 2m (the paper's "2m + 2k" omits the last halving, from 1 to 0). E.g. n = 100: k = 6, n' = 37,
    m = 3, T = 19."""
    u0, g = 0.1, 0.05
    utilities = {"low": 0.1, "best": u0 + g * n_units + 1e-9}
    log: list[float] = []
    result = run_elastic_loop(GridProposer(["low", "best"]), utilities.__getitem__, _exact(log), u0=u0, g=g,
                              t_max=100, max_batch=2)
    assert result.selected == "best" and result.stopped_by == "step_zero"
    assert result.iterations[-1].state.units == n_units
    assert result.realised_iterations == expected_T == len(log)


def test_t_max_caps_the_loop():
    log: list[float] = []
    result = run_elastic_loop(GridProposer([0]), lambda s: 0.99, _exact(log), u0=0.0, g=0.001, t_max=4,
                              max_batch=1)
    assert result.realised_iterations == 4 == len(log) and result.stopped_by == "t_max"
    assert result.selected == 0


def test_nothing_passes_gives_no_selection():
    result = run_elastic_loop(GridProposer(["a", "b"]), lambda s: 0.1, _exact([]), u0=0.5, g=0.1, t_max=10,
                              max_batch=2)
    assert result.selected is None and result.realised_iterations == 1 and result.stopped_by == "step_zero"


def test_queries_stop_at_the_first_pass_and_utilities_are_asked_lazily():
    asked: list[str] = []

    def utility(s: str) -> float:
        asked.append(s)
        return {"a": 0.2, "b": 0.9, "c": 0.95}[s]

    run_elastic_loop(GridProposer(["a", "b", "c"]), utility, _exact([]), u0=0.5, g=0.1, t_max=1, max_batch=3)
    assert asked == ["a", "b"]


class _BadProposer:
    def __init__(self, batch):
        self.batch = batch

    def propose(self, history, selected):
        return self.batch


@pytest.mark.parametrize("batch", [[], ["a", "a"], ["a", "b", "c"]])
def test_bad_batches_are_refused(batch):
    with pytest.raises(InvalidParameter, match="batch"):
        run_elastic_loop(_BadProposer(batch), lambda s: 0.5, _exact([]), u0=0.0, g=0.1, t_max=3, max_batch=2)


@pytest.mark.parametrize("kwargs", [{"u0": 1.0}, {"u0": -0.1}, {"g": 0.0}, {"g": 1.0}, {"t_max": 0},
                                    {"max_batch": 0}])
def test_bad_parameters_are_refused(kwargs):
    params = {"u0": 0.0, "g": 0.1, "t_max": 3, "max_batch": 2, **kwargs}
    with pytest.raises(InvalidParameter):
        run_elastic_loop(GridProposer(["a"]), lambda s: 0.5, _exact([]), **params)
