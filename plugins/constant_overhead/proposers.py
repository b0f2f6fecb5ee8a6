"""Proposers: who decides which candidates each iteration of the elastic loop queries (Ding et al. 2023, Sec. 4.1).

A proposer sees only PUBLIC information: the earlier iterations' thresholds, batches and ⊤ answers (post-processing
of the AboveThreshold releases) and its own data-independent random generator. AboveThreshold answers adaptively
chosen queries of sensitivity Δ at the same ε (Dwork & Roth 2014, Thm. 3.24), so the per-round charge is the same
whatever the proposer; new candidates only need their utilities computed on the partitions before they are queried.

* :class:`GridProposer`: the whole set S every iteration (Alg. 1 as written).
* :class:`LocalPerturbationProposer`: while nothing has passed, the initial grid; afterwards s* followed by
  random perturbations of s* (lr and C moved log-normally by a seeded public generator), a simple local search
  in the spirit of the adaptive optimiser of Sec. 4.1 / Fig. 2.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.tuning import Candidate
from dpaudit.validation import check_count, check_positive
from dpaudit_plugins.constant_overhead.candidates import perturb
from dpaudit_plugins.constant_overhead.loop import Iteration

#: draws per requested perturbation before giving up on finding new distinct candidates
_MAX_DRAWS = 20


class GridProposer:
    """Proposes the same fixed candidate set at every iteration (Alg. 1)."""

    def __init__(self, candidates: Sequence[Hashable]) -> None:
        self.candidates = tuple(candidates)
        if not self.candidates:
            raise InvalidParameter("GridProposer needs at least one candidate")

    def propose(self, history: Sequence[Iteration], selected: Hashable | None) -> tuple[Hashable, ...]:
        return self.candidates


class LocalPerturbationProposer:
    """The grid until something passes, then s* and ``batch_size − 1`` random perturbations of it.

    Args:
        grid: the initial candidates.
        seed: seed of the PUBLIC generator (draw it from the session's random source, independently of the data).
        batch_size: candidates per batch after the first selection (s* included), at least 2.
        scale: log-normal perturbation scale of lr and C.
    """

    def __init__(self, grid: Sequence[Candidate], *, seed: int, batch_size: int, scale: float = 0.5) -> None:
        self.grid = tuple(grid)
        if not self.grid:
            raise InvalidParameter("LocalPerturbationProposer needs an initial grid")
        self.batch_size = check_count("batch_size", batch_size, minimum=2)
        self.scale = check_positive("scale", scale)
        self._generator = np.random.default_rng(check_count("seed", seed, minimum=0))

    def propose(self, history: Sequence[Iteration], selected: Candidate | None) -> tuple[Candidate, ...]:
        if selected is None:
            return self.grid
        batch = [selected]
        for _ in range(_MAX_DRAWS * self.batch_size):
            if len(batch) == self.batch_size:
                break
            neighbour = perturb(selected, self._generator, self.scale)
            if neighbour not in batch:
                batch.append(neighbour)
        return tuple(batch)
