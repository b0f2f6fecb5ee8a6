"""Offline verification: a clean run verifies; every tampering is caught, with every reason listed."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dpaudit import VerificationError
from dpaudit.certificate import unsigned
from dpaudit.events import PrivacyEvent
from dpaudit.ledger import GENESIS_PREV, Record, read_records
from dpaudit.signing import key_fingerprint, load_or_create_key, public_key_pem, sign
from dpaudit.store import default_key_path, store_root
from dpaudit.verify import verify_bundle


@pytest.fixture
def bundle(make_session, tmp_path) -> Path:
    with make_session(epsilon=2.0, delta=1e-6, protected=("toy data",)) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2, label="count")
        s.gaussian(2.0, sensitivity=1.0, epsilon=0.3, delta=1e-7, label="sum")
        s.exponential([1.0, 2.0, 3.0], sensitivity=1.0, epsilon=0.1, label="argmax")
    copy = tmp_path / "bundle"
    shutil.copytree(s.run_dir, copy)
    return copy


def _failed(bundle: Path) -> set[str]:
    report = verify_bundle(bundle, allow_not_for_release=True)
    return {c.name for c in report.checks if not c.ok}


def _lines(bundle: Path) -> list[str]:
    return (bundle / "ledger.jsonl").read_text().splitlines(keepends=True)


def _rewrite(bundle: Path, records: list[Record]) -> None:
    """Re-chain and re-hash ``records`` the way a forger with write access would."""
    prev, out = GENESIS_PREV, []
    for i, r in enumerate(records):
        r = replace(r, seq=i, prev=prev, hash="")
        r = replace(r, hash=r.compute_hash())
        prev = r.hash
        out.append(r.to_line())
    (bundle / "ledger.jsonl").write_text("".join(out))


def _drop_reports(bundle: Path) -> None:
    """A forger who changed the ledger or certificate drops the reports rendered from them (a bundle without
    reports verifies; edited reports do not: test_an_edited_report_fails_naming_the_file)."""
    for name in ("report.md", "report.json"):
        (bundle / name).unlink(missing_ok=True)


def _resign(bundle: Path, tmp_path: Path, edit=lambda c: None, key_path: Path | None = None) -> None:
    """Re-sign the certificate after ``edit``, pointing it at the current ledger.

    By default the forger is an insider holding the store's own (trusted) key, so only the checks that do not
    rest on the key can catch the forgery; ``key_path`` names an outsider's key instead.
    """
    key = load_or_create_key(key_path or default_key_path(store_root()))
    cert = json.loads((bundle / "certificate.json").read_text())
    records, _ = read_records(bundle / "ledger.jsonl")
    cert["ledger"] = {"head": records[-1].hash, "records": len(records)}
    edit(cert)
    cert["public_key_fingerprint"] = key_fingerprint(public_key_pem(key))
    cert["signature"] = {"algorithm": "Ed25519", "value": sign(key, unsigned(cert))}
    (bundle / "certificate.json").write_text(json.dumps(cert))
    (bundle / "public_key.pem").write_text(public_key_pem(key))
    _drop_reports(bundle)


def test_clean_bundle_verifies(bundle):
    report = verify_bundle(bundle, allow_not_for_release=True)
    assert report.valid, report.reasons
    assert report.recheck is not None and report.recheck["ok"]


@pytest.mark.parametrize(("fold", "ok"), [("pld/2 (interval 0.0002, pessimistic, run fold; dp-accounting)", True),
                                          ("pld/1 (interval 0.0002, pessimistic; dp-accounting)", False)])
def test_the_claim_is_recomputed_with_the_pld_fold_its_version_records(bundle, tmp_path, fold, ok):
    """verify reads the claim's accountant version: a ``pld/2`` claim is recomputed with that fold (here each run
    has one part, where both folds agree), and a version with no fold here fails the recomposition naming it."""
    def older(cert: dict) -> None:
        version = cert["claim"]["accountant_version"]
        start = version.index("pld/")
        cert["claim"]["accountant_version"] = version[:start] + fold + version[version.index(")", start) + 1:]

    _resign(bundle, tmp_path, edit=older)
    report = verify_bundle(bundle, allow_not_for_release=True)
    failed = {c.name: c.detail for c in report.checks if not c.ok}
    assert (failed == {}) == ok, failed
    if not ok:
        assert "recompose" in failed and "pld/1" in failed["recompose"]


def test_an_unreadable_fold_version_cannot_switch_the_components_check_off(bundle, tmp_path):
    """An insider forges every component's ε to 1e-9 and writes a PLD version verify has no fold for (``pld/9``)
    while the claim names RDP (which ignores the version): the components must fail as not recomputable, never be
    skipped as "no bound applies" (they were, and the bundle verified VALID)."""
    def forge(cert: dict) -> None:
        for component in cert["components"]:
            component["epsilon"], component["attained_by"] = 1e-9, "pld"
        claim = cert["claim"]
        claim["attained_by"], claim["epsilon"] = "rdp", claim["epsilon"] * 4
        claim["accountant_version"] = claim["accountant_version"].replace("pld/4", "pld/9")

    _resign(bundle, tmp_path, edit=forge)
    report = verify_bundle(bundle, allow_not_for_release=True)
    failed = {c.name: c.detail for c in report.checks if not c.ok}
    assert not report.valid and "pld/9" in failed.get("components", ""), failed


def test_seeded_run_is_not_for_release(bundle):
    report = verify_bundle(bundle)
    assert not report.valid
    assert report.reasons == ["for-release: seeded randomness: NOT FOR RELEASE"]


def test_edited_record_fails(bundle):
    lines = _lines(bundle)
    lines[2] = lines[2].replace("count", "cnt")
    (bundle / "ledger.jsonl").write_text("".join(lines))
    assert "ledger-chain" in _failed(bundle)


@pytest.mark.parametrize("tamper", ["delete", "reorder", "truncate", "duplicate"])
def test_structural_tampering_fails(bundle, tamper):
    lines = _lines(bundle)
    if tamper == "delete":
        del lines[3]
    elif tamper == "reorder":
        lines[2], lines[3] = lines[3], lines[2]
    elif tamper == "truncate":
        lines = lines[:-2]
    else:
        lines.insert(3, lines[3])
    (bundle / "ledger.jsonl").write_text("".join(lines))
    failed = _failed(bundle)
    assert failed & {"ledger-chain", "ledger-head"}, failed


def test_rechained_ledger_without_resigning_fails_head(bundle):
    records, _ = read_records(bundle / "ledger.jsonl")
    _rewrite(bundle, [r for r in records if r.type != "charge" or r.seq != 3])
    assert "ledger-head" in _failed(bundle) or "signature" in _failed(bundle)


def test_edited_certificate_fails_signature(bundle):
    cert = json.loads((bundle / "certificate.json").read_text())
    cert["claim"]["epsilon"] *= 0.5
    (bundle / "certificate.json").write_text(json.dumps(cert))
    failed = _failed(bundle)
    assert "signature" in failed and "recompose" in failed


def test_forged_lower_claim_is_caught_by_recomposition(bundle, tmp_path):
    """A forger with their own key lowers the claim by 10 % and re-signs: the recomposition still catches it."""
    _resign(bundle, tmp_path, lambda c: c["claim"].__setitem__("epsilon", c["claim"]["epsilon"] * 0.9))
    assert _failed(bundle) == {"recompose"}


def test_undercharged_event_is_caught(bundle, tmp_path):
    """A charge whose recorded noise scale is too small for its ε (re-chained and re-signed) fails."""
    records, _ = read_records(bundle / "ledger.jsonl")
    forged = []
    for r in records:
        if r.type == "charge" and r.body["event"]["kind"] == "laplace":
            event = dict(r.body["event"], scale=r.body["event"]["scale"] / 2)
            r = replace(r, body=dict(r.body, event=event))
        forged.append(r)
    _rewrite(bundle, forged)
    _resign(bundle, tmp_path)
    assert "charges" in _failed(bundle)


def test_wrong_sensitivity_is_caught(make_session, tmp_path):
    """A formula-derived sensitivity edited below its recomputed value is caught."""
    from dpaudit import from_formula

    with make_session(epsilon=1.0, neighbouring="replace_one") as s:
        s.laplace(3.0, sensitivity=from_formula("bounded_sum", "replace_one", lower=0.0, upper=5.0), epsilon=0.2)
    bundle = tmp_path / "b2"
    shutil.copytree(s.run_dir, bundle)
    records, _ = read_records(bundle / "ledger.jsonl")
    forged = []
    for r in records:
        if r.type == "charge":
            event = PrivacyEvent.from_dict(r.body["event"]).to_dict()
            event["sensitivity"] = dict(event["sensitivity"], value=1.0)
            event["scale"] = event["scale"] / 5
            r = replace(r, body=dict(r.body, event=event))
        forged.append(r)
    _rewrite(bundle, forged)
    _resign(bundle, tmp_path)
    assert "charges" in _failed(bundle)


def test_wrong_public_key_fails(bundle, tmp_path):
    other = load_or_create_key(tmp_path / "other.pem")
    (bundle / "public_key.pem").write_text(public_key_pem(other))
    assert "signature" in _failed(bundle)


def test_missing_ledger_is_a_usage_error(bundle):
    (bundle / "ledger.jsonl").unlink()
    with pytest.raises(VerificationError, match="ledger.jsonl"):
        verify_bundle(bundle)


def test_unclosed_session_is_invalid_but_its_chain_is_checked(bundle):
    """A crashed session has no certificate: the ledger chain (and its bodies) are still checked and reported."""
    (bundle / "certificate.json").unlink()
    report = verify_bundle(bundle, allow_not_for_release=True)
    assert not report.valid
    assert {c.name: c.ok for c in report.checks} == {"ledger-chain": True, "public-bodies": True,
                                                     "certificate-present": False}


def test_unknown_event_kind_fails(bundle, tmp_path):
    records, _ = read_records(bundle / "ledger.jsonl")
    forged = [replace(r, body=dict(r.body, event=dict(r.body["event"], kind="mystery"))) if r.type == "charge" else r
              for r in records]
    _rewrite(bundle, forged)
    _resign(bundle, tmp_path)
    assert "events-decode" in _failed(bundle)


# --- releases counted against their charges; no confidential key in any body ---------------------------------------


def _reasons(bundle: Path) -> list[str]:
    return verify_bundle(bundle, allow_not_for_release=True).reasons


def _forge(bundle: Path, tmp_path: Path, edit) -> list[str]:
    """Edit the records, rebuild the chain, re-sign as an insider (the store's own key): verify's reasons."""
    records, _ = read_records(bundle / "ledger.jsonl")
    _rewrite(bundle, edit(records))
    _resign(bundle, tmp_path)
    return _reasons(bundle)


def _first_release(records: list[Record]) -> Record:
    return next(r for r in records if r.type == "release")


def test_a_ledger_with_extra_releases_on_one_charge_fails_naming_it(bundle, tmp_path):
    """Attack: a hand-edited ledger (chain rebuilt, certificate re-signed) in which one Laplace charge carries 50
    releases. verify replays the coverage rules and names the charge."""
    def fifty(records: list[Record]) -> list[Record]:
        release = _first_release(records)
        at = records.index(release)
        return records[:at] + [release] * 50 + records[at + 1:]

    records, _ = read_records(bundle / "ledger.jsonl")
    charge_seq = _first_release(records).body["charge_seq"]
    reasons = _forge(bundle, tmp_path, fifty)
    (problem,) = [r for r in reasons if r.startswith("releases:")]
    assert f"charge {charge_seq}: release" in problem and "one release more" in problem
    assert problem.count("one release more") == 49


@pytest.mark.parametrize("output, reason", [([4.0, 5.0], "charge covers 1 number"), ("4.0", "charge covers 1 number"),
                                            ({"count": 4.0}, "charge covers 1 number")])
def test_a_ledger_release_of_another_dimension_fails(bundle, tmp_path, output, reason):
    def reshaped(records: list[Record]) -> list[Record]:
        release = _first_release(records)
        body = {**release.body, "output": output}
        return [replace(r, body=body) if r is release else r for r in records]

    reasons = _forge(bundle, tmp_path, reshaped)
    assert any(r.startswith("releases:") and reason in r for r in reasons), reasons


def test_a_release_without_an_earlier_charge_fails(bundle, tmp_path):
    def orphaned(records: list[Record]) -> list[Record]:
        release = _first_release(records)
        return [replace(r, body={**release.body, "charge_seq": 999}) if r is release else r for r in records]

    assert any("no earlier charge 999" in r for r in _forge(bundle, tmp_path, orphaned))


def test_a_release_against_a_composed_charge_fails(make_session, tmp_path):
    """A composition of different events has no release rule: a release forged against it is reported."""
    from dpaudit.events import ComposedEvent

    with make_session(epsilon=2.0) as s:
        both = ComposedEvent(events=(s.laplace_event(1.0, 0.1), s.laplace_event(1.0, 0.2)))
        charge = s.charge(both, plugin="test", mechanism="two laplace")
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    bundle = tmp_path / "composed"
    shutil.copytree(s.run_dir, bundle)

    def against_composed(records: list[Record]) -> list[Record]:
        release = _first_release(records)
        return [replace(r, body={**release.body, "charge_seq": charge.seq}) if r is release else r for r in records]

    reasons = _forge(bundle, tmp_path, against_composed)
    assert any(f"charge {charge.seq}: release" in r and "no release rule" in r for r in reasons), reasons


@pytest.fixture
def above_threshold_bundle(make_session, tmp_path) -> Path:
    with make_session(epsilon=2.0) as s:
        rounds = s.above_threshold_rounds(sensitivity=1.0, epsilon=0.1, max_queries=5, rounds=1, label="loop")
        at = rounds.next_round(0.0)
        at.test(-100.0)
        at.test(100.0)
    copy = tmp_path / "at-bundle"
    shutil.copytree(s.run_dir, copy)
    return copy


@pytest.mark.parametrize("extra, reason", [
    ({"round": 0, "query": 2, "above": False}, "halted"),          # an answer after the first above-threshold one
    ({"round": 1, "query": 0, "above": True}, "outside the 1"),    # a round the charge did not pay for
    ({"round": 0, "query": 2, "above": False, "score": 0.5}, "exactly"),
])
def test_above_threshold_answers_beyond_the_charge_fail(above_threshold_bundle, tmp_path, extra, reason):
    """Attack: one AboveThreshold charge answering more than its rounds and its first ⊤ allow."""
    assert verify_bundle(above_threshold_bundle, allow_not_for_release=True).valid

    def more(records: list[Record]) -> list[Record]:
        last = [r for r in records if r.type == "release"][-1]
        at = records.index(last)
        return records[:at + 1] + [replace(last, body={**last.body, "output": extra})] + records[at + 1:]

    reasons = _forge(above_threshold_bundle, tmp_path, more)
    assert any(r.startswith("releases:") and reason in r for r in reasons), reasons


@pytest.mark.parametrize("kind", ["release", "info"])
def test_a_ledger_holding_a_confidential_key_fails(make_session, tmp_path, kind):
    """Attack: a raw value under a confidential key in a release body or an info body (e.g. a ledger written
    before the session checked bodies, or edited afterwards). verify scans every body and names the path."""
    with make_session(epsilon=2.0) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2, label="count")
        s.record_info("test", {"iterations": 3})
    bundle = tmp_path / "leaky"
    shutil.copytree(s.run_dir, bundle)

    def leak(records: list[Record]) -> list[Record]:
        target = next(r for r in records if r.type == kind)
        body = {**target.body, "true_value": 4.0} if kind == "release" else {
            **target.body, "info": {"iterations": 3, "scores": [{"True_Score": 0.93}]}}
        return [replace(r, body=body) if r is target else r for r in records]

    reasons = _forge(bundle, tmp_path, leak)
    path = "true_value" if kind == "release" else "info.scores[0].True_Score"
    assert any(r.startswith("public-bodies:") and f"({kind}): {path}" in r for r in reasons), reasons


# --- key trust, run binding and the store log -------------------------------------------------------------------


def _forge_with_fresh_key(bundle: Path, tmp_path: Path) -> str:
    """The forgery of issue 8: delete a charge and its release from an exported ledger, rebuild the chain and the
    certificate with the project's own functions, sign with a freshly generated key and replace public_key.pem.
    The forger also re-points the open record at the fresh key. Returns the fresh key's fingerprint."""
    from dpaudit.certificate import build_certificate, write_certificate
    from dpaudit.signing import public_key_fingerprint

    key = load_or_create_key(tmp_path / "forger" / "fresh.pem")
    fingerprint = public_key_fingerprint(key)
    records, _ = read_records(bundle / "ledger.jsonl")
    dropped = next(r.seq for r in records if r.type == "charge" and r.body["mechanism"] == "laplace")
    kept = [r for r in records if r.seq != dropped and r.body.get("charge_seq") != dropped]
    renumber = {r.seq: i for i, r in enumerate(kept)}
    forged = []
    for r in kept:
        if r.type == "open":
            r = replace(r, body={**r.body, "signing_key_fingerprint": fingerprint})
        elif r.type == "release":
            r = replace(r, body={**r.body, "charge_seq": renumber[r.body["charge_seq"]]})
        forged.append(r)
    _rewrite(bundle, forged)
    plugins = json.loads((bundle / "certificate.json").read_text())["plugins"]
    records, _ = read_records(bundle / "ledger.jsonl")
    write_certificate(bundle, build_certificate(records, key=key, plugins=plugins, confidential_log=None), key)
    _drop_reports(bundle)
    return fingerprint


def test_forged_bundle_signed_with_a_fresh_key_is_refused_as_untrusted(bundle, tmp_path):
    """Before key pinning this forgery verified VALID with a lower claim."""
    from dpaudit.trust import KeyTrust

    honest = json.loads((bundle / "certificate.json").read_text())["claim"]["epsilon"]
    fingerprint = _forge_with_fresh_key(bundle, tmp_path)
    assert json.loads((bundle / "certificate.json").read_text())["claim"]["epsilon"] < honest
    report = verify_bundle(bundle, allow_not_for_release=True)
    (reason,) = report.reasons
    assert reason.startswith(f"signing-key: untrusted signing key {fingerprint}")
    assert report.to_dict()["signing_key"] == {"fingerprint": fingerprint, "trusted": False, "trusted_by": None,
                                               "name": None, "accepted_unpinned": False}
    accepted = verify_bundle(bundle, allow_not_for_release=True, trust=KeyTrust.default(accept_bundle_key=True))
    assert accepted.valid and accepted.signing_key.accepted_unpinned and not accepted.signing_key.trusted
    (detail,) = [c.detail for c in accepted.checks if c.name == "signing-key"]
    assert "NOT PINNED" in detail


def test_a_key_pinned_by_fingerprint_is_trusted(bundle, tmp_path):
    """An honest bundle from another machine verifies once its key is pinned (here the local store is elsewhere)."""
    from dpaudit.trust import BY_PINNED, KeyTrust

    fingerprint = json.loads((bundle / "certificate.json").read_text())["public_key_fingerprint"]
    elsewhere = tmp_path / "auditor-store"
    assert "signing-key" in {c.name for c in verify_bundle(bundle, allow_not_for_release=True,
                                                           trust=KeyTrust.default(elsewhere)).checks if not c.ok}
    report = verify_bundle(bundle, allow_not_for_release=True,
                           trust=KeyTrust.default(elsewhere, trusted_keys=(fingerprint,)))
    assert report.valid and report.signing_key.trusted_by == BY_PINNED


def test_honest_local_run_is_bound_and_logged(make_session):
    from dpaudit.trust import BY_LOCAL_STORE

    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    assert report.signing_key.trusted_by == BY_LOCAL_STORE
    details = {c.name: c.detail for c in report.checks}
    assert s.run_id in details["run-binding"] and details["transparency-log"].startswith("entry 0 of the store log")


@pytest.fixture
def two_runs(make_session):
    runs = []
    for name in ("a", "b"):
        with make_session(name=name) as s:
            s.laplace(1.0, sensitivity=1.0, epsilon=0.1 if name == "a" else 0.3)
        runs.append(s.run_dir)
    return runs


def test_a_run_copied_under_another_runs_id_fails(two_runs):
    """Attack: run b's files copied into run a's folder (e.g. to replace a costlier run); each file is genuine."""
    a, b = two_runs
    for f in b.iterdir():
        shutil.copy2(f, a / f.name)
    reasons = verify_bundle(a, allow_not_for_release=True).reasons
    assert any(r.startswith("run-binding:") and f"folder {a.name}" in r and b.name in r for r in reasons), reasons
    assert any(r.startswith("transparency-log:") and "swapped or replayed" in r for r in reasons), reasons


def test_a_certificate_replayed_from_another_run_fails(two_runs):
    a, b = two_runs
    shutil.copy2(b / "certificate.json", a / "certificate.json")
    failed = {c.name for c in verify_bundle(a, allow_not_for_release=True).checks if not c.ok}
    assert {"ledger-head", "run-binding", "transparency-log"} <= failed


def test_a_run_moved_into_another_store_fails(make_session, tmp_path):
    """Attack: a genuine run of this store planted in another store (same key, same run id)."""
    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    with make_session(store=tmp_path / "other-store", signing_key=s._key_path) as other:
        other.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    planted = tmp_path / "other-store" / s.run_id
    shutil.copytree(s.run_dir, planted)
    reasons = verify_bundle(planted, allow_not_for_release=True).reasons
    assert any(r.startswith("run-binding:") and "moved or replayed from another store" in r for r in reasons)
    assert any(r.startswith("transparency-log:") and "is not in the store's transparency log" in r for r in reasons)


def test_records_appended_after_close_fail(make_session):
    """The certificate names the ledger's head and record count, so a well-chained record appended later fails."""
    from dpaudit.ledger import Ledger

    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    ledger = Ledger.open(s.ledger_path)
    ledger.append("release", {"charge_seq": 1, "plugin": "session", "mechanism": "laplace", "label": "",
                              "output": 2.0})
    ledger.close()
    failed = {c.name for c in verify_bundle(s.run_dir, allow_not_for_release=True).checks if not c.ok}
    assert "ledger-head" in failed and "ledger-chain" not in failed


def test_log_head_resigned_by_an_outsider_fails(make_session, tmp_path):
    """Attack: the run's entry removed from the store log and the head re-signed with the attacker's key."""
    from dpaudit import transparency

    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    root = s.run_dir.parent
    (root / "transparency" / "log.jsonl").write_text("")
    head = transparency.TreeHead.signed(s.store_id, [], load_or_create_key(tmp_path / "outsider.pem"))
    (root / "transparency" / "head.json").write_text(json.dumps(head.to_dict()))
    (problem,) = [r for r in verify_bundle(s.run_dir, allow_not_for_release=True).reasons
                  if r.startswith("transparency-log:")]
    assert "not in the store's transparency log" in problem and f"untrusted key {head.key_fingerprint}" in problem


def _as_legacy(bundle: Path) -> None:
    """Rewrite a bundle the way version 1 made it: no run binding in the open record or the certificate."""
    records, _ = read_records(bundle / "ledger.jsonl")
    unbound = ("run_id", "store_id", "signing_key_fingerprint")
    _rewrite(bundle, [replace(r, body={k: v for k, v in r.body.items() if k not in unbound}) if r.type == "open"
                      else r for r in records])

    def legacy(cert: dict) -> None:
        cert["format"] = "dpaudit-certificate/1"
        cert["run"] = {k: v for k, v in cert["run"].items() if k not in ("id", "store_id")}

    _resign(bundle, bundle, legacy)


def test_a_legacy_certificate_still_verifies_but_is_reported_unbound(bundle):
    _as_legacy(bundle)
    report = verify_bundle(bundle, allow_not_for_release=True)
    assert report.valid, report.reasons
    (detail,) = [c.detail for c in report.checks if c.name == "run-binding"]
    assert "UNBOUND legacy certificate" in detail


def test_a_downgraded_certificate_fails(bundle, tmp_path):
    """Attack: a new ledger (its open record names the run) under a version-1 certificate that binds nothing."""
    _resign(bundle, tmp_path, lambda c: c.__setitem__("format", "dpaudit-certificate/1"))
    reasons = verify_bundle(bundle, allow_not_for_release=True).reasons
    assert any(r.startswith("run-binding:") and "downgraded" in r for r in reasons), reasons


def test_a_randomized_response_run_verifies_and_a_forged_bit_fails(make_session, tmp_path):
    """The new mechanism goes through verify with no verify-specific code: its charge is re-checked by its privacy
    map, its release by its coverage rule (one bit, the index 0 or 1). Attacks: the release edited to 2 or to a
    boolean, and a second release on the one charge (chain rebuilt, certificate re-signed)."""
    with make_session(epsilon=1.0) as s:
        reported = s.randomized_response(True, 0.5, label="smoker")
    assert isinstance(reported, bool)
    clean = tmp_path / "rr"
    shutil.copytree(s.run_dir, clean)
    assert verify_bundle(clean, allow_not_for_release=True).valid
    for name, edit, reason in [
        ("two", lambda rel: [replace(rel, body={**rel.body, "output": 2})], "not an index in [0, 2)"),
        ("bool", lambda rel: [replace(rel, body={**rel.body, "output": True})], "not an index in [0, 2)"),
        ("twice", lambda rel: [rel, rel], "one release more"),
    ]:
        forged = tmp_path / name
        shutil.copytree(clean, forged)

        def edited(records: list[Record], edit=edit) -> list[Record]:
            release = _first_release(records)
            at = records.index(release)
            return records[:at] + edit(release) + records[at + 1:]

        reasons = _forge(forged, tmp_path, edited)
        assert any(r.startswith("releases:") and reason in r for r in reasons), (name, reasons)


def test_a_charge_with_a_malformed_imputation_rule_fails_naming_it(bundle, tmp_path):
    """Attack: a charge record's imputation rule (issue 17.4) edited to impute NaN outside its own clamp, chain
    rebuilt and certificate re-signed: the charge parser refuses the rule and verify names it."""
    def edited(records: list[Record]) -> list[Record]:
        charge = next(r for r in records if r.type == "charge")
        body = {**charge.body, "imputation": {"nan": 5.0, "clamp": [-1.0, 1.0]}}
        return [replace(r, body=body) if r is charge else r for r in records]

    reasons = _forge(bundle, tmp_path, edited)
    assert any("imputation" in r and "lower <= nan <= upper" in r for r in reasons), reasons


# --- equal charges are decoded and checked once (10^5 records): a forged copy still fails on its own ---------------


@pytest.fixture
def twin_bundle(make_session, tmp_path) -> Path:
    """Three identical Laplace charges, each with its release."""
    with make_session(epsilon=2.0, delta=1e-6) as s:
        for _ in range(3):
            s.laplace(4.0, sensitivity=1.0, epsilon=0.2, label="count")
    copy = tmp_path / "twins"
    shutil.copytree(s.run_dir, copy)
    return copy


def _edit_charge(number: int, edit):
    """A ledger edit applying ``edit`` to the event of the ``number``-th charge (0-based) only."""
    def edited(records: list[Record]) -> list[Record]:
        charge = [r for r in records if r.type == "charge"][number]
        body = {**charge.body, "event": edit(dict(charge.body["event"]))}
        return [replace(r, body=body) if r is charge else r for r in records]
    return edited


def test_equal_charges_verify(twin_bundle):
    assert verify_bundle(twin_bundle, allow_not_for_release=True).valid


@pytest.mark.parametrize("value", [True, 1.0])
def test_a_charge_equal_to_its_twins_only_up_to_a_type_fails(twin_bundle, tmp_path, value):
    """Attack: the last of three equal charges names its dimension as ``true`` / ``1.0`` (equal to 1 under Python's
    ==): decoded on its own, it is refused, although its twins decoded first."""
    reasons = _forge(twin_bundle, tmp_path, _edit_charge(2, lambda e: {**e, "dimension": value}))
    assert any(r.startswith("events-decode:") and "whole number" in r for r in reasons), reasons


def test_an_undercharged_twin_is_named_alone(twin_bundle, tmp_path):
    """Attack: one of three equal charges gets half the noise: that charge, and only it, is reported."""
    records, _ = read_records(twin_bundle / "ledger.jsonl")
    seqs = [r.seq for r in records if r.type == "charge"]
    reasons = _forge(twin_bundle, tmp_path, _edit_charge(1, lambda e: {**e, "scale": e["scale"] / 2}))
    charges = next(r for r in reasons if r.startswith("charges:"))
    assert f"charge {seqs[1]}:" in charges
    assert f"charge {seqs[0]}:" not in charges and f"charge {seqs[2]}:" not in charges


def test_a_confidential_key_in_one_of_equal_charges_is_named(twin_bundle, tmp_path):
    """Attack: a raw value hidden in the event of the last of three equal charges (whose twins were found clean)."""
    records, _ = read_records(twin_bundle / "ledger.jsonl")
    last = [r.seq for r in records if r.type == "charge"][2]
    reasons = _forge(twin_bundle, tmp_path, _edit_charge(
        2, lambda e: {**e, "sensitivity": {**e["sensitivity"], "inputs": {"raw_values": [1, 2]}}}))
    assert any(r.startswith("public-bodies:") and f"record {last} (charge): event.sensitivity.inputs.raw_values" in r
               for r in reasons), reasons


def test_a_second_release_on_one_of_equal_charges_is_named(twin_bundle, tmp_path):
    """Attack: of three equal charges (one decoded event, so one fresh coverage state shared by all three), the
    second charge's release is pointed at the first: the first is over its coverage and named, the others are not,
    and the second charge is left unreleased (a state used by one charge never leaks into its twin)."""
    records, _ = read_records(twin_bundle / "ledger.jsonl")
    charges = [r.seq for r in records if r.type == "charge"]
    second = [r.seq for r in records if r.type == "release"][1]

    def repointed(rs: list[Record]) -> list[Record]:
        return [replace(r, body={**r.body, "charge_seq": charges[0]}) if r.seq == second else r for r in rs]

    reasons = _forge(twin_bundle, tmp_path, repointed)
    (problem,) = [r for r in reasons if r.startswith("releases:")]
    assert f"charge {charges[0]}: release" in problem and "one release more" in problem
    assert problem.count("one release more") == 1 and f"charge {charges[2]}" not in problem
