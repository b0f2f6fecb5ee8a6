"""Disjoint partitions of the training set whose assignment depends on each record alone.

Ding et al. 2023, Alg. 1 l. 1 and Lemma 2: the utility averaged over k partition models has sensitivity 1/k
because "each partition will have the same subset of the training data [on neighbouring data sets] with the
exception of only one partition". That holds only if a record's partition is a function of that record: here
``HMAC-SHA256(key, record_id) mod k`` (Bellare, Canetti & Krawczyk 1996), with a key of 32 random bytes drawn from
the session's random source before any data is touched. A positional assignment (position mod k, or chunks of a
shuffled list) moves many records between partitions when one record is added or removed, and the argument fails
(docs/plugins/constant-overhead.md, "Partitioning").

The key need not be secret for the privacy argument (the guarantee holds for every fixed key); it is kept out of
the ledger anyway and only its SHA-256 fingerprint is recorded.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.validation import check_count

KEY_BYTES = 32


def draw_partition_key(rng: RandomSource) -> bytes:
    """32 uniform bytes from ``rng`` (one ``randbelow(256)`` per byte)."""
    return bytes(rng.randbelow(256) for _ in range(KEY_BYTES))


def key_fingerprint(key: bytes) -> str:
    """SHA-256 of the key (hex): recorded instead of the key."""
    return hashlib.sha256(key).hexdigest()


def partition_of(key: bytes, record_id: int, k: int) -> int:
    """The partition (0 ≤ p < k) of the record with id ``record_id``: HMAC-SHA256(key, id) mod k.

    The id is encoded as its decimal ASCII string; the 256-bit digest is read as a big-endian integer (its
    residue mod k is uniform up to k/2²⁵⁶).

    Raises:
        InvalidParameter: a short key, a negative or non-integer id, or k < 1.
    """
    if not isinstance(key, bytes) or len(key) < KEY_BYTES:
        raise InvalidParameter(f"the partition key must be at least {KEY_BYTES} bytes")
    check_count("k", k)
    if isinstance(record_id, bool) or not isinstance(record_id, (int, np.integer)) or record_id < 0:
        raise InvalidParameter(f"record ids must be non-negative integers, got {record_id!r}")
    digest = hmac.new(key, str(int(record_id)).encode("ascii"), hashlib.sha256).digest()
    return int.from_bytes(digest, "big") % k


def assign_partitions(key: bytes, record_ids: np.ndarray, k: int) -> np.ndarray:
    """Partition label of every record (int64 array aligned with ``record_ids``).

    Raises:
        InvalidParameter: the ids are not unique non-negative integers (a duplicated id would tie two records'
            fates together), or see :func:`partition_of`.
    """
    ids = np.asarray(record_ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise InvalidParameter("record_ids must be a one-dimensional integer array")
    if len(np.unique(ids)) != len(ids):
        raise InvalidParameter("record ids must be unique")
    return np.fromiter((partition_of(key, int(r), k) for r in ids), dtype=np.int64, count=len(ids))


def partition_members(labels: np.ndarray, record_ids: np.ndarray, k: int) -> list[np.ndarray]:
    """For each partition, the row indices of its records ordered by record id.

    Ordering by id (not by position) makes a partition's training data a function of its set of records, so the
    unchanged partitions of a neighbouring data set train identical models.
    """
    check_count("k", k)
    labels = np.asarray(labels)
    ids = np.asarray(record_ids)
    if labels.shape != ids.shape:
        raise InvalidParameter("labels and record_ids must have the same shape")
    order = np.argsort(ids, kind="stable")
    return [order[labels[order] == p] for p in range(k)]
