"""The spend requests of the budget authority's load tests, in-process (test_authority.py) and on Ray
(test_authority_ray.py)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence


def spend_requests(rng: random.Random, worker: int, requests: int, events: Sequence) -> Iterator[tuple[str, object]]:
    """(key, event) of ``worker``'s ``requests`` requests, events drawn from ``events``: 30% of them retry an earlier
    key (a lost reply) with the same event. Lazy, so the caller may draw from ``rng`` between two requests."""
    mine: list[tuple[str, object]] = []
    for i in range(requests):
        if mine and rng.random() < 0.3:
            yield rng.choice(mine)
        else:
            mine.append((f"w{worker}/r{i}", rng.choice(events)))
            yield mine[-1]
