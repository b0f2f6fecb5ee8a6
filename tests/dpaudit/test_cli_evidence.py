"""Hostile evidence through ``dpaudit verify`` / ``report`` / ``export``: edited reports, malformed JSON, links,
devices, huge files and escaping run ids each end in exit 1 (invalid evidence) or 2 (bad input) with a one-line
reason, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import main


@pytest.fixture
def evidence(make_session, tmp_path) -> Path:
    """An honest run exported as an auditor receives it (report.md and report.json included)."""
    with make_session(epsilon=1.0, delta=1e-6) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.25, label="count")
        s.exponential([1.0, 2.0], sensitivity=1.0, epsilon=0.125, label="pick")
    bundle = tmp_path / "evidence"
    assert _cli("export", str(s.run_dir), str(bundle)).exit_code == 0
    return bundle


def _cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result


def _verify(bundle: Path, expected_exit: int, *needles: str) -> str:
    result = _cli("verify", str(bundle), "--allow-not-for-release")
    assert result.exit_code == expected_exit, result.output
    for needle in needles:
        assert needle in result.output, result.output
    return result.output


def test_an_honest_bundle_has_its_reports_checked(evidence):
    _verify(evidence, 0, "[ok] reports: report.md, report.json identical to the reports regenerated")


def test_a_bundle_without_reports_verifies(evidence):
    (evidence / "report.md").unlink()
    (evidence / "report.json").unlink()
    _verify(evidence, 0, "[ok] reports: the bundle carries no report files")


def test_an_edited_number_in_report_md_fails_naming_the_file(evidence):
    """Before: reports were outside every check, and this edit verified VALID (exit 0)."""
    md = evidence / "report.md"
    text = md.read_text()
    assert "ε = 1," in text
    md.write_text(text.replace("ε = 1,", "ε = 0.1,", 1))
    _verify(evidence, 1, "[FAIL] reports: report.md differs from the report regenerated")


def test_an_edited_number_in_report_json_fails_naming_the_file(evidence):
    path = evidence / "report.json"
    report = json.loads(path.read_text())
    report["certificate"]["claim"]["epsilon"] /= 10
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    _verify(evidence, 1, "[FAIL] reports: report.json differs")


@pytest.mark.parametrize("run_dir", ["/elsewhere/another-run", "x" * 5000, 7])
def test_report_json_must_name_a_folder_of_its_own_run(evidence, run_dir):
    path = evidence / "report.json"
    report = json.loads(path.read_text())
    report["run"]["run_dir"] = run_dir
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    _verify(evidence, 1, "[FAIL] reports: report.json")


def test_report_json_naming_a_folder_with_a_lone_surrogate_is_a_failed_check_not_a_crash(evidence):
    """A run folder spelled "\\ud800" (valid JSON, no UTF-8 encoding) ended verify with a UnicodeEncodeError
    (exit 2, "cannot handle this input"); it is an invalid report (exit 1)."""
    path = evidence / "report.json"
    text = path.read_text(encoding="utf-8")
    old = json.loads(text)["run"]["run_dir"]
    path.write_text(text.replace(json.dumps(old), json.dumps("/\ud800/" + Path(old).name), 1), encoding="utf-8")
    assert "\\ud800" in path.read_text(encoding="utf-8")
    _verify(evidence, 1, "[FAIL] reports: report.json")


def test_report_json_may_name_any_folder_of_its_run_spelled_as_the_renderer_spells_it(evidence):
    """The folder named in report.json is the one part taken from the file (verify renders the report once, with a
    placeholder there): quotes, backslashes and non-ASCII in it must be spelled as the renderer spells strings."""
    path = evidence / "report.json"
    text = path.read_text(encoding="utf-8")
    old = json.loads(text)["run"]["run_dir"]
    new = str(Path('/tmp/é "q" \\ \u2028') / Path(old).name)
    exits = []
    for ascii_only in (False, True):
        path.write_text(text.replace(json.dumps(old), json.dumps(new, ensure_ascii=ascii_only), 1), encoding="utf-8")
        exits.append(_cli("verify", str(evidence), "--allow-not-for-release").exit_code)
    assert sorted(exits) == [0, 1]  # the renderer's spelling verifies; the other, same JSON, is a byte difference


def test_a_symlinked_report_is_refused(evidence):
    (evidence / "report.md").unlink()
    (evidence / "report.md").symlink_to("/etc/passwd")
    _verify(evidence, 1, "report.md is a symbolic link")


def _edit_certificate(bundle: Path, text: str) -> None:
    path = bundle / "certificate.json"
    path.unlink()
    path.write_text(text)


def test_a_duplicate_key_in_the_certificate_is_invalid_evidence(evidence):
    """Before: the second "claim" silently won (two parsers, two values)."""
    text = (evidence / "certificate.json").read_text()
    _edit_certificate(evidence, text.replace('"claim":', '"claim":{"epsilon":0.001},"claim":', 1))
    _verify(evidence, 1, "[FAIL] evidence-files", "duplicate key 'claim'")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e400"])
def test_a_non_finite_claim_is_invalid_evidence(evidence, number):
    cert = json.loads((evidence / "certificate.json").read_text())
    text = json.dumps(cert).replace(json.dumps(cert["claim"]["epsilon"]), number, 1)
    assert number in text
    _edit_certificate(evidence, text)
    _verify(evidence, 1, "[FAIL] evidence-files", f"non-finite number {number}")


def test_a_deeply_nested_certificate_is_invalid_evidence(evidence):
    """Before: RecursionError (a traceback)."""
    _edit_certificate(evidence, '{"claim":' + "[" * 100_000 + "]" * 100_000 + "}")
    _verify(evidence, 1, "[FAIL] evidence-files", "nested deeper than 64 levels")


@pytest.mark.parametrize("target", ["/etc/passwd", "/dev/zero"])
def test_a_symlinked_certificate_is_not_followed(evidence, target):
    """Before: /etc/passwd was read (and /dev/zero read until memory ran out)."""
    (evidence / "certificate.json").unlink()
    (evidence / "certificate.json").symlink_to(target)
    _verify(evidence, 1, "[FAIL] evidence-files", "certificate.json is a symbolic link")


def test_a_fifo_certificate_is_refused_without_hanging(evidence):
    (evidence / "certificate.json").unlink()
    os.mkfifo(evidence / "certificate.json")
    _verify(evidence, 1, "[FAIL] evidence-files", "not a regular file")


def test_a_1gb_sparse_certificate_is_refused_without_reading_it(evidence):
    with open(evidence / "certificate.json", "r+b") as f:
        f.truncate(2**30)  # sparse: no real disk, and only the first 16 MiB + 1 byte are ever read
    _verify(evidence, 1, "[FAIL] evidence-files", "larger than the 16777216-byte limit")


@pytest.mark.parametrize("name", ["ledger.jsonl", "public_key.pem"])
def test_other_symlinked_bundle_files_are_refused(evidence, name):
    target = evidence.parent / f"real-{name}"
    (evidence / name).rename(target)
    (evidence / name).symlink_to(target)
    _verify(evidence, 1, "[FAIL] evidence-files", f"{name} is a symbolic link")


@pytest.mark.parametrize("command", ["verify", "report", "export"])
@pytest.mark.parametrize("run", ["../x", "a/b", "..", "a\x00b", "x" * 129, "-", ".hidden", "a..b"])
def test_bad_run_ids_are_usage_errors(tmp_path, monkeypatch, command, run):
    """Before: the id was joined to the store root as is, and `../x` read outside the store."""
    monkeypatch.chdir(tmp_path)
    args = [command, run] + ([str(tmp_path / "out")] if command == "export" else [])
    result = _cli(*args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "out").exists()


def test_a_store_folder_linking_outside_the_store_is_refused(make_session, tmp_path):
    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    outside = tmp_path / "outside"
    s.run_dir.rename(outside)
    s.run_dir.symlink_to(outside)
    result = _cli("verify", s.run_id, "--allow-not-for-release")
    assert result.exit_code == 2 and "resolves outside the store" in result.output


def test_export_refuses_a_symlinked_file_in_the_run_folder(make_session, tmp_path):
    with make_session() as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    (s.run_dir / "report.md").unlink()
    (s.run_dir / "report.md").symlink_to("/etc/passwd")
    result = _cli("export", s.run_id, str(tmp_path / "out"))
    assert result.exit_code == 2 and "report.md is a symbolic link" in result.output
    assert not (tmp_path / "out" / "report.md").exists()
