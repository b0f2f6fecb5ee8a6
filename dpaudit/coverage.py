"""What one charge covers: how many outputs a charged event pays for, and of which shape.

A charge pays for the privacy loss of a fixed number of outputs of its mechanism, never for any number of them: fifty
releases under one ε-DP Laplace charge are a 50ε mechanism, and an AboveThreshold round that keeps answering after its
first ⊤ is no longer AboveThreshold (Dwork & Roth 2014, Alg. 1 and Thm. 3.23). This module dispatches, for every event
kind, to its mechanism module's rule for what one charge covers (registered in :mod:`dpaudit.mechanisms.registry`;
:func:`coverage_of`), and replays a charge's outputs against it (:func:`after_release`, :func:`after_round_start`,
:func:`after_claim`). The session calls these functions under its lock *before* it writes a release, so an extra or
mis-shaped release writes nothing; ``dpaudit verify`` calls the same functions over an exported ledger, so a
hand-edited ledger with extra releases fails, naming the charge. One implementation serves both (docs/ledger.md, "What
one charge covers").

=====================================================  ============================================================
event                                                  one charge covers
=====================================================  ============================================================
``laplace``, ``gaussian``                              one output of exactly ``dimension`` numbers (``np.size``)
``exponential``                                        one index ``i``, an int with ``0 <= i < n_candidates``
``randomized_response``                                one bit, the index 0 or 1
``above_threshold``                                    one round: answers ``{"round", "query", "above"}``, queries
                                                       numbered 0, 1, … consecutively, at most ``max_queries``,
                                                       none after the first ``above: true`` (``{"query",
                                                       "above"}``, written before rounds existed: round 0)
``poisson_subsampled_gaussian``,                       one training run (claimed once, before it starts) and its
``sampled_without_replacement_gaussian``               one output (the model)
``repeat_and_select``                                  one selected output (K and the other repetitions stay
                                                       secret)
``self_composed`` (event ``e``, ``count`` k)           k times what ``e`` covers (e.g. ``rounds`` AboveThreshold
                                                       rounds)
``composed``                                           nothing: which output belongs to which part is not
                                                       recorded, so releases against it are refused; charge the
                                                       parts separately
=====================================================  ============================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpaudit.errors import UncoveredRelease
from dpaudit.events import (
    PrivacyEvent,
    SelfComposedEvent,
)
from dpaudit.mechanisms.outputs import (
    AboveThresholdRound,
    Coverage,
    IndexOutput,
    TrainingRun,
    Unit,
    VectorOutput,
)
from dpaudit.mechanisms.registry import entry_for
from dpaudit.sidecar import ArrayFile

#: the exact keys of one AboveThreshold answer's output
ANSWER_KEYS = frozenset({"round", "query", "above"})
#: the keys of an answer written before rounds existed (dpaudit before ``above_threshold_rounds``): round 0
LEGACY_ANSWER_KEYS = frozenset({"query", "above"})

@dataclass(frozen=True)
class RoundState:
    """The answers an AboveThreshold round has given: how many, and whether it has halted (answered ⊤)."""

    answers: int = 0
    halted: bool = False


@dataclass(frozen=True)
class CoverageState:
    """What a charge has used of its coverage so far.

    Attributes:
        coverage: what the charge covers.
        outputs: outputs released (every unit but AboveThreshold rounds, whose answers are counted per round).
        claims: training runs started under the charge (:class:`TrainingRun` only).
        rounds: entry r is round r's state; None for a round with no recorded answer before a later round's
            (``verify`` sees only answers: such a round may have started, drawn its noisy threshold and released
            nothing).
    """

    coverage: Coverage
    outputs: int = 0
    claims: int = 0
    rounds: tuple[RoundState | None, ...] = ()

    @property
    def rounds_started(self) -> int:
        """Rounds started (or, in a replayed ledger, the highest round index answered plus one)."""
        return len(self.rounds)


def coverage_of(event: PrivacyEvent) -> Coverage:
    """What one charge of ``event`` covers (see the module docstring).

    Raises:
        UncoveredRelease: the event has no release rule (a composition of different events).
    """
    if isinstance(event, SelfComposedEvent):
        inner = coverage_of(event.event)
        return Coverage(inner.unit, inner.count * event.count)
    entry = entry_for(event)
    if entry is not None:
        return entry.coverage(event)
    raise UncoveredRelease(f"a {event.kind} event has no release rule (which output belongs to which of its parts "
                           "is not recorded): charge its parts separately and release against each")


def unused(event: PrivacyEvent) -> CoverageState:
    """The state of a fresh charge of ``event``.

    Raises:
        UncoveredRelease: the event has no release rule.
    """
    return CoverageState(coverage_of(event))


def count_numbers(value: Any) -> int | None:
    """How many numbers ``value`` (a number or nested lists of numbers, JSON form) holds; None if it holds
    anything else (a boolean, a string, a mapping, None, a non-finite float).

    A released array stored as a sidecar counts its numbers: an :class:`~dpaudit.sidecar.ArrayFile` (whose
    content ``dpaudit verify`` checks against its hash, dtype, shape and finiteness), or the numpy array itself
    before it is written (numeric dtype, every entry finite).
    """
    kind = type(value)
    if kind is float:  # what most released values are: decided without the checks below
        return 1 if math.isfinite(value) else None
    if kind is int:
        return 1
    if isinstance(value, ArrayFile):
        return value.size
    if isinstance(value, np.ndarray):
        numeric = value.dtype.kind in "iu" or (value.dtype.kind == "f" and bool(np.isfinite(value).all()))
        return value.size if numeric else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return 1
    if isinstance(value, float):
        return 1 if math.isfinite(value) else None
    if isinstance(value, list):
        total = 0
        for item in value:
            n = count_numbers(item)
            if n is None:
                return None
            total += n
        return total
    return None


def after_release(state: CoverageState, output: Any) -> CoverageState:
    """The state after releasing ``output`` (in its JSON form, as the ledger holds it).

    Raises:
        UncoveredRelease: the charge's outputs are used up, or ``output`` has another shape than the one charged.
    """
    unit = state.coverage.unit
    if isinstance(unit, AboveThresholdRound):
        return _after_answer(state, unit, output)
    if state.outputs >= state.coverage.count:
        raise UncoveredRelease(f"one release more than the charge covers ({state.coverage.describe()}, all "
                               "released)")
    problem = _shape_problem(unit, output)
    if problem:
        raise UncoveredRelease(problem)
    # ``replace(state, outputs=...)`` by the constructor (every field named: dataclasses.replace costs several
    # times more, once per release of a ledger that ``verify`` replays)
    return CoverageState(state.coverage, state.outputs + 1, state.claims, state.rounds)


def _shape_problem(unit: Unit, output: Any) -> str | None:
    """Why ``output`` is not one ``unit`` (None if it is). Training runs and selections release any JSON."""
    if isinstance(unit, VectorOutput):
        n = count_numbers(output)
        if n != unit.dimension:
            got = "a non-numeric output" if n is None else f"{n} number(s)"
            return f"release has {got}; the charge covers {unit.dimension} number(s)"
    if isinstance(unit, IndexOutput) and (isinstance(output, bool) or not isinstance(output, int)
                                          or not 0 <= output < unit.n_candidates):
        return f"release {output!r} is not an index in [0, {unit.n_candidates})"
    return None


def next_query(state: CoverageState, round_index: Any) -> int:
    """The number the next answer of AboveThreshold round ``round_index`` must carry.

    Raises:
        UncoveredRelease: not an AboveThreshold charge, a round outside the charged ones, a halted round, or a
            round that has given its ``max_queries`` answers.
    """
    unit = state.coverage.unit
    if not isinstance(unit, AboveThresholdRound):
        raise UncoveredRelease("not an AboveThreshold charge: it has no rounds")
    if isinstance(round_index, bool) or not isinstance(round_index, int) or \
            not 0 <= round_index < state.coverage.count:
        raise UncoveredRelease(f"round {round_index!r} is outside the {state.coverage.count} charged round(s)")
    current = state.rounds[round_index] if round_index < len(state.rounds) else None
    current = current or RoundState()
    if current.halted:
        raise UncoveredRelease(f"round {round_index} halted after its above-threshold answer; AboveThreshold "
                               "answers nothing after its first ⊤")
    if current.answers >= unit.max_queries:
        raise UncoveredRelease(f"round {round_index} already gave its {unit.max_queries} charged answer(s)")
    return current.answers


def _after_answer(state: CoverageState, unit: AboveThresholdRound, output: Any) -> CoverageState:
    if not isinstance(output, dict) or set(output) not in (ANSWER_KEYS, LEGACY_ANSWER_KEYS):
        raise UncoveredRelease(f"an AboveThreshold answer is exactly {{round, query, above}}, got {output!r}")
    round_index, query, above = output.get("round", 0), output["query"], output["above"]
    expected = next_query(state, round_index)
    if query != expected or isinstance(query, bool):
        raise UncoveredRelease(f"round {round_index}: answer numbered {query!r}, expected {expected} (answers are "
                               "numbered consecutively from 0)")
    if not isinstance(above, bool):
        raise UncoveredRelease(f"round {round_index}: answer {above!r} is not a boolean")
    rounds = list(state.rounds) + [None] * (round_index + 1 - len(state.rounds))
    rounds[round_index] = RoundState(answers=expected + 1, halted=above)
    return replace(state, rounds=tuple(rounds))


def after_round_start(state: CoverageState) -> tuple[CoverageState, int]:
    """Start the next AboveThreshold round: (the new state, the round's index).

    Raises:
        UncoveredRelease: not an AboveThreshold charge, or every charged round has started.
    """
    if not isinstance(state.coverage.unit, AboveThresholdRound):
        raise UncoveredRelease("not an AboveThreshold charge: it has no rounds")
    index = state.rounds_started
    if index >= state.coverage.count:
        raise UncoveredRelease(f"all {state.coverage.count} charged AboveThreshold rounds are used; the cap is "
                               "fixed up front")
    return replace(state, rounds=(*state.rounds, RoundState())), index


def after_claim(state: CoverageState) -> CoverageState:
    """The state after one more training run starts under the charge.

    Raises:
        UncoveredRelease: not a training charge, or its runs are all claimed.
    """
    if not isinstance(state.coverage.unit, TrainingRun):
        raise UncoveredRelease(f"only a training (DP-SGD) charge covers a run; this one covers "
                               f"{state.coverage.describe()}")
    if state.claims >= state.coverage.count:
        raise UncoveredRelease(f"the charge covers {state.coverage.count} run(s) and {state.claims} already ran "
                               "under it (an envelope covers one run only)")
    return replace(state, claims=state.claims + 1)
