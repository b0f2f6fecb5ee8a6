"""Large released arrays in sidecar files: round trip, verify catches an edited, swapped or missing file, export."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from dpaudit.errors import LedgerError, UncoveredRelease
from dpaudit.ledger import read_records
from dpaudit.records import ReleaseBody
from dpaudit.runs import export_bundle
from dpaudit.sidecar import MIN_SIDECAR_NUMBERS, OUTPUTS_DIR, ArrayFile, check_array_file, write_array
from dpaudit.verify import verify_bundle

N = MIN_SIDECAR_NUMBERS + 4  # even: released as a 2 x N/2 array


def _failed(bundle: Path) -> dict[str, str]:
    report = verify_bundle(bundle, allow_not_for_release=True)
    return {c.name: c.detail for c in report.checks if not c.ok}


@pytest.fixture
def run(make_session, tmp_path) -> tuple[Path, np.ndarray]:
    with make_session(epsilon=2.0, delta=1e-6) as s:
        out = s.laplace(np.linspace(-1, 1, N).reshape(2, -1), sensitivity=1.0, epsilon=0.5, label="histogram")
        s.laplace(1.0, sensitivity=1.0, epsilon=0.5, label="small")
    return s.run_dir, out


def _release_bodies(run_dir: Path) -> list[ReleaseBody]:
    records, _ = read_records(run_dir / "ledger.jsonl")
    return [ReleaseBody.from_dict(r.body) for r in records if r.type == "release"]


def test_a_large_release_is_stored_beside_the_ledger_and_round_trips(run) -> None:
    run_dir, out = run
    big, small = _release_bodies(run_dir)
    assert big.output is None and big.output_file is not None
    assert big.output_file.shape == out.shape and big.output_file.dtype == "<f8"
    assert np.array_equal(np.load(run_dir / big.output_file.path), out)
    assert small.output_file is None and isinstance(small.output, float)
    assert "output_file" not in json.loads((run_dir / "ledger.jsonl").read_text().splitlines()[-2])["body"]
    assert not [p for p in (run_dir / OUTPUTS_DIR).iterdir() if p.name.startswith(".")]  # no temporaries
    assert _failed(run_dir) == {}


def test_verify_fails_on_an_edited_sidecar(run, tmp_path) -> None:
    run_dir, out = run
    path = run_dir / _release_bodies(run_dir)[0].output_file.path
    edited = out.copy()
    edited.flat[7] += 1.0
    os.chmod(path, 0o644)
    np.save(path, edited)
    assert "releases" in _failed(run_dir) and "SHA-256" in _failed(run_dir)["releases"]


def test_verify_fails_on_a_missing_or_symlinked_sidecar(run, tmp_path) -> None:
    run_dir, _ = run
    path = run_dir / _release_bodies(run_dir)[0].output_file.path
    moved = tmp_path / "elsewhere.npy"
    shutil.move(path, moved)
    assert "releases" in _failed(run_dir)
    os.symlink(moved, path)
    assert "symbolic link" in _failed(run_dir)["releases"]


def test_a_sidecar_with_the_right_hash_but_another_shape_is_refused(tmp_path) -> None:
    array = np.zeros((2, 3))
    ref = write_array(tmp_path, array)
    assert check_array_file(tmp_path, ref) is None
    liar = ArrayFile(path=ref.path, sha256=ref.sha256, dtype=ref.dtype, shape=(6,))
    assert "shape" in check_array_file(tmp_path, liar)
    nan = write_array(tmp_path, np.array([1.0, np.nan]))
    assert "NaN" in check_array_file(tmp_path, nan)


def test_coverage_counts_the_sidecar_numbers_against_the_charged_dimension(make_session) -> None:
    with make_session(epsilon=2.0, delta=1e-6) as s:
        event = s.laplace_event(1.0, 0.5, dimension=N + 1)
        charge = s.charge(event, plugin="session", mechanism="laplace")
        with pytest.raises(UncoveredRelease, match="number"):
            s.record_release(charge, np.zeros(N))
        assert not (s.run_dir / OUTPUTS_DIR).exists()  # refused before anything was written
        s.record_release(charge, np.zeros(N + 1))


def test_a_release_record_naming_a_path_outside_outputs_is_refused() -> None:
    body = {"charge_seq": 1, "plugin": "p", "mechanism": "laplace", "label": "", "output": None,
            "output_file": {"path": "../../etc/passwd", "sha256": "0" * 64, "dtype": "<f8", "shape": [1]}}
    with pytest.raises(LedgerError, match="sha256"):
        ReleaseBody.from_dict(body)


def test_export_copies_the_sidecar_and_the_exported_bundle_verifies(run, tmp_path) -> None:
    run_dir, _ = run
    written = export_bundle(run_dir, tmp_path / "export")
    ref = _release_bodies(run_dir)[0].output_file
    assert tmp_path / "export" / ref.path in written
    assert _failed(tmp_path / "export") == {}


def test_a_run_fetched_from_mlflow_carries_its_sidecar_and_verifies(make_session, tmp_path) -> None:
    from dpaudit.runs import resolve_run

    s = make_session(mirror=True, name="remote")
    s.laplace(np.zeros(N), sensitivity=1.0, epsilon=0.5)
    s.close()
    folder = resolve_run(s.run_id, store=tmp_path / "elsewhere")
    assert folder != s.run_dir
    assert [p.name for p in (folder / OUTPUTS_DIR).iterdir()] == [p.name for p in (s.run_dir / OUTPUTS_DIR).iterdir()]
    assert _failed(folder) == {}
