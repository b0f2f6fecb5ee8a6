"""Proposers (Ding et al. 2023, Sec. 4.1): batches from public information only; the local proposer, fed back the
loop's outcomes, finds a candidate better than the whole initial grid."""

from __future__ import annotations

import math

import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.tuning import Candidate
from dpaudit_plugins.constant_overhead.candidates import default_grid
from dpaudit_plugins.constant_overhead.loop import run_elastic_loop
from dpaudit_plugins.constant_overhead.proposers import GridProposer, LocalPerturbationProposer


def synthetic_utility(c: Candidate) -> float:
    """SYNTHETIC smooth utility, best at lr = 3, C = 1.5 (between grid points)."""
    return 0.9 - 0.1 * math.log(c.lr / 3.0) ** 2 - 0.1 * math.log(c.max_grad_norm / 1.5) ** 2


def _privacy_fields(c: Candidate) -> tuple[float, int, int]:
    return c.noise_multiplier, c.epochs, c.batch_size


class ExactRound:
    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def test(self, value: float) -> bool:
        return value >= self.threshold


def test_grid_proposer_always_proposes_the_grid():
    p = GridProposer([1, 2, 3])
    assert p.propose((), None) == p.propose((), 2) == (1, 2, 3)
    with pytest.raises(InvalidParameter):
        GridProposer([])


def test_local_proposer_is_seeded_and_keeps_s_star_first():
    grid = default_grid()
    a = LocalPerturbationProposer(grid, seed=5, batch_size=4)
    b = LocalPerturbationProposer(grid, seed=5, batch_size=4)
    assert a.propose((), None) == grid
    batch = a.propose((), grid[3])
    assert batch == b.propose((), grid[3]) and batch[0] == grid[3] and len(batch) == 4 == len(set(batch))
    assert all(_privacy_fields(c) == _privacy_fields(grid[3]) for c in batch)
    with pytest.raises(InvalidParameter):
        LocalPerturbationProposer(grid, seed=0, batch_size=1)
    with pytest.raises(InvalidParameter):
        LocalPerturbationProposer([], seed=0, batch_size=4)


def test_adaptive_search_beats_the_best_grid_candidate():
    """Noiseless rounds isolate the proposer's behaviour: the grid alone cannot exceed its best utility, while
    local perturbations around each new s* climb past it."""
    grid = default_grid()
    best_grid = max(synthetic_utility(c) for c in grid)
    kwargs = {"u0": 0.5, "g": 0.002, "t_max": 200, "max_batch": len(grid)}
    fixed = run_elastic_loop(GridProposer(grid), synthetic_utility, ExactRound, **kwargs)
    adaptive = run_elastic_loop(LocalPerturbationProposer(grid, seed=1, batch_size=8), synthetic_utility,
                                ExactRound, **kwargs)
    assert synthetic_utility(fixed.selected) <= best_grid
    assert adaptive.selected not in grid
    assert synthetic_utility(adaptive.selected) > best_grid
