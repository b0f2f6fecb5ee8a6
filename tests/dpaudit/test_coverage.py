"""What one charge covers (dpaudit/coverage.py): the pure rules that the session and verify share."""

from __future__ import annotations

from dataclasses import fields

import pytest

from dpaudit import from_formula
from dpaudit.coverage import (
    CoverageState,
    after_claim,
    after_release,
    after_round_start,
    count_numbers,
    coverage_of,
    next_query,
    unused,
)
from dpaudit.errors import BudgetExceeded, UncoveredRelease
from dpaudit.events import (
    EVENT_KINDS,
    AboveThresholdEvent,
    ComposedEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    LeafEvent,
    PoissonSubsampledGaussianEvent,
    RandomizedResponseEvent,
    RepeatAndSelectEvent,
    SampledWithoutReplacementGaussianEvent,
    SelfComposedEvent,
)
from dpaudit.mechanisms.outputs import (
    AboveThresholdRound,
    Coverage,
    IndexOutput,
    SelectedOutput,
    TrainingRun,
    VectorOutput,
)
from dpaudit.mechanisms.registry import registered_types
from dpaudit.sensitivity import declared

L1 = declared(1.0, "l1", "test")
L2 = declared(1.0, "l2", "test")


def _laplace(dimension: int = 1) -> LaplaceEvent:
    return LaplaceEvent(neighbouring="add_remove", sensitivity=L1, epsilon=0.1, scale=10.0 * dimension, grid=0.01,
                        dimension=dimension)


def _above_threshold(max_queries: int = 3) -> AboveThresholdEvent:
    return AboveThresholdEvent(neighbouring="add_remove", sensitivity=L1, epsilon=0.5, threshold_scale=4.0,
                               query_scale=8.0, grid=0.01, max_queries=max_queries)


def _dpsgd() -> PoissonSubsampledGaussianEvent:
    return PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=0.01, noise_multiplier=1.0, steps=10)


def test_every_event_kind_states_what_one_charge_covers():
    gaussian = GaussianEvent(neighbouring="add_remove", sensitivity=L2, epsilon=1.0, delta=1e-6, sigma=5.0,
                             grid=0.01, dimension=4)
    exponential = ExponentialEvent(neighbouring="add_remove", sensitivity=L1, epsilon=0.1, n_candidates=7)
    wor = SampledWithoutReplacementGaussianEvent(
        neighbouring="replace_one", sensitivity=declared(2.0, "l2", "test"), batch_size=10, dataset_size=100,
        noise_multiplier=1.0, steps=5)
    assert coverage_of(_laplace(3)) == Coverage(VectorOutput(3), 1)
    assert coverage_of(gaussian) == Coverage(VectorOutput(4), 1)
    assert coverage_of(exponential) == Coverage(IndexOutput(7), 1)
    assert coverage_of(_above_threshold(5)) == Coverage(AboveThresholdRound(5), 1)
    assert coverage_of(SelfComposedEvent(event=_above_threshold(5), count=4)) == Coverage(AboveThresholdRound(5), 4)
    assert coverage_of(_dpsgd()) == Coverage(TrainingRun(), 1)
    assert coverage_of(wor) == Coverage(TrainingRun(), 1)
    assert coverage_of(RepeatAndSelectEvent(event=_dpsgd(), distribution="geometric", gamma=0.1)) == Coverage(
        SelectedOutput(), 1)
    bit = RandomizedResponseEvent(neighbouring="add_remove", sensitivity=from_formula("bit", "add_remove"),
                                  epsilon=0.5)
    assert coverage_of(bit) == Coverage(IndexOutput(2), 1)
    nested = SelfComposedEvent(event=SelfComposedEvent(event=_laplace(), count=3), count=2)
    assert coverage_of(nested) == Coverage(VectorOutput(1), 6)


def test_every_registered_mechanism_kind_has_a_coverage_rule():
    """The mechanism table is complete: a new event kind whose module registers no rule fails here."""
    mechanisms = {cls for cls in EVENT_KINDS.values() if issubclass(cls, LeafEvent)} | {RepeatAndSelectEvent}
    assert mechanisms <= set(registered_types())


def test_a_composition_of_different_events_has_no_release_rule():
    with pytest.raises(UncoveredRelease, match="no release rule"):
        coverage_of(ComposedEvent(events=(_laplace(), _dpsgd())))
    with pytest.raises(UncoveredRelease, match="no release rule"):
        coverage_of(SelfComposedEvent(event=ComposedEvent(events=(_laplace(), _laplace(2))), count=2))


def test_uncovered_release_is_a_budget_exceeded():
    """Callers that stop on BudgetExceeded (nothing more can be paid for) also stop on an uncovered release."""
    assert issubclass(UncoveredRelease, BudgetExceeded)


def test_one_laplace_charge_covers_exactly_one_output_of_its_dimension():
    state = unused(_laplace(3))
    used = after_release(state, [1.0, 2.0, -3])
    assert used.outputs == 1
    with pytest.raises(UncoveredRelease, match="one release more"):
        after_release(used, [1.0, 2.0, 3.0])
    for wrong in (1.0, [1.0, 2.0], [1.0, 2.0, 3.0, 4.0], [[1.0, 2.0], [3.0, 4.0]], "1,2,3", {"a": 1.0},
                  [1.0, True, 2.0], [1.0, None, 2.0], [1.0, float("nan"), 2.0]):
        with pytest.raises(UncoveredRelease, match="charge covers 3 number"):
            after_release(state, wrong)
    assert after_release(unused(_laplace(4)), [[1, 2], [3, 4]]).outputs == 1  # np.size of a 2x2 array


def test_count_numbers_is_np_size_of_numeric_json():
    assert count_numbers(3) == 1 and count_numbers(2.5) == 1
    assert count_numbers([[1, 2, 3], [4, 5, 6]]) == 6 and count_numbers([]) == 0
    for bad in (True, False, None, "x", {"a": 1}, [1, "x"], float("inf"), -float("inf"), float("nan"),
                [1.0, float("nan")]):
        assert count_numbers(bad) is None
    assert count_numbers(-0.0) == 1 and count_numbers(2**70) == 1 and count_numbers([True]) is None


def test_one_exponential_charge_covers_one_index_in_range():
    state = unused(ExponentialEvent(neighbouring="add_remove", sensitivity=L1, epsilon=0.1, n_candidates=3))
    for wrong in (-1, 3, 1.0, True, "1", [1]):
        with pytest.raises(UncoveredRelease, match=r"not an index in \[0, 3\)"):
            after_release(state, wrong)
    with pytest.raises(UncoveredRelease, match="one release more"):
        after_release(after_release(state, 2), 0)


def test_above_threshold_rounds_halt_after_the_first_above_and_cap_queries():
    state = unused(SelfComposedEvent(event=_above_threshold(max_queries=2), count=2))
    state, first = after_round_start(state)
    assert first == 0 and next_query(state, 0) == 0
    state = after_release(state, {"round": 0, "query": 0, "above": False})
    state = after_release(state, {"round": 0, "query": 1, "above": False})
    with pytest.raises(UncoveredRelease, match="already gave its 2"):
        after_release(state, {"round": 0, "query": 2, "above": False})
    state, second = after_round_start(state)
    assert second == 1
    state = after_release(state, {"round": 1, "query": 0, "above": True})
    with pytest.raises(UncoveredRelease, match="halted"):
        after_release(state, {"round": 1, "query": 1, "above": False})
    with pytest.raises(UncoveredRelease, match="rounds are used"):
        after_round_start(state)


@pytest.mark.parametrize("answer, reason", [
    ({"round": 0, "query": 1, "above": False}, "expected 0"),       # skips an answer number
    ({"round": 2, "query": 0, "above": False}, "outside the 2"),    # a round that was not charged
    ({"round": -1, "query": 0, "above": False}, "outside the 2"),
    ({"round": True, "query": 0, "above": False}, "outside the 2"),
    ({"round": 0, "query": 0, "above": 1}, "not a boolean"),
    ({"round": 0, "query": 0, "above": False, "score": 0.93}, "exactly"),  # smuggles a value along
    ({"round": 0, "query": 0}, "exactly"),
    (True, "exactly"),
])
def test_malformed_above_threshold_answers_are_refused(answer, reason):
    state = unused(SelfComposedEvent(event=_above_threshold(), count=2))
    with pytest.raises(UncoveredRelease, match=reason):
        after_release(state, answer)


def test_an_answer_written_before_rounds_existed_counts_as_round_zero():
    """Ledgers from before ``above_threshold_rounds`` hold ``{query, above}``: still verifiable, as round 0."""
    state = unused(_above_threshold())
    state = after_release(state, {"query": 0, "above": True})
    with pytest.raises(UncoveredRelease, match="round 0 halted"):
        after_release(state, {"query": 1, "above": False})


def test_a_replayed_ledger_may_skip_a_silent_round_but_never_exceed_the_rounds():
    """verify sees only answers: a round started without answering leaves no record, so round 1 may follow
    round 0's absence; still no more than ``count`` distinct rounds can be answered."""
    state = unused(SelfComposedEvent(event=_above_threshold(), count=2))
    state = after_release(state, {"round": 1, "query": 0, "above": True})
    state = after_release(state, {"round": 0, "query": 0, "above": False})
    assert state.rounds_started == 2
    with pytest.raises(UncoveredRelease, match="outside"):
        after_release(state, {"round": 2, "query": 0, "above": False})


def test_a_training_charge_covers_one_claimed_run_and_one_output():
    state = unused(_dpsgd())
    claimed = after_claim(state)
    with pytest.raises(UncoveredRelease, match="one run only"):
        after_claim(claimed)
    released = after_release(claimed, {"model_sha256": "ab" * 32, "n_parameters": 10})
    with pytest.raises(UncoveredRelease, match="one release more"):
        after_release(released, {"model_sha256": "cd" * 32})
    with pytest.raises(UncoveredRelease, match="only a training"):
        after_claim(unused(_laplace()))
    with pytest.raises(UncoveredRelease, match="only a training"):
        after_claim(unused(RepeatAndSelectEvent(event=_dpsgd(), distribution="geometric", gamma=0.1)))


def test_a_repeat_and_select_charge_covers_one_selected_output():
    state = unused(RepeatAndSelectEvent(event=_dpsgd(), distribution="poisson", mu=2.0))
    used = after_release(state, {"selected": None})
    with pytest.raises(UncoveredRelease, match="one release more"):
        after_release(used, {"candidate_index": 1})


def test_rounds_apply_only_to_above_threshold_charges():
    with pytest.raises(UncoveredRelease, match="no rounds"):
        after_round_start(unused(_laplace()))
    with pytest.raises(UncoveredRelease, match="no rounds"):
        next_query(unused(_laplace()), 0)


def test_after_release_keeps_every_field_of_the_state_but_the_count():
    """``after_release`` builds the next state by its constructor (faster than ``dataclasses.replace``): it must name
    every field, so a field added to the state must be added there too (this test lists them)."""
    assert [f.name for f in fields(CoverageState)] == ["coverage", "outputs", "claims", "rounds"]
    state = CoverageState(unused(_laplace(2)).coverage, 0, 3, ())
    after = after_release(state, [1.0, 2.0])
    assert (after.coverage, after.outputs, after.claims, after.rounds) == (state.coverage, 1, 3, ())
