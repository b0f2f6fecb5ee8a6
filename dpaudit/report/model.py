"""The report as data: built from a run folder's ledger and certificate only (no MLflow needed).

One model, every format rendered from it (:mod:`dpaudit.report.render`). It is a deterministic function of the
ledger and the certificate, because ``dpaudit verify`` regenerates ``report.md`` and ``report.json`` from them and
compares them byte for byte. Its first part answers a reviewer's questions in plain language
(:mod:`dpaudit.report.wording`): whether the run finished, what is protected and at what unit, what was released,
the guarantee and what ε and δ mean, and on what it is conditional. Then the cost by component: each
(plugin, mechanism)'s charges composed *alone* with the run's accountant at the run's δ, beside the certified total
of all charges together (composition is not a sum). Then the details: released values, events with the budget
filter's bound after each charge (the burn-down), assumptions and the certificate.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpaudit import store as run_store
from dpaudit.components import component_costs, component_key
from dpaudit.errors import VerificationError
from dpaudit.events import LeafEvent, PrivacyEvent
from dpaudit.ledger import Record, read_records
from dpaudit.records import CHARGE, CLOSE, INFO, OPEN, RELEASE, ChargeBody, CloseBody, InfoBody, OpenBody, ReleaseBody
from dpaudit.report import wording

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
    return records, run_store.read_certificate(run_dir)


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


def _costs(opened: OpenBody, members: Mapping[tuple[str, str], list[PrivacyEvent]], total_charges: int,
           certificate: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Each component's cost: the certificate's signed ``components`` when it carries them (``verify`` recomputes
    them, :mod:`dpaudit.components`), else composed here (an open run, or a certificate made before the field)."""
    listed = None if certificate is None else certificate.get("components")
    if listed is None:
        return component_costs(opened, list(members.values()), total_charges,
                               None if certificate is None else certificate["claim"])
    by_key = {c["component"]: c for c in listed}
    keys = [component_key(*key) for key in members]
    if sorted(by_key) != sorted(keys) or len(by_key) != len(listed):
        raise VerificationError("the certificate's components are not the ledger's (plugin, mechanism) pairs")
    return [{k: by_key[key][k] for k in ("epsilon", "attained_by", "note")} for key in keys]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _components_shape(components: Any) -> bool:
    """The certificate's ``components`` is a list of {component, epsilon, attained_by, note} of the right types."""
    return isinstance(components, list) and all(
        isinstance(c, Mapping) and isinstance(c.get("component"), str)
        and (_is_number(c.get("epsilon")) or c.get("epsilon") is None)
        and isinstance(c.get("attained_by"), (str, type(None))) and isinstance(c.get("note"), (str, type(None)))
        for c in components)


def check_certificate_shape(certificate: Mapping[str, Any]) -> None:
    """The certificate fields the report reads have the types it reads them as (``verify`` regenerates reports from
    a bundle's certificate before anything vouches for it, so a hostile one must fail cleanly, not crash).

    Raises:
        VerificationError: a missing field or one of the wrong type.
    """
    claim = certificate.get("claim")
    assumptions = certificate.get("assumptions")
    problems = [
        not isinstance(claim, Mapping) or not all(_is_number(claim.get(k)) for k in ("epsilon", "delta"))
        or not all(isinstance(claim.get(k), str) for k in ("accountant", "attained_by")),
        not isinstance(assumptions, list) or not all(
            isinstance(a, Mapping) and isinstance(a.get("id"), str) and isinstance(a.get("statement"), str)
            and isinstance(a.get("conditional"), bool) and isinstance(a.get("charges"), list) for a in assumptions),
        not isinstance(certificate.get("release_status", ""), str),
        not isinstance(certificate.get("public_key_fingerprint", ""), str),
        "components" in certificate and not _components_shape(certificate["components"]),
    ]
    if any(problems):
        raise VerificationError("certificate lacks a well-formed claim, assumptions, release status, key "
                                "fingerprint or components: no report can be rendered from it")


def report_from(records: list[Record], certificate: dict[str, Any] | None, run_dir: Path | str, *,
                decoded: Mapping[int, PrivacyEvent] | None = None) -> dict[str, Any]:
    """The report model of already-read ``records`` and ``certificate``; ``run_dir`` is only shown. ``decoded``:
    the charges' events by seq, as :func:`dpaudit.certificate.charged_events` decodes them (``verify`` has them
    already); None decodes them here.

    Raises:
        VerificationError: the ledger does not start with an open record, or the certificate is malformed.
        DPAuditError: a record body does not decode.
    """
    if not records or records[0].type != OPEN:
        raise VerificationError(f"{run_dir}: ledger does not start with an open record")
    if certificate is not None:
        check_certificate_shape(certificate)
    opened = OpenBody.from_dict(records[0].body)
    events: list[dict[str, Any]] = []
    charged: dict[int, PrivacyEvent] = {}
    released: list[dict[str, Any]] = []
    granted: list[int] = []  # seqs of charges made through a budget authority (their record names a key)
    info, selected = [], []
    close_status = None
    described: dict[int, dict[str, Any]] = {}  # by event object: equal charges share one (ChargeBody.privacy_event)
    for r in records:
        if r.type == CHARGE:
            charge = ChargeBody.from_dict(r.body)
            event = charged[r.seq] = charge.privacy_event() if decoded is None else decoded[r.seq]
            if id(event) not in described:  # ``charged`` keeps every event alive: no id is reused meanwhile
                described[id(event)] = _describe(event)
            if charge.key is not None:  # a budget authority's grant (dpaudit/authority.py)
                granted.append(r.seq)
            events.append({"seq": r.seq, "time": r.time, "plugin": charge.plugin, "mechanism": charge.mechanism,
                           "epsilon_spent": charge.epsilon_spent, "bound_source": charge.bound_source,
                           **described[id(event)]})
        elif r.type == RELEASE:
            body = ReleaseBody.from_dict(r.body)
            released.append({"seq": r.seq, "charge_seq": body.charge_seq, "plugin": body.plugin,
                             "mechanism": body.mechanism, "label": body.label, "value": body.output,
                             "file": None if body.output_file is None else body.output_file.to_dict()})
        elif r.type == INFO:
            body = InfoBody.from_dict(r.body)
            info.append({"seq": r.seq, **body.to_dict()})
            if isinstance(body.info.get("selected"), Mapping):
                selected.append({"seq": r.seq, "plugin": body.plugin, "hyperparameters": dict(body.info["selected"])})
        elif r.type == CLOSE:
            close_status = CloseBody.from_dict(r.body).status
    labels: dict[Any, str] | None = None  # the charges' labels by seq, for a release without its own (built once)
    per_charge: dict[int, int] = {}
    for rel in released:
        if not rel["label"]:
            labels = {e["seq"]: e["label"] for e in events} if labels is None else labels
            rel["label"] = labels.get(rel["charge_seq"], "")
        per_charge[rel["charge_seq"]] = per_charge.get(rel["charge_seq"], 0) + 1
    groups: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
    members: OrderedDict[tuple[str, str], list[PrivacyEvent]] = OrderedDict()
    for e in events:
        e["releases"] = per_charge.get(e["seq"], 0)
        key = (e["plugin"], e["mechanism"])
        g = groups.get(key)
        if g is None:  # (not ``setdefault``: its default would be built for every event)
            g = groups[key] = {"plugin": e["plugin"], "mechanism": e["mechanism"], "charges": 0, "releases": 0,
                               "declared_epsilon": 0.0}
            members[key] = []
        members[key].append(charged[e["seq"]])
        g["charges"] += 1
        g["releases"] += e["releases"]
        declared = e["parameters"].get("epsilon")
        g["declared_epsilon"] = (None if declared is None or g["declared_epsilon"] is None
                                 else g["declared_epsilon"] + float(declared) * e["multiplicity"])
    for g, cost in zip(groups.values(), _costs(opened, members, len(events), certificate),
                       strict=True):
        g.update({"epsilon_alone": cost["epsilon"], "attained_by": cost["attained_by"], "note": cost["note"]})
    releasable, status = wording.status_sentence(close_status, certificate)
    model = {
        "run": {"name": opened.name, "run_dir": str(run_dir), "closed": certificate is not None,
                "records": len(records)},
        "status": {"close": close_status, "releasable": releasable, "sentence": status},
        "budget": dict(opened.budget),
        # the certificate's key, else the one the open record names (a run still open); None for old ledgers
        "signing_key_fingerprint": (certificate or {}).get("public_key_fingerprint", opened.signing_key_fingerprint),
        "neighbouring": opened.neighbouring,
        "protected": list(opened.protected),
        "public": list(opened.public),
        "selected": selected,
        "released": released,
        "groups": list(groups.values()),
        "events": events,
        "cumulative_epsilon": [{"seq": e["seq"], "epsilon": e["epsilon_spent"]} for e in events],
        "info": info,
        "assumptions": certificate["assumptions"] if certificate else [],
        "certificate": certificate,
    }
    never = [seq for seq in granted if per_charge.get(seq, 0) == 0]
    if never:  # only ledgers with authority grants have the key: older reports keep their bytes (verify compares them)
        model["reserved_unreleased"] = never
    model["summary"] = wording.summary(model)
    model["glossary"] = [{"term": term, "meaning": meaning} for term, meaning in wording.GLOSSARY]
    return model
