"""Record-keyed partitions: a record's partition depends on that record alone, so adding or removing one record
moves no other record (Ding et al. 2023, Lemma 2 needs it)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit_plugins.constant_overhead.partition import (
    KEY_BYTES,
    assign_partitions,
    draw_partition_key,
    key_fingerprint,
    partition_members,
    partition_of,
)

KEY = bytes(range(KEY_BYTES))
IDS = np.arange(500, dtype=np.int64)


def test_key_is_32_bytes_from_the_random_source():
    key = draw_partition_key(SeededRandom(3))
    assert isinstance(key, bytes) and len(key) == KEY_BYTES
    assert key == draw_partition_key(SeededRandom(3)) != draw_partition_key(SeededRandom(4))
    assert len(key_fingerprint(key)) == 64


def test_labels_are_in_range_and_roughly_balanced():
    labels = assign_partitions(KEY, IDS, 5)
    assert labels.min() >= 0 and labels.max() < 5
    counts = np.bincount(labels, minlength=5)
    assert counts.min() > 60  # 100 expected per partition; P(< 61) < 1e-4 per partition (binomial)


@pytest.mark.parametrize("removed", [0, 137, 499])
def test_removing_a_record_moves_no_other_record(removed):
    full = assign_partitions(KEY, IDS, 7)
    keep = np.not_equal(IDS, removed)
    assert np.array_equal(assign_partitions(KEY, IDS[keep], 7), full[keep])


def test_adding_a_record_moves_no_other_record_and_order_does_not_matter():
    full = assign_partitions(KEY, IDS, 7)
    added = np.append(IDS, 10_000)
    assert np.array_equal(assign_partitions(KEY, added, 7)[:-1], full)
    perm = np.random.default_rng(0).permutation(len(IDS))
    assert np.array_equal(assign_partitions(KEY, IDS[perm], 7), full[perm])


def test_members_are_ordered_by_record_id_whatever_the_row_order():
    perm = np.random.default_rng(1).permutation(len(IDS))
    ids = IDS[perm]
    members = partition_members(assign_partitions(KEY, ids, 4), ids, 4)
    assert sum(len(m) for m in members) == len(ids)
    for p, m in enumerate(members):
        assert np.all(np.diff(ids[m]) > 0)
        assert all(partition_of(KEY, int(r), 4) == p for r in ids[m])


def test_another_key_gives_another_assignment():
    assert not np.array_equal(assign_partitions(KEY, IDS, 4), assign_partitions(bytes(KEY_BYTES), IDS, 4))


@pytest.mark.parametrize("key, record_id, k", [(b"short", 1, 3), (KEY, -1, 3), (KEY, 1.5, 3), (KEY, True, 3),
                                               (KEY, 1, 0)])
def test_bad_input_is_refused(key, record_id, k):
    with pytest.raises(InvalidParameter):
        partition_of(key, record_id, k)


def test_duplicate_or_non_integer_ids_are_refused():
    with pytest.raises(InvalidParameter, match="unique"):
        assign_partitions(KEY, np.array([1, 2, 2]), 3)
    with pytest.raises(InvalidParameter):
        assign_partitions(KEY, np.array([1.0, 2.0]), 3)
    with pytest.raises(InvalidParameter):
        partition_members(np.array([0, 1]), np.array([1, 2, 3]), 2)
