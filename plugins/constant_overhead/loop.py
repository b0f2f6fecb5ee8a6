"""The elastic AboveThreshold loop of Ding et al. 2023, Alg. 1 l. 12-34, capped at T_max iterations.

State (all public): the accumulated utility u = u₀ + g·units, the step size ``step`` (a whole number) and the
current selection s*. Iteration t:

1. the proposer supplies the batch of candidates to query (Alg. 1 queries the whole set S every time; Sec. 4.1
   lets an adaptive optimiser supply batches from earlier noisy outcomes);
2. one AboveThreshold round with the public threshold u + step·g (Alg. 1 l. 16: the threshold noise is drawn
   by the round, Lap(2Δ/ϵ), Δ = 1/k) queries u_s over the batch in order, each with fresh Lap(4Δ/ϵ) noise
   (l. 19-21), and halts at the first ⊤;
3. :func:`advance`: on ⊤ for s, s* ← s, u ← u + g·step, step ← 2·step (l. 22-25); otherwise
   step ← ⌊step/2⌋ (l. 31).

The loop ends when step = 0 (l. 14) or after ``t_max`` iterations, whichever comes first. ``t_max`` is fixed
before any data is seen and is what the privacy charge covers; the realised T is information only.

The loop itself draws no noise: ``start_round(threshold)`` starts a round (in the plugin,
``Session.above_threshold_rounds(...).next_round``; in the synthetic experiments, a seeded
:class:`~dpaudit.mechanisms.above_threshold.AboveThreshold`). The same function serves both.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Protocol, TypeVar

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_positive

C = TypeVar("C", bound=Hashable)


class Round(Protocol):
    """One started AboveThreshold round."""

    def test(self, value: float) -> bool:
        """Is the noisy ``value`` above the round's noisy threshold?"""


class Proposer(Protocol[C]):
    """Supplies the batch of candidates of the next iteration from PUBLIC information only."""

    def propose(self, history: Sequence[Iteration[C]], selected: C | None) -> Sequence[C]:
        """The candidates to query next, in order, given the earlier iterations and the current s*."""


@dataclass(frozen=True)
class LoopState(Generic[C]):
    """Public state of the loop.

    Attributes:
        units: accumulated utility in units of g (u = u₀ + g·units).
        step: current step size (0 ends the loop).
        selected: s*, or None while no candidate has passed.
        iterations: T so far.
    """

    units: int = 0
    step: int = 1
    selected: C | None = None
    iterations: int = 0


@dataclass(frozen=True)
class Iteration(Generic[C]):
    """Public record of one iteration.

    Attributes:
        t: the iteration number (1-based).
        threshold: the public threshold u + step·g of the round (before its noise).
        batch: the candidates queried, in order.
        passed: the candidate answered ⊤, or None.
        state: the state after the iteration.
    """

    t: int
    threshold: float
    batch: tuple[C, ...]
    passed: C | None
    state: LoopState[C]


@dataclass(frozen=True)
class LoopResult(Generic[C]):
    """Outcome of :func:`run_elastic_loop`.

    Attributes:
        selected: s* at the end (None: no candidate ever passed).
        iterations: the public record of each iteration.
        stopped_by: ``"step_zero"`` (Alg. 1's own termination) or ``"t_max"`` (the cap).
    """

    selected: C | None
    iterations: tuple[Iteration[C], ...]
    stopped_by: str

    @property
    def realised_iterations(self) -> int:
        """The realised T (information only; the charge covers ``t_max``)."""
        return len(self.iterations)


def threshold_of(state: LoopState, u0: float, g: float) -> float:
    """The public threshold u + step·g of the next round (Alg. 1 l. 16, before the noise)."""
    return u0 + g * (state.units + state.step)


def advance(state: LoopState[C], passed: C | None) -> LoopState[C]:
    """The state after one iteration: Alg. 1 l. 21-33."""
    if passed is not None:
        return LoopState(units=state.units + state.step, step=2 * state.step, selected=passed,
                         iterations=state.iterations + 1)
    return replace(state, step=state.step // 2, iterations=state.iterations + 1)


def run_elastic_loop(proposer: Proposer[C], utility: Callable[[C], float], start_round: Callable[[float], Round],
                     *, u0: float, g: float, t_max: int, max_batch: int) -> LoopResult[C]:
    """Run Alg. 1 l. 12-34 with at most ``t_max`` rounds.

    Args:
        proposer: supplies each iteration's batch (public information only).
        utility: u_s of a candidate (CONFIDENTIAL values; only ever passed to a round's ``test``).
        start_round: starts one AboveThreshold round at a public threshold.
        u0: utility lower bound u₀ ∈ [0, 1).
        g: utility granularity g ∈ (0, 1).
        t_max: iteration cap, fixed before any data is seen.
        max_batch: the most queries per round (the rounds' ``max_queries``); a larger batch is refused.

    Raises:
        InvalidParameter: bad parameters, or a proposer batch that is empty, has duplicates or exceeds max_batch.
    """
    if not 0.0 <= u0 < 1.0:
        raise InvalidParameter(f"u0 must lie in [0, 1), got {u0!r}")
    if not 0.0 < check_positive("g", g) < 1.0:
        raise InvalidParameter(f"g must lie in (0, 1), got {g!r}")
    check_count("t_max", t_max)
    check_count("max_batch", max_batch)
    state: LoopState[C] = LoopState()
    history: list[Iteration[C]] = []
    while state.step != 0 and state.iterations < t_max:
        batch = tuple(proposer.propose(tuple(history), state.selected))
        if not batch or len(set(batch)) != len(batch) or len(batch) > max_batch:
            raise InvalidParameter(f"a proposer batch must hold 1 to {max_batch} distinct candidates, "
                                   f"got {len(batch)}")
        threshold = threshold_of(state, u0, g)
        current = start_round(threshold)
        passed = next((c for c in batch if current.test(utility(c))), None)
        state = advance(state, passed)
        history.append(Iteration(t=state.iterations, threshold=threshold, batch=batch, passed=passed, state=state))
    return LoopResult(selected=state.selected, iterations=tuple(history),
                      stopped_by="step_zero" if state.step == 0 else "t_max")
