"""Per-release ε statements in ``info`` records, re-derived from the ledger's charges by ``dpaudit verify``.

A plugin that reports an ε for something it released (e.g. each point of a ``dpareto`` privacy-utility front,
docs/plugins/dpareto.md) states what the number is about, so that an auditor need not trust it: an ``info`` body
``{KEY: {"epsilon": ε, "epsilon_claim": {...}, ...}}`` (any top-level key) with

* ``models``: a list of lists of charge sequence numbers, one list per released model;
* ``accountant``, ``version``, ``delta``: the accountant (:mod:`dpaudit.accounting.registry`) and the δ at which ε
  is stated.

:func:`claim_problems` (the ``epsilon-claims`` check of :func:`dpaudit.verify.verify_bundle`) composes each model's
charged events with that accountant at that δ and reports a recorded ε below the largest of them (relative slack
:data:`~dpaudit.tolerance.REL_TOL`), a sequence number that is not a charge of the ledger, and a malformed claim.
What it does not check: that a plugin attached a claim to every number it reported (a value without
``epsilon_claim`` is not an ε statement verify knows of), and the session's overall (ε, δ), which the certificate's
own checks cover.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit.errors import DPAuditError
from dpaudit.events import PrivacyEvent, compose
from dpaudit.ledger import Record
from dpaudit.records import INFO
from dpaudit.tolerance import within

CLAIM_KEY = "epsilon_claim"


def stated_claims(records: Sequence[Record]) -> list[tuple[int, str, Mapping[str, Any]]]:
    """(seq, key, statement) of every ``info`` statement that carries an ``epsilon_claim``."""
    found = []
    for r in records:
        info = r.body.get("info") if r.type == INFO else None
        if isinstance(info, Mapping):
            found += [(r.seq, key, value) for key, value in info.items()
                      if isinstance(value, Mapping) and CLAIM_KEY in value]
    return found


def claim_problems(records: Sequence[Record], charges: Sequence[tuple[int, PrivacyEvent]]) -> tuple[list[str], int]:
    """What is wrong with the ledger's ε statements, and how many were checked (:mod:`dpaudit.epsilon_claims`)."""
    from dpaudit.accounting.registry import get_accountant  # deferred: only ledgers with claims pay for it

    events = dict(charges)
    problems: list[str] = []
    cache: dict[tuple[str, str, float, tuple[int, ...]], float] = {}
    claims = stated_claims(records)
    for seq, key, statement in claims:
        where = f"record {seq} ({key})"
        claim = statement[CLAIM_KEY]
        try:
            recorded = float(statement["epsilon"])
            models = [[int(s) for s in model] for model in claim["models"]]
            accountant, version, delta = str(claim["accountant"]), str(claim["version"]), float(claim["delta"])
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{where}: malformed epsilon claim ({type(exc).__name__}: {exc})")
            continue
        unknown = sorted({s for model in models for s in model} - events.keys())
        if not models or not all(models) or unknown:
            problems.append(f"{where}: the claim names no charges or sequence numbers that are not charges "
                            f"({unknown})")
            continue
        worst = 0.0
        try:
            for model in models:
                # equal charges decode to one event object: equal models are composed once
                ids = (accountant, version, delta, tuple(id(events[s]) for s in model))
                if ids not in cache:
                    cache[ids] = float(get_accountant(accountant, version).epsilon(
                        compose([events[s] for s in model]), delta))
                worst = max(worst, cache[ids])
        except DPAuditError as exc:
            problems.append(f"{where}: epsilon not recomputable: {exc}")
            continue
        if not (math.isfinite(recorded) and within(worst, recorded)):
            problems.append(f"{where}: recorded epsilon {recorded!r} < {worst!r} recomputed from charges "
                            f"{models[0] if len(models) == 1 else models} ({accountant}, delta {delta:g})")
    return problems, len(claims)
