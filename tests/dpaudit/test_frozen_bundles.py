"""Bundles closed by earlier dpaudit versions must keep verifying: ``verify`` re-renders the reports and recomputes
the claim with the accountant version the certificate names, so a change of wording or of the current fold must not
turn an honest old bundle INVALID (reviewer R1, stop 22: a new report line did exactly that).

Each fixture under ``tests/fixtures/frozen_runs/`` is a run folder as a commit of the project wrote it, named
``<what>-<commit>``; its keys are not shipped, its fingerprint is pinned here.

* ``pld3-a6d4562``: seeded session (ε_B = 3, δ_B = 1e-6, accountant ``pld`` at fold ``pld/3``), five Laplace counts
  released and forty DP-SGD step charges never released.
* ``<plugin>-1adcdcc``: every plugin's smoke run as ``dpaudit run PLUGIN --epsilon 20 --delta 1e-5 --seed 1`` wrote it
  (``dp-gp`` with ``--neighbouring replace_one``; ``dp-gp-refused`` without it, closed REFUSED), and three audits:
  ``audit mechanism gaussian --epsilon 1 --delta 1e-5 --canaries 1000 --seed 1``, ``audit mechanism laplace
  --epsilon 1 --canaries 500 --seed 2`` and ``audit dpsgd --epsilon 4 --seed 1`` (white-box canaries, 5,000 of them):
  the plugins' own records, the audit evidence verify recomputes, the NIST fields and each report section.
  One store wrote them all, so one key signed them. ``audit-dpsgd`` carries the in-toto envelope and
  ``audit-laplace`` the PROV document that ``dpaudit export --format in-toto|prov`` of 1adcdcc wrote.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dpaudit.trust import KeyTrust
from dpaudit.verify import verify_bundle

FROZEN = Path(__file__).resolve().parents[1] / "fixtures" / "frozen_runs"
STORE_1ADCDCC = "34a0cc0babf9c038374ca4efcc91ee6d41f9d8ed1333d19e233b14760dfe4e57"
FINGERPRINTS = {
    "pld3-a6d4562": "1d739fc40a2654bf124485f753d7cc6fdc6b44cbd458a200d615c57107a411b8",
    **{f"{name}-1adcdcc": STORE_1ADCDCC for name in (
        "opacus-training", "naive", "randtune", "constant-overhead", "kusner-bo", "dp-gp", "dp-gp-refused", "dpareto",
        "audit-gaussian", "audit-laplace", "audit-dpsgd")},
}


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_an_old_bundle_still_verifies(tmp_path: Path, name: str) -> None:
    bundle = shutil.copytree(FROZEN / name, tmp_path / name)
    report = verify_bundle(bundle, allow_not_for_release=True,
                           trust=KeyTrust.default(tmp_path / "no-store", trusted_keys=(FINGERPRINTS[name],)))
    assert report.valid, report.reasons


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_an_edited_old_report_is_still_caught(tmp_path: Path, name: str) -> None:
    bundle = shutil.copytree(FROZEN / name, tmp_path / name)
    report_md = bundle / "report.md"
    report_md.write_text(report_md.read_text(encoding="utf-8") + "\nReviewed and approved.\n", encoding="utf-8")
    report = verify_bundle(bundle, allow_not_for_release=True,
                           trust=KeyTrust.default(tmp_path / "no-store", trusted_keys=(FINGERPRINTS[name],)))
    assert not report.valid
    assert any("report.md" in reason for reason in report.reasons)


@pytest.mark.parametrize(("name", "check"), [("audit-dpsgd-1adcdcc", "in-toto"), ("audit-laplace-1adcdcc", "prov")])
def test_an_old_export_still_verifies_and_a_flipped_byte_is_caught(tmp_path: Path, name: str, check: str) -> None:
    bundle = shutil.copytree(FROZEN / name, tmp_path / name)
    trust = KeyTrust.default(tmp_path / "no-store", trusted_keys=(FINGERPRINTS[name],))
    report = verify_bundle(bundle, allow_not_for_release=True, trust=trust)
    assert report.valid and any(c.name == check and c.ok for c in report.checks), report.reasons
    exported = bundle / ("certificate.intoto.json" if check == "in-toto" else "ledger.prov.json")
    data = bytearray(exported.read_bytes())
    data[len(data) // 2] ^= 0x01
    exported.write_bytes(bytes(data))
    report = verify_bundle(bundle, allow_not_for_release=True, trust=trust)
    assert not report.valid and any(c.name == check and not c.ok for c in report.checks)
