"""Bundles closed by earlier dpaudit versions must keep verifying: ``verify`` re-renders the reports and recomputes
the claim with the accountant version the certificate names, so a change of wording or of the current fold must not
turn an honest old bundle INVALID (reviewer R1, stop 22: a new report line did exactly that).

Each fixture under ``tests/fixtures/frozen_runs/`` is a run folder as a commit of the project wrote it, named
``<what>-<commit>``; its keys are not shipped, its fingerprint is pinned here.

* ``pld3-a6d4562``: seeded session (ε_B = 3, δ_B = 1e-6, accountant ``pld`` at fold ``pld/3``), five Laplace counts
  released and forty DP-SGD step charges never released.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dpaudit.trust import KeyTrust
from dpaudit.verify import verify_bundle

FROZEN = Path(__file__).resolve().parents[1] / "fixtures" / "frozen_runs"
FINGERPRINTS = {"pld3-a6d4562": "1d739fc40a2654bf124485f753d7cc6fdc6b44cbd458a200d615c57107a411b8"}


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
