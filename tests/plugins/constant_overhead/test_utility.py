"""The aggregated utility: its sensitivity formula, and a brute-force check of the bound over neighbouring data sets.

The brute force retrains every partition model deterministically (seeds derived from public inputs only) on each
neighbour of a small synthetic data set with record ids and takes max |u_s(D) − u_s(D')| over neighbours and
candidates. With record-keyed partitions it must be ≤ 1/k (add/remove) and ≤ 2/k (replace-one); with positional
partitions (a deliberately broken variant) the same brute force must find a neighbour that exceeds 1/k.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import FORMULAS, Neighbouring, from_formula
from dpaudit.tuning import Candidate
from dpaudit_plugins.constant_overhead.formulas import FORMULA_ID
from dpaudit_plugins.constant_overhead.partition import assign_partitions, partition_members
from dpaudit_plugins.constant_overhead.partition_training import accuracy, train_partition_model
from dpaudit_plugins.constant_overhead.utility import PartitionUtilities, aggregate_utility, derive_seed

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

K = 4
KEY = bytes(range(32))
CANDIDATES = (Candidate(lr=0.5, max_grad_norm=1.0, noise_multiplier=1.0, epochs=2, batch_size=4),
              Candidate(lr=4.0, max_grad_norm=0.5, noise_multiplier=1.0, epochs=2, batch_size=4),
              Candidate(lr=20.0, max_grad_norm=5.0, noise_multiplier=1.0, epochs=1, batch_size=2))


def _synthetic(n: int, seed: int, p_one: float) -> tuple[np.ndarray, np.ndarray]:
    """Records clustered around one point with Bernoulli(p_one) labels: a partition model learns roughly its
    partition's majority label, so a partition's validation accuracy swings between ~p_one and ~1 − p_one."""
    rng = np.random.default_rng(seed)
    X = (np.array([1.0, 0.0, 0.0]) + rng.normal(scale=0.05, size=(n, 3))).astype(np.float32)
    return X, (rng.uniform(size=n) < p_one).astype(np.float32)


X_ALL, Y_ALL = _synthetic(40, 0, 0.5)
IDS_ALL = np.random.default_rng(1).permutation(1000)[:40].astype(np.int64)
X_VAL, Y_VAL = _synthetic(50, 2, 0.85)
BASE = len(X_ALL) - 4  # the base data set: the first 36 records; the last 4 are candidates for addition


def _score(X: np.ndarray, y: np.ndarray, candidate: Candidate, seed: int) -> float:
    model = train_partition_model(X, y, candidate, mode="train", model_kind="logreg", hidden=1, n_features=3,
                                  seed=seed)
    return accuracy(model, X_VAL, Y_VAL)


def keyed(ids: np.ndarray) -> list[np.ndarray]:
    return partition_members(assign_partitions(KEY, ids, K), ids, K)


def positional(ids: np.ndarray) -> list[np.ndarray]:
    """BROKEN: the partition of a row is its position mod k, so removing one record shifts all later ones."""
    return [np.arange(p, len(ids), K) for p in range(K)]


def _utilities(rows: np.ndarray, partitioner: Callable[[np.ndarray], list[np.ndarray]]) -> np.ndarray:
    X, y, ids = X_ALL[rows], Y_ALL[rows], IDS_ALL[rows]
    u = PartitionUtilities(X, y, partitioner(ids), _score, base_seed=7)
    return np.array([u(c) for c in CANDIDATES])


def _neighbours(kind: str) -> list[np.ndarray]:
    base = np.arange(BASE)
    if kind == "remove":
        return [np.delete(base, i) for i in range(BASE)]
    if kind == "add":
        return [np.append(base, j) for j in range(BASE, len(X_ALL))]
    return [np.append(np.delete(base, i), j) for i in range(0, BASE, 3) for j in range(BASE, len(X_ALL))]


def _max_change(kind: str, partitioner: Callable[[np.ndarray], list[np.ndarray]]) -> float:
    u = _utilities(np.arange(BASE), partitioner)
    return max(float(np.max(np.abs(_utilities(rows, partitioner) - u))) for rows in _neighbours(kind))


@pytest.mark.parametrize("kind", ["remove", "add"])
def test_brute_force_add_remove_sensitivity_is_at_most_one_over_k(kind):
    change = _max_change(kind, keyed)
    assert 0 < change <= 1.0 / K
    assert change <= from_formula(FORMULA_ID, "add_remove", k=K).value


def test_brute_force_replace_one_sensitivity_is_at_most_two_over_k():
    assert _max_change("replace", keyed) <= from_formula(FORMULA_ID, "replace_one", k=K).value == 2.0 / K


def test_brute_force_catches_positional_partitions():
    """The broken variant: removing one record reshuffles the later records across partitions."""
    assert _max_change("remove", positional) > 1.0 / K


def test_formula_values_and_registration():
    assert FORMULAS[FORMULA_ID].norm.value == "l1"
    s = from_formula(FORMULA_ID, "add_remove", k=10)
    assert s.value == pytest.approx(0.1) and "Ding" in s.source
    assert s.recompute(Neighbouring.ADD_REMOVE) == s.value
    assert from_formula(FORMULA_ID, "replace_one", k=10).value == pytest.approx(0.2)
    with pytest.raises(InvalidParameter):
        from_formula(FORMULA_ID, "add_remove", k=0)


def test_aggregate_clips_counts_nan_as_worst_and_refuses_empty():
    """A NaN term is the worst value, never a refusal: an exception here would publish that a partition's model
    diverged, after the rounds were charged."""
    assert aggregate_utility([1.5, -0.5, 0.5, 0.25]) == pytest.approx((1 + 0 + 0.5 + 0.25) / 4)
    assert aggregate_utility([0.5, float("nan")]) == pytest.approx(0.25)
    assert aggregate_utility([float("nan")] * 3) == 0.0
    with pytest.raises(InvalidParameter):
        aggregate_utility([])


def test_partition_models_are_deterministic_and_seeds_depend_on_public_inputs_only():
    rows = np.arange(BASE)
    assert np.array_equal(_utilities(rows, keyed), _utilities(rows, keyed))
    assert derive_seed(1, CANDIDATES[0], 0) != derive_seed(1, CANDIDATES[0], 1) != derive_seed(2, CANDIDATES[0], 1)


def test_utilities_are_cached_and_an_empty_partition_scores_the_initial_model():
    calls = []

    def score(X, y, c, seed):
        calls.append(len(y))
        return _score(X, y, c, seed)

    u = PartitionUtilities(X_ALL, Y_ALL, [np.arange(10), np.array([], dtype=np.int64)], score, base_seed=0)
    first = u(CANDIDATES[0])
    assert u(CANDIDATES[0]) == first and calls == [10, 0] and u.computed() == 1
    assert 0.0 <= first <= 1.0


def test_privtrain_partition_models_are_deterministic_too():
    def train(seed):
        m = train_partition_model(X_ALL, Y_ALL, CANDIDATES[0], mode="privtrain", model_kind="logreg", hidden=1,
                                  n_features=3, seed=seed)
        return [p.detach().clone() for p in m.parameters()]

    a, b, c = train(5), train(5), train(6)
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    assert not all((x == y).all() for x, y in zip(a, c, strict=True))
    with pytest.raises(InvalidParameter):
        train_partition_model(X_ALL, Y_ALL, CANDIDATES[0], mode="other", model_kind="logreg", hidden=1,
                              n_features=3, seed=0)
