"""The report as data: built from a run folder's ledger and certificate only (no MLflow needed)."""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.errors import VerificationError
from dpaudit.events import LeafEvent, PrivacyEvent
from dpaudit.ledger import Record, read_records
from dpaudit.records import CHARGE, INFO, OPEN, RELEASE, ChargeBody, InfoBody, OpenBody, ReleaseBody

#: the noise parameters shown for each event kind (public, from the event itself)
_PARAMETERS = ("epsilon", "delta", "scale", "sigma", "grid", "dimension", "n_candidates", "threshold_scale",
               "query_scale", "max_queries", "sample_rate", "noise_multiplier", "steps", "batch_size",
               "dataset_size")


def load_run(run_dir: Path) -> tuple[list[Record], dict[str, Any] | None]:
    """Records of ``run_dir/ledger.jsonl`` and its certificate (None while the session is still open)."""
    ledger = Path(run_dir) / run_store.LEDGER
    if not ledger.is_file():
        raise VerificationError(f"{run_dir} holds no {run_store.LEDGER}")
    records, _ = read_records(ledger)
    cert_path = Path(run_dir) / run_store.CERTIFICATE
    certificate = canonical.read_object(cert_path, VerificationError) if os.path.lexists(cert_path) else None
    return records, certificate


def _describe(event: PrivacyEvent) -> dict[str, Any]:
    leaves = list(event.leaves())
    leaf, multiplicity = leaves[0]
    assert isinstance(leaf, LeafEvent)
    params = {k: getattr(leaf, k) for k in _PARAMETERS if hasattr(leaf, k)}
    return {
        "kind": event.kind if len(leaves) > 1 else leaf.kind,
        "label": leaf.label,
        "parameters": params,
        "multiplicity": multiplicity,
        "sensitivity": {"value": leaf.sensitivity.value, "norm": leaf.sensitivity.norm.value,
                        "formula": leaf.sensitivity.formula, "source": leaf.sensitivity.source},
        "assumptions": [a.id for a in leaf.all_assumptions()],
    }


def build_report(run_dir: Path) -> dict[str, Any]:
    """Everything a budget report of the run folder ``run_dir`` shows, as plain JSON-able data."""
    records, certificate = load_run(run_dir)
    return report_from(records, certificate, run_dir)


def report_from(records: list[Record], certificate: dict[str, Any] | None, run_dir: Path | str) -> dict[str, Any]:
    """The report model of already-read ``records`` and ``certificate``; ``run_dir`` is only shown.

    Raises:
        VerificationError: the ledger does not start with an open record.
        DPAuditError: a record body does not decode.
    """
    if not records or records[0].type != OPEN:
        raise VerificationError(f"{run_dir}: ledger does not start with an open record")
    opened = OpenBody.from_dict(records[0].body)
    events: list[dict[str, Any]] = []
    released: dict[int, int] = {}
    info = []
    for r in records:
        if r.type == CHARGE:
            charge = ChargeBody.from_dict(r.body)
            events.append({"seq": r.seq, "time": r.time, "plugin": charge.plugin, "mechanism": charge.mechanism,
                           "epsilon_spent": charge.epsilon_spent, "bound_source": charge.bound_source,
                           **_describe(charge.privacy_event())})
        elif r.type == RELEASE:
            seq = ReleaseBody.from_dict(r.body).charge_seq
            released[seq] = released.get(seq, 0) + 1
        elif r.type == INFO:
            info.append({"seq": r.seq, **InfoBody.from_dict(r.body).to_dict()})
    groups: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
    for e in events:
        e["releases"] = released.get(e["seq"], 0)
        g = groups.setdefault((e["plugin"], e["mechanism"]), {"plugin": e["plugin"], "mechanism": e["mechanism"],
                                                              "charges": 0, "releases": 0, "declared_epsilon": 0.0})
        g["charges"] += 1
        g["releases"] += e["releases"]
        declared = e["parameters"].get("epsilon")
        g["declared_epsilon"] = (None if declared is None or g["declared_epsilon"] is None
                                 else g["declared_epsilon"] + float(declared) * e["multiplicity"])
    return {
        "run": {"name": opened.name, "run_dir": str(run_dir), "closed": certificate is not None,
                "records": len(records)},
        "budget": dict(opened.budget),
        # the certificate's key, else the one the open record names (a run still open); None for old ledgers
        "signing_key_fingerprint": (certificate or {}).get("public_key_fingerprint", opened.signing_key_fingerprint),
        "neighbouring": opened.neighbouring,
        "protected": list(opened.protected),
        "public": list(opened.public),
        "groups": list(groups.values()),
        "events": events,
        "cumulative_epsilon": [{"seq": e["seq"], "epsilon": e["epsilon_spent"]} for e in events],
        "info": info,
        "assumptions": certificate["assumptions"] if certificate else [],
        "certificate": certificate,
    }
