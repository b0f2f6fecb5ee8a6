"""The aggregated utility u_s = (1/k) Σ_i clip(Acc(V, θ_i), 0, 1) and its sensitivity (Ding et al. 2023, Alg. 1
l. 2-11 and Lemma 2; subsample-and-aggregate, Nissim, Raskhodnikova & Smith 2007).

Sensitivity (formula ``partition_average_utility``, registered by
:mod:`dpaudit_plugins.constant_overhead.formulas`, which ``dpaudit verify`` loads without the rest of the plugin).
Each term lies in [0, 1] and depends only on the records of its partition (and on public data: the validation set V,
the candidate, a data-independent seed). A record's partition depends only on that
record (:mod:`dpaudit_plugins.constant_overhead.partition`), so

* add/remove one record: one partition changes, |Δu_s| ≤ 1/k (Lemma 2);
* replace one record by another: the new record may hash to another partition, so two partitions change,
  |Δu_s| ≤ 2/k.

The utilities themselves are CONFIDENTIAL (unnoised functions of the private data): they are only ever passed to
AboveThreshold queries and are never logged, returned or mirrored.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from dpaudit import canonical
from dpaudit.errors import InvalidParameter
from dpaudit.parallel import Executor, TrialFailure, TrialsFailed
from dpaudit.tuning import SEED_RANGE, Candidate


def aggregate_utility(accuracies: Iterable[float]) -> float:
    """(1/k) Σ_i clip(a_i, 0, 1) over the k partition accuracies (Alg. 1 l. 9, with the clip Lemma 2 needs).

    A NaN term (a user's objective on a diverged partition model) counts as 0, the worst value: a fixed rule decided
    before any data is seen, which keeps every term in [0, 1] (so Δ = 1/k holds) and, unlike a refusal, does not
    publish whether some partition's model diverged (the same reasoning as
    :mod:`dpaudit.mechanisms.private_inputs`).

    Raises:
        InvalidParameter: no accuracies.
    """
    values = [float(a) for a in accuracies]
    if not values:
        raise InvalidParameter("aggregate_utility needs at least one partition accuracy")
    return sum(0.0 if math.isnan(a) else min(1.0, max(0.0, a)) for a in values) / len(values)


def derive_seed(base_seed: int, candidate: Candidate, partition: int) -> int:
    """The seed of one partition model: SHA-256 of (base seed, candidate, partition index), public inputs only."""
    blob = canonical.encode({"base": base_seed, "candidate": candidate.to_dict(), "partition": partition})
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") % SEED_RANGE


#: (partition X, partition y, candidate, seed) -> accuracy on the validation set
PartitionScorer = Callable[[np.ndarray, np.ndarray, Candidate, int], float]


class PartitionUtilities:
    """u_s of candidates on fixed partitions, computed on first use and cached (CONFIDENTIAL values).

    Args:
        X, y: the private training features and labels.
        members: for each of the k partitions, its row indices ordered by record id
            (:func:`dpaudit_plugins.constant_overhead.partition.partition_members`).
        score: trains a model on one partition and returns its accuracy on the public validation set.
        base_seed: data-independent seed from which each partition model's seed is derived.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, members: Sequence[np.ndarray], score: PartitionScorer,
                 base_seed: int) -> None:
        if len(X) != len(y):
            raise InvalidParameter("X and y must have the same number of rows")
        if not members:
            raise InvalidParameter("need at least one partition")
        self._X, self._y = X, y
        self._members = [np.asarray(m, dtype=np.int64) for m in members]
        self._score = score
        self._base_seed = base_seed
        self._cache: dict[Candidate, float] = {}

    def __call__(self, candidate: Candidate) -> float:
        """u_s of ``candidate`` (trains its k partition models the first time)."""
        if candidate not in self._cache:
            self._cache[candidate] = aggregate_utility(
                self._score(self._X[m], self._y[m], candidate, derive_seed(self._base_seed, candidate, i))
                for i, m in enumerate(self._members))
        return self._cache[candidate]

    def precompute(self, candidates: Sequence[Candidate], executor: Executor) -> None:
        """Compute the utilities of ``candidates`` not cached yet, their k partition models each as independent jobs
        on ``executor`` (:mod:`dpaudit.parallel`); the same values as calling the instance on each in turn, since a
        partition model is a pure function of its records, the candidate and a seed derived from public inputs.
        ``score`` must be importable by the workers of a parallel executor (a module-level function or a
        dataclass instance, not a closure).

        Raises:
            TrialsFailed: a partition model's training raised or its worker died (no utility is cached).
        """
        todo = [c for c in dict.fromkeys(candidates) if c not in self._cache]
        k = len(self._members)
        jobs = [(c, i, derive_seed(self._base_seed, c, i)) for c in todo for i in range(k)]
        outcomes = executor.map(_score_partition, (self._X, self._y, self._members, self._score), jobs)
        failed = [o for o in outcomes if isinstance(o, TrialFailure)]
        if failed:
            raise TrialsFailed(f"{len(failed)} partition model(s) failed, first: {failed[0].reason}")
        for j, candidate in enumerate(todo):
            self._cache[candidate] = aggregate_utility(outcomes[j * k:(j + 1) * k])

    def computed(self) -> int:
        """How many candidates' utilities have been computed (public: it depends on the candidates only)."""
        return len(self._cache)


def _score_partition(shared: tuple[np.ndarray, np.ndarray, Sequence[np.ndarray], PartitionScorer],
                     job: tuple[Candidate, int, int]) -> float:
    """One partition model's accuracy: the job (candidate, partition index, seed) on the shared (X, y, members,
    score) of :meth:`PartitionUtilities.precompute`."""
    X, y, members, score = shared
    candidate, partition, seed = job
    return score(X[members[partition]], y[members[partition]], candidate, seed)
