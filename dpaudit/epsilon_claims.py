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

A statement may also say that one of its values *is* a noisy release of the ledger (e.g. a private ``dpareto``
front's error): ``{KEY: {VALUE: v, "release_claim": {"label": L, "value": VALUE, "clip": [lo, hi], "mechanism": M,
"epsilon": ε, "sensitivity": Δ}, ...}}``. :func:`release_claim_problems` (the ``released-values`` check) finds the
latest ``release`` record labelled ``L`` before the statement and reports a value that is not that release's number
clipped to [lo, hi] (a forged or un-noised value), a claimed mechanism, ε or sensitivity that is not that of the
charge the release was made under (a claim understating the noise), a missing release and a malformed claim.

A claim can only be checked where it is made, so a plugin that must noise every value of some kind (a private
``dpareto`` front: every trial's error) states that **before** the values, in a plan record:
``{PLAN_KEY: {"release_claims_required": {"statements": KEY, "index": I, "label": T, "value": VALUE,
"mechanism": M, "epsilon": ε, "sensitivity": Δ}, ...}}``. Every later statement under ``KEY`` whose ``VALUE`` is not
None (a failed trial states none) must then carry a release claim labelled ``T`` with ``{index}`` replaced by the
statement's whole number ``I`` (each label claimed once), for ``VALUE``, with the plan's mechanism, ε and
sensitivity; the plan holds until the next statement under ``PLAN_KEY`` (``"release_claims_required": None``: no
plan). A missing claim, a claim naming another trial's release, and a tiny stated ε or sensitivity fail the check.
What a plan cannot give: a plugin that never records the plan is checked only claim by claim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit.errors import DPAuditError
from dpaudit.events import PrivacyEvent, compose
from dpaudit.ledger import Record
from dpaudit.record_index import of_type
from dpaudit.records import INFO, RELEASE
from dpaudit.tolerance import within

CLAIM_KEY = "epsilon_claim"
RELEASE_CLAIM_KEY = "release_claim"
REQUIRED_KEY = "release_claims_required"


def stated_claims(records: Sequence[Record], claim_key: str = CLAIM_KEY) -> list[tuple[int, str, Mapping[str, Any]]]:
    """(seq, key, statement) of every ``info`` statement that carries ``claim_key`` (default an ``epsilon_claim``)."""
    found = []
    for r in of_type(records, INFO):
        info = r.body.get("info")
        if isinstance(info, Mapping):
            found += [(r.seq, key, value) for key, value in info.items()
                      if isinstance(value, Mapping) and claim_key in value]
    return found


def release_claim_problems(records: Sequence[Record],
                           charges: Sequence[tuple[int, PrivacyEvent]]) -> tuple[list[str], int]:
    """What is wrong with the ledger's ``release_claim`` statements and ``release_claims_required`` plans, and how
    many claims were checked (module docstring)."""
    problems = _requirement_problems(records)
    claims = stated_claims(records, RELEASE_CLAIM_KEY)
    if not claims:  # (the index below reads every release: only for a ledger that states claims about them)
        return problems, 0
    events = dict(charges)
    latest: dict[str, list[tuple[int, Any, Any]]] = {}
    for r in of_type(records, RELEASE):
        if isinstance(r.body, Mapping) and isinstance(r.body.get("label"), str):
            latest.setdefault(r.body["label"], []).append((r.seq, r.body.get("output"), r.body.get("charge_seq")))
    for seq, key, statement in claims:
        where = f"record {seq} ({key})"
        claim = statement[RELEASE_CLAIM_KEY]
        try:
            label, value_key = str(claim["label"]), str(claim["value"])
            lower, upper = (float(b) for b in claim["clip"])
            stated = float(statement[value_key])
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{where}: malformed release claim ({type(exc).__name__}: {exc})")
            continue
        before = [found for found in latest.get(label, []) if found[0] < seq]
        if not before:
            problems.append(f"{where}: no release labelled {label!r} before it")
            continue
        release_seq, output, charge_seq = before[-1]
        try:
            expected = min(max(float(output), lower), upper)
        except (TypeError, ValueError):
            problems.append(f"{where}: release {release_seq} is not one number")
            continue
        if not (math.isfinite(stated) and math.isclose(stated, expected, rel_tol=1e-12, abs_tol=1e-15)):
            problems.append(f"{where}: stated {value_key} {stated!r} is not release {release_seq}'s output clipped to "
                            f"[{lower:g}, {upper:g}] ({expected!r})")
        wrong = _charge_problem(claim, events.get(charge_seq) if isinstance(charge_seq, int) else None, release_seq)
        if wrong is not None:
            problems.append(f"{where}: {wrong}")
    return problems, len(claims)


def _charge_problem(claim: Mapping[str, Any], event: PrivacyEvent | None, release_seq: int) -> str | None:
    """How a claim's mechanism, ε and sensitivity differ from the charge its release was made under (None: equal)."""
    if event is None:
        return f"release {release_seq} names no charge of the ledger"
    sensitivity = getattr(event, "sensitivity", None)
    charged = {"mechanism": event.kind, "epsilon": getattr(event, "epsilon", None),
               "sensitivity": getattr(sensitivity, "value", None)}
    for key, actual in charged.items():
        stated = claim.get(key)
        if key == "mechanism":
            same = stated == actual
        else:
            same = (actual is not None and isinstance(stated, (int, float)) and not isinstance(stated, bool)
                    and math.isclose(float(stated), float(actual), rel_tol=1e-12, abs_tol=0.0))
        if not same:
            return f"its {key} {stated!r} is not that of release {release_seq}'s charge ({actual!r})"
    return None


def _requirement_problems(records: Sequence[Record]) -> list[str]:
    """The statements a ``release_claims_required`` plan demands a release claim of that lack it, name another
    label than the plan's, share a label, or state another mechanism, ε or sensitivity than the plan (module
    docstring). A plan applies from its record until the next statement under the same key (None: no plan)."""
    problems: list[str] = []
    plans: dict[str, tuple[int, Mapping[str, Any], set[str]]] = {}
    for r in of_type(records, INFO):
        info = r.body.get("info")
        if not isinstance(info, Mapping):
            continue
        for key, value in info.items():
            if not (isinstance(value, Mapping) and REQUIRED_KEY in value):
                continue
            plans.pop(key, None)
            required = value[REQUIRED_KEY]
            if required is None:
                continue
            if isinstance(required, Mapping) and all(isinstance(required.get(k), str)
                                                     for k in ("statements", "index", "label", "value")):
                plans[key] = (r.seq, required, set())
            else:
                problems.append(f"record {r.seq} ({key}): malformed {REQUIRED_KEY} {required!r}")
        for key, value in info.items():
            if isinstance(value, Mapping):
                problems += [problem for plan in plans.values() if plan[1]["statements"] == key
                             for problem in _required_claim_problems(r.seq, key, value, *plan)]
    return problems


def _required_claim_problems(seq: int, key: str, statement: Mapping[str, Any], plan_seq: int,
                             required: Mapping[str, Any], used: set[str]) -> list[str]:
    """What is wrong with one statement under a ``release_claims_required`` plan (:func:`_requirement_problems`)."""
    where = f"record {seq} ({key})"
    value_key = required["value"]
    if statement.get(value_key) is None:
        return []  # nothing stated (e.g. a failed trial's error)
    index = statement.get(required["index"])
    if isinstance(index, bool) or not isinstance(index, int):
        return [f"{where}: no whole-number {required['index']!r} to name its release by"]
    label = required["label"].replace("{index}", str(index))
    claim = statement.get(RELEASE_CLAIM_KEY)
    if not isinstance(claim, Mapping):
        return [f"{where}: states {value_key} without the release claim record {plan_seq} requires"]
    if claim.get("label") != label or claim.get("value") != value_key:
        return [f"{where}: its release claim names {claim.get('label')!r} ({claim.get('value')!r}); record "
                f"{plan_seq} requires {label!r} ({value_key!r})"]
    if label in used:
        return [f"{where}: the release {label!r} is claimed by more than one statement"]
    used.add(label)
    wrong = [k for k in ("mechanism", "epsilon", "sensitivity") if k in required and claim.get(k) != required[k]]
    if wrong:
        return [f"{where}: its release claim's {', '.join(wrong)} differ from record {plan_seq}'s plan "
                f"({', '.join(f'{k} {required[k]!r}' for k in wrong)})"]
    return []


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
