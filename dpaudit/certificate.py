"""The run certificate: the (ε, δ) claim of a session and everything it rests on, signed.

``build_certificate`` reads only the ledger, so ``dpaudit verify`` can rebuild every field from the same
records. The claim is the composition of every ``charge`` record (charges whose release never happened are
still counted: conservative), evaluated at the session's δ by the session's accountant.

Fields: format, run, claim (ε, δ, accountant, the accountant that attained the bound, versions), budget,
neighbouring relation, protected and public data sets, randomness and ``for_release``, assumptions (each with
``conditional`` and the charges that rely on it), plugins with versions, dpaudit and code versions, ledger head
hash and record count, confidential log (named as outside the release), and an Ed25519 signature over the
canonical JSON of all the other fields.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.accounting import get_accountant
from dpaudit.errors import VerificationError
from dpaudit.events import LeafEvent, PrivacyEvent, compose
from dpaudit.ledger import Record
from dpaudit.provenance import package_versions
from dpaudit.sensitivity import Assumption
from dpaudit.signing import key_fingerprint, public_key_pem, sign

FORMAT = "dpaudit-certificate/1"

#: What every certificate rests on, whatever the mechanisms (docs/accounting.md, "Adaptivity").
FIXED_PARAMETERS = Assumption(
    id="privacy-parameters-fixed-in-advance",
    statement="The privacy parameters of each release (noise scales, sampling rates, step counts, charged ε and "
              "δ) were chosen without looking at earlier noisy outputs; the queries themselves may be adaptive. "
              "The composition theorems used by every accountant require this.",
    conditional=True,
    source="Dwork, Rothblum & Vadhan 2010; Rogers, Roth, Ullman & Vadhan 2016 (fully adaptive composition)",
)

ACCOUNTING_PACKAGES = ("dpaudit", "opacus", "dp-accounting", "numpy", "scipy")


def open_body(records: Sequence[Record]) -> Mapping[str, Any]:
    """The body of the ledger's ``open`` record (the budget and public metadata)."""
    if not records or records[0].type != "open":
        raise VerificationError("ledger does not start with an 'open' record")
    return records[0].body


def charged_events(records: Sequence[Record]) -> list[tuple[int, PrivacyEvent]]:
    """(seq, event) of every ``charge`` record, in order."""
    return [(r.seq, PrivacyEvent.from_dict(r.body["event"])) for r in records if r.type == "charge"]


def collect_assumptions(charges: Sequence[tuple[int, PrivacyEvent]]) -> list[dict[str, Any]]:
    """Every assumption any charge rests on, once each, with the charge seqs that rely on it."""
    found: dict[tuple[str, str], tuple[Assumption, list[int]]] = {
        (FIXED_PARAMETERS.id, FIXED_PARAMETERS.statement): (FIXED_PARAMETERS, [seq for seq, _ in charges]),
    }
    for seq, event in charges:
        for leaf, _ in event.leaves():
            assert isinstance(leaf, LeafEvent)
            for a in leaf.all_assumptions():
                entry = found.setdefault((a.id, a.statement), (a, []))
                if seq not in entry[1]:
                    entry[1].append(seq)
    return [{**a.to_dict(), "charges": seqs} for a, seqs in found.values()]


def compute_claim(records: Sequence[Record], accountant_name: str | None = None) -> dict[str, Any]:
    """Compose every charge in the ledger at the session's δ with the session's (or the named) accountant."""
    opened = open_body(records)
    delta = float(opened["budget"]["delta"])
    accountant = get_accountant(accountant_name or opened["accountant"]["name"])
    charges = charged_events(records)
    if not charges:
        return {"epsilon": 0.0, "delta": 0.0, "accountant": accountant.name, "attained_by": "none",
                "accountant_version": accountant.version()}
    event = compose([e for _, e in charges])
    with_source = getattr(accountant, "epsilon_with_source", None)
    epsilon, source = with_source(event, delta) if with_source else (accountant.epsilon(event, delta),
                                                                      accountant.name)
    return {"epsilon": epsilon, "delta": delta, "accountant": accountant.name, "attained_by": source,
            "accountant_version": accountant.version()}


def unsigned(certificate: Mapping[str, Any]) -> bytes:
    """The bytes the signature covers: canonical JSON of every field but ``signature``."""
    return canonical.encode({k: v for k, v in certificate.items() if k != "signature"})


def build_certificate(records: Sequence[Record], *, key, plugins: Mapping[str, str],
                      confidential_experiment: str | None) -> dict[str, Any]:
    """Build and sign the certificate of a closed ledger."""
    opened = open_body(records)
    charges = charged_events(records)
    assumptions = collect_assumptions(charges)
    mechanisms = Counter(f"{r.body['plugin']}/{r.body['mechanism']}" for r in records if r.type == "charge")
    randomness = opened["randomness"]
    public_pem = public_key_pem(key)
    claim = compute_claim(records)
    certificate: dict[str, Any] = {
        "format": FORMAT,
        "run": {"name": opened["name"], "opened_at": records[0].time, "closed_at": records[-1].time},
        "claim": claim,
        "budget": opened["budget"],
        "neighbouring": opened["neighbouring"],
        "protected_datasets": opened["protected"],
        "public_datasets": opened["public"],
        "guarantee": (f"({claim['epsilon']:.6g}, {claim['delta']:.3g})-DP with respect to "
                      f"{opened['neighbouring'].replace('_', '/')} neighbours of: {', '.join(opened['protected'])}"),
        "randomness": randomness,
        "for_release": bool(randomness.get("for_release")),
        "release_status": "for release" if randomness.get("for_release") else
        "NOT FOR RELEASE: seeded randomness (reproducible test run)",
        "conditional": any(a["conditional"] for a in assumptions),
        "assumptions": assumptions,
        "mechanisms": dict(sorted(mechanisms.items())),
        "plugins": dict(sorted(plugins.items())),
        "versions": {"code": opened["code_version"], **package_versions(ACCOUNTING_PACKAGES)},
        "ledger": {"head": records[-1].hash, "records": len(records)},
        "confidential_log": None if confidential_experiment is None else {
            "experiment": confidential_experiment,
            "statement": "Raw values logged there are NOT differentially private and are outside the release.",
        },
        "public_key_fingerprint": key_fingerprint(public_pem),
    }
    certificate["signature"] = {"algorithm": "Ed25519", "value": sign(key, unsigned(certificate))}
    return certificate


def write_certificate(run_dir: Path, certificate: Mapping[str, Any], key) -> None:
    """Write ``certificate.json`` and ``public_key.pem`` into the run folder (atomically, fsynced)."""
    _atomic_write(run_dir / run_store.CERTIFICATE, json.dumps(certificate, indent=2, sort_keys=True) + "\n")
    _atomic_write(run_dir / run_store.PUBLIC_KEY, public_key_pem(key))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
