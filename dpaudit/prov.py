"""The ledger as W3C PROV (PROV-JSON): who charged what, on which data, and which release each charge generated.

``dpaudit export RUN DIR --format prov`` writes :data:`PROV_FILE` beside the evidence bundle, for provenance tools
that read the W3C PROV data model (PROV-DM, W3C Recommendation 2013) in its JSON serialisation (PROV-JSON, W3C
Member Submission 2013: top-level ``prefix``, ``entity``, ``activity``, ``agent`` and one object per relation, each
keyed by identifier). The mapping (:func:`prov_document`), every identifier in the run's own namespace (prefix
``run``, ``urn:dpaudit:run:<run id>:``):

* activity ``session`` (open to close time, the close status); one activity ``charge/<seq>`` per charge (mechanism,
  label, the filter's bound after it), ``wasInformedBy`` the session, ``used`` each protected data set the charge
  names, ``wasAssociatedWith`` the agent ``plugin/<name>`` (a ``prov:SoftwareAgent``) that made it;
* entity ``data/<name>`` per declared data set (protected or public); entity ``release/<seq>`` per release, with the
  SHA-256 of its canonical output (and the released file's or model's SHA-256), ``wasGeneratedBy`` its charge;
* entity ``ledger`` (head hash, record count) ``wasGeneratedBy`` the session; entity ``certificate`` (the claim)
  ``wasDerivedFrom`` the ledger and ``wasAttributedTo`` the agent ``signing-key`` (its fingerprint).

The document is a pure function of the ledger and the certificate and is not signed: ``dpaudit verify`` regenerates
it from the verified files and requires a bundle's copy to be identical, byte for byte (as for the reports).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.errors import VerificationError
from dpaudit.files import atomic_replace
from dpaudit.ledger import Record, read_records
from dpaudit.records import CHARGE, CLOSE, RELEASE, ChargeBody, CloseBody, OpenBody, ReleaseBody

PROV_FILE = "ledger.prov.json"
"""The document's file name in an exported bundle."""


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat()


def prov_document(records: Sequence[Record], certificate: Mapping[str, Any]) -> dict[str, Any]:
    """The PROV-JSON document of a closed run (see the module docstring for the mapping).

    Raises:
        LedgerError: a record body that does not decode.
    """
    opened = OpenBody.from_dict(records[0].body)
    run_id = certificate.get("run", {}).get("id") if isinstance(certificate.get("run"), Mapping) else None
    run = "run"  # every identifier of the run is in its own namespace
    prefix = {"dpaudit": "urn:dpaudit:", run: f"urn:dpaudit:run:{quote(str(run_id or opened.run_id), safe='')}:"}
    entity: dict[str, Any] = {}
    activity: dict[str, Any] = {}
    agent: dict[str, Any] = {}
    relations: dict[str, dict[str, Any]] = {name: {} for name in (
        "used", "wasGeneratedBy", "wasAssociatedWith", "wasInformedBy", "wasDerivedFrom", "wasAttributedTo")}

    def relate(kind: str, **ends: str) -> None:
        relations[kind][f"_:{kind}{len(relations[kind]) + 1}"] = {f"prov:{k}": v for k, v in ends.items()}

    def data(name: str) -> str:
        return f"{run}:data/{quote(name, safe='')}"

    session = f"{run}:session"
    close = CloseBody.from_dict(records[-1].body).status if records[-1].type == CLOSE else None
    activity[session] = {"prov:startTime": _time(records[0].time), "prov:endTime": _time(records[-1].time),
                         "prov:type": "dpaudit:Session", "dpaudit:name": opened.name, "dpaudit:status": close}
    for role, names in (("Protected", opened.protected), ("Public", opened.public)):
        for name in names:
            entity[data(name)] = {"prov:type": f"dpaudit:{role}DataSet", "prov:label": name}
    for r in records:
        if r.type == CHARGE:
            body = ChargeBody.from_dict(r.body)
            charge, plugin = f"{run}:charge/{r.seq}", f"{run}:plugin/{quote(body.plugin, safe='')}"
            activity[charge] = {"prov:startTime": _time(r.time), "prov:endTime": _time(r.time),
                                "prov:type": "dpaudit:Charge", "dpaudit:mechanism": body.mechanism,
                                "dpaudit:label": str(body.event.get("label", "")),
                                "dpaudit:epsilon_spent": body.epsilon_spent}
            agent.setdefault(plugin, {"prov:type": "prov:SoftwareAgent", "prov:label": body.plugin})
            relate("wasInformedBy", informed=charge, informant=session)
            relate("wasAssociatedWith", activity=charge, agent=plugin)
            for name in body.data:
                relate("used", activity=charge, entity=data(name), time=_time(r.time))
        elif r.type == RELEASE:
            body = ReleaseBody.from_dict(r.body)
            release = f"{run}:release/{r.seq}"
            entity[release] = {"prov:type": "dpaudit:Release", "prov:label": body.label,
                               "dpaudit:output_sha256": canonical.sha256_hex(canonical.encode(
                                   {"output": body.output, "output_file": None if body.output_file is None
                                    else body.output_file.to_dict()}))}
            if body.output_file is not None:
                entity[release]["dpaudit:file"] = body.output_file.path
            if isinstance(body.output, Mapping) and isinstance(body.output.get("model_sha256"), str):
                entity[release]["dpaudit:model_sha256"] = body.output["model_sha256"]
            relate("wasGeneratedBy", entity=release, activity=f"{run}:charge/{body.charge_seq}", time=_time(r.time))
    ledger, cert, key = f"{run}:ledger", f"{run}:certificate", f"{run}:signing-key"
    entity[ledger] = {"prov:type": "dpaudit:Ledger", "dpaudit:head": records[-1].hash, "dpaudit:records": len(records)}
    claim = certificate.get("claim") if isinstance(certificate.get("claim"), Mapping) else {}
    entity[cert] = {"prov:type": "dpaudit:Certificate", "dpaudit:format": str(certificate.get("format")),
                    "dpaudit:epsilon": claim.get("epsilon"), "dpaudit:delta": claim.get("delta")}
    agent[key] = {"prov:type": "dpaudit:SigningKey",
                  "dpaudit:fingerprint": str(certificate.get("public_key_fingerprint"))}
    relate("wasGeneratedBy", entity=ledger, activity=session, time=_time(records[-1].time))
    relate("wasDerivedFrom", generatedEntity=cert, usedEntity=ledger)
    relate("wasAttributedTo", entity=cert, agent=key)
    return {"prefix": prefix, "entity": entity, "activity": activity, "agent": agent,
            **{kind: found for kind, found in relations.items() if found}}


def prov_bytes(records: Sequence[Record], certificate: Mapping[str, Any]) -> bytes:
    """The file :data:`PROV_FILE`: the canonical JSON of :func:`prov_document` and a newline."""
    return canonical.encode(prov_document(records, certificate)) + b"\n"


def closed_run(run_dir: Path) -> tuple[list[Record], dict[str, Any]]:
    """The ledger records and the certificate of the closed run in ``run_dir`` (what an export derives from).

    Raises:
        VerificationError: no certificate, or an empty ledger.
        LedgerError: the ledger is unreadable.
    """
    records, _ = read_records(Path(run_dir) / run_store.LEDGER)
    certificate = canonical.read_object(Path(run_dir) / run_store.CERTIFICATE, VerificationError)
    if not records:
        raise VerificationError(f"{run_dir}: the ledger holds no records")
    return records, certificate


def write_prov(run_dir: Path, directory: Path) -> Path:
    """Write the PROV document of the closed run in ``run_dir`` as ``directory/``:data:`PROV_FILE` (atomically).

    Raises:
        VerificationError: no certificate, or an empty ledger.
        LedgerError: the ledger is unreadable or a body does not decode.
    """
    records, certificate = closed_run(run_dir)
    target = Path(directory) / PROV_FILE
    atomic_replace(target, prov_bytes(records, certificate))
    return target
