"""The run certificate: the (ε, δ) claim of a session and everything it rests on, signed.

``build_certificate`` reads only the ledger, so ``dpaudit verify`` can rebuild every field from the same
records. The claim is the composition of every ``charge`` record (charges whose release never happened are
still counted: conservative), evaluated at the session's δ by the session's accountant; an adaptive session's claim
is the budget its Rényi filter admitted every charge under (:func:`filter_claim`).

Fields: format, run (name, id, store id, open and close times), claim (ε, δ, accountant, the accountant that
attained the bound, versions), components (each (plugin, mechanism)'s own ε at the run's δ, an upper bound
rounded up: :mod:`dpaudit.components`), budget, neighbouring relation, protected and public data sets, randomness and
``for_release`` (secure randomness and a run that closed FINISHED; :func:`release_problems`), assumptions (each
with ``conditional`` and the charges that rely on it), plugins with versions,
dpaudit and code versions, ledger head hash and record count, confidential log (named as outside the release), the
answers to NIST SP 800-226's checklist (:mod:`dpaudit.nist_fields`), and an Ed25519 signature over the canonical
JSON of all the other fields.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.accounting import get_accountant
from dpaudit.accounting.filters import FILTER_NAME, FILTER_VERSION, RenyiFilter, charge_rdp, first_refused
from dpaudit.components import certified_components
from dpaudit.display import show, show_delta
from dpaudit.errors import AccountingError, InvalidParameter, VerificationError
from dpaudit.events import LeafEvent, PrivacyEvent, compose
from dpaudit.files import atomic_replace
from dpaudit.ledger import Record
from dpaudit.nist_fields import FIELD as NIST_FIELD
from dpaudit.nist_fields import nist_fields
from dpaudit.provenance import package_versions
from dpaudit.record_index import of_type
from dpaudit.records import (
    ABORTED,
    CHARGE,
    CLOSE,
    CLOSE_STATUS_WORDS,
    FAILED,
    FINISHED,
    OPEN,
    REFUSED,
    ChargeBody,
    OpenBody,
)
from dpaudit.sensitivity import Assumption
from dpaudit.signing import key_fingerprint, public_key_pem, sign

FORMAT = "dpaudit-certificate/2"
"""Version 2 binds the certificate to its run: ``run.id`` and ``run.store_id`` (from the ledger's ``open`` record)."""

#: formats ``dpaudit verify`` reads; a version-1 certificate carries no run binding and is reported as unbound
READABLE_FORMATS = ("dpaudit-certificate/1", FORMAT)

#: What every certificate rests on, whatever the mechanisms (docs/accounting.md, "Adaptivity").
FIXED_PARAMETERS = Assumption(
    id="privacy-parameters-fixed-in-advance",
    statement="The privacy parameters of each release (noise scales, sampling rates, step counts, charged ε and "
              "δ) were chosen without looking at earlier noisy outputs; the queries themselves may be adaptive. "
              "The composition theorems used by every accountant require this.",
    conditional=True,
    source="Dwork, Rothblum & Vadhan 2010; Rogers, Roth, Ullman & Vadhan 2016 (fully adaptive composition)",
)

#: What an adaptive session's certificate states instead (docs/accounting.md, "Adaptive parameters: the Rényi
#: filter"): enforced by the session and rechecked by verify, so not conditional.
ADAPTIVE_PARAMETERS = Assumption(
    id="privacy-parameters-adaptive-renyi-filter",
    statement="The privacy parameters of each release may depend on earlier noisy outputs. Each charge was written "
              "to the ledger before its noise was drawn, and admitted only while the Renyi filter named in the "
              "claim held: some order of the filter with the running sum of the charges' RDP within its budget "
              "(delta split evenly over the filter's finite orders). The claim is the filter's budget, not the "
              "realised composition.",
    conditional=False,
    source="Feldman & Zrnic 2021 (Renyi filter); Lecuyer 2021; Balle et al. 2020, Thm. 21; union bound over orders",
)

ACCOUNTING_PACKAGES = ("dpaudit", "opacus", "dp-accounting", "numpy", "scipy")


def open_body(records: Sequence[Record]) -> OpenBody:
    """The body of the ledger's ``open`` record (the budget and public metadata).

    Raises:
        VerificationError: the ledger does not start with an ``open`` record.
        LedgerError: its body is malformed.
    """
    if not records or records[0].type != OPEN:
        raise VerificationError(f"ledger does not start with an {OPEN!r} record")
    return OpenBody.from_dict(records[0].body)


_WHY_NOT_FINISHED = {
    FAILED: "an exception ended it",
    ABORTED: "interrupted: Ctrl-C, SIGTERM, or a dead process closed by `dpaudit recover --abort`",
    REFUSED: "its configuration, plugin or plan was refused",
}


def close_status(records: Sequence[Record]) -> str | None:
    """The status of the ledger's ``close`` record (None when the ledger does not end in one, or it names none)."""
    if not records or records[-1].type != CLOSE or not isinstance(records[-1].body, Mapping):
        return None
    status = records[-1].body.get("status")
    return status if isinstance(status, str) else None


def unfinished_reason(status: str | None) -> str | None:
    """Why a run closed with ``status`` is not for release (``"run aborted: ..."``); None for a finished run.

    Every charge of such a run is still counted in its claim; its outputs are simply not a result anyone may
    publish (docs/auditor-guide.md, "How a run ends").
    """
    if status == FINISHED:
        return None
    word = CLOSE_STATUS_WORDS.get(status, "failed")
    why = _WHY_NOT_FINISHED.get(status, f"unknown close status {status!r}")
    return f"run {word} (closed {status}: {why}); every charge is counted, nothing of it is for release"


def release_problems(records: Sequence[Record]) -> list[str]:
    """Why the closed ledger's run is NOT for release (empty when it is): seeded randomness, a run that did not
    finish. A pure function of the ledger, so ``verify`` re-derives what the certificate states."""
    problems = [] if open_body(records).randomness.get("for_release") else ["seeded randomness (reproducible test run)"]
    unfinished = unfinished_reason(close_status(records))
    return problems + ([unfinished] if unfinished else [])


def charged_events(records: Sequence[Record]) -> list[tuple[int, PrivacyEvent]]:
    """(seq, event) of every ``charge`` record, in order.

    Raises:
        LedgerError: a malformed charge body.
        DPAuditError: an event that does not decode.
    """
    return [(r.seq, ChargeBody.from_dict(r.body).privacy_event()) for r in of_type(records, CHARGE)]


def session_filter(described: Mapping[str, Any] | None, budget: Mapping[str, Any]) -> RenyiFilter | None:
    """The Rényi filter an adaptive session's ``open`` record names, or None for a fixed-parameter session.

    Args:
        described: the open record's ``adaptive`` field (None or absent: a fixed-parameter session).
        budget: the open record's ``budget``.

    Raises:
        InvalidParameter: a malformed or unknown filter, or one whose budget differs from the session's.
    """
    if described is None:
        return None
    flt = RenyiFilter.from_dict(described)
    if (flt.epsilon, flt.delta) != (budget.get("epsilon"), budget.get("delta")):
        raise InvalidParameter(f"the filter's budget ({flt.epsilon}, {flt.delta}) is not the session's {budget}")
    return flt


def collect_assumptions(charges: Sequence[tuple[int, PrivacyEvent]], *, adaptive: bool = False) -> list[dict[str, Any]]:
    """Every assumption any charge rests on, once each, with the charge seqs that rely on it.

    Args:
        charges: (seq, event) of every charge.
        adaptive: the session admitted its charges through a Rényi filter: :data:`ADAPTIVE_PARAMETERS` replaces the
            conditional :data:`FIXED_PARAMETERS`.
    """
    base = ADAPTIVE_PARAMETERS if adaptive else FIXED_PARAMETERS
    # each assumption's charges as an ordered set (dict keys): a charge whose leaves repeat one is listed once
    found: dict[tuple[str, str], tuple[Assumption, dict[int, None]]] = {
        (base.id, base.statement): (base, dict.fromkeys(seq for seq, _ in charges)),
    }
    for seq, event in charges:
        for leaf, _ in event.leaves():
            assert isinstance(leaf, LeafEvent)
            for a in leaf.all_assumptions():
                found.setdefault((a.id, a.statement), (a, {}))[1][seq] = None
    return [{**a.to_dict(), "charges": list(seqs)} for a, seqs in found.values()]


def compute_claim(records: Sequence[Record], accountant_name: str | None = None) -> dict[str, Any]:
    """Compose every charge in the ledger at the session's δ with the session's (or the named) accountant.

    An adaptive session's claim is its Rényi filter's budget (:func:`filter_claim`), whatever ``accountant_name``.

    Raises:
        AccountingError: an adaptive session's charges exceed its filter (no certificate may claim the budget).
    """
    opened = open_body(records)
    flt = session_filter(opened.adaptive, opened.budget)
    if flt is not None:
        return filter_claim(flt, charged_events(records))
    delta = opened.delta
    accountant = get_accountant(accountant_name or opened.accountant["name"])
    charges = charged_events(records)
    if not charges:
        return {"epsilon": 0.0, "delta": 0.0, "accountant": accountant.name, "attained_by": "none",
                "accountant_version": accountant.version()}
    event = compose([e for _, e in charges])
    epsilon, source = accountant.epsilon_with_source(event, delta)
    return {"epsilon": epsilon, "delta": delta, "accountant": accountant.name, "attained_by": source,
            "accountant_version": accountant.version()}


def filter_claim(flt: RenyiFilter, charges: Sequence[tuple[int, PrivacyEvent]]) -> dict[str, Any]:
    """The claim of an adaptive session: (ε_B, δ_B), after checking that the filter admits every charge.

    Raises:
        AccountingError: some prefix of the charges is refused by the filter.
        UnsupportedEvent: a charge has no Rényi-DP bound.
    """
    refused = first_refused(flt, [charge_rdp(event, flt.orders) for _, event in charges])
    if refused is not None:
        raise AccountingError(f"charge {charges[refused][0]} exceeds the session's Renyi filter: the budget "
                              f"({flt.epsilon:g}, {flt.delta:g}) cannot be claimed")
    return {"epsilon": flt.epsilon, "delta": flt.delta, "accountant": FILTER_NAME, "attained_by": FILTER_NAME,
            "accountant_version": FILTER_VERSION, "filter": flt.to_dict()}


def unsigned(certificate: Mapping[str, Any]) -> bytes:
    """The bytes the signature covers: canonical JSON of every field but ``signature``."""
    return canonical.encode({k: v for k, v in certificate.items() if k != "signature"})


def build_certificate(records: Sequence[Record], *, key, plugins: Mapping[str, str],
                      confidential_log: str | None) -> dict[str, Any]:
    """Build and sign the certificate of a closed ledger.

    Args:
        records: the closed ledger.
        key: the signing key.
        plugins: name -> version of the plugins that acted in the run.
        confidential_log: where the run's confidential log lives (relative to the run folder), when it has one.
    """
    opened = open_body(records)
    charges = charged_events(records)
    assumptions = collect_assumptions(charges, adaptive=session_filter(opened.adaptive, opened.budget) is not None)
    mechanisms = Counter(f"{body.plugin}/{body.mechanism}" for body in
                         (ChargeBody.from_dict(r.body) for r in of_type(records, CHARGE)))
    randomness = opened.randomness
    public_pem = public_key_pem(key)
    claim = compute_claim(records)
    not_released = release_problems(records)
    certificate: dict[str, Any] = {
        "format": FORMAT,
        "run": {"name": opened.name, "id": opened.run_id, "store_id": opened.store_id,
                "opened_at": records[0].time, "closed_at": records[-1].time},
        "claim": claim,
        "components": certified_components(records, claim, dict(charges)),
        "budget": dict(opened.budget),
        "neighbouring": opened.neighbouring,
        "protected_datasets": list(opened.protected),
        "public_datasets": list(opened.public),
        "guarantee": (f"({show(claim['epsilon'])}, {show_delta(claim['delta'])})-DP with respect to "
                      f"{opened.neighbouring.replace('_', '/')} neighbours of: {', '.join(opened.protected)}"),
        "randomness": randomness,
        "for_release": not not_released,
        "release_status": f"NOT FOR RELEASE: {'; '.join(not_released)}" if not_released else "for release",
        "conditional": any(a["conditional"] for a in assumptions),
        "assumptions": assumptions,
        "mechanisms": dict(sorted(mechanisms.items())),
        "plugins": dict(sorted(plugins.items())),
        "versions": {"code": opened.code_version, **package_versions(ACCOUNTING_PACKAGES)},
        "ledger": {"head": records[-1].hash, "records": len(records)},
        "confidential_log": None if confidential_log is None else {
            "location": confidential_log,
            "statement": "Raw values logged there are NOT differentially private and are outside the release; the "
            "file (mode 0600) is neither mirrored to MLflow nor exported.",
        },
        "public_key_fingerprint": key_fingerprint(public_pem),
        NIST_FIELD: nist_fields(records, claim, assumptions, [event for _, event in charges]),
    }
    certificate["signature"] = {"algorithm": "Ed25519", "value": sign(key, unsigned(certificate))}
    return certificate


def write_certificate(run_dir: Path, certificate: Mapping[str, Any], key) -> None:
    """Write ``certificate.json`` and ``public_key.pem`` into the run folder (atomically, fsynced)."""
    atomic_replace(run_dir / run_store.CERTIFICATE,
                   (json.dumps(certificate, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    atomic_replace(run_dir / run_store.PUBLIC_KEY, public_key_pem(key).encode("ascii"))
