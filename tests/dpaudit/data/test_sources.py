"""The user's own data through the session: each source kind round-trips, undeclared names are refused, bad input is
refused before anything is written, every access is recorded and every later charge names the protected sets its
plugin touched."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dpaudit import store as run_store
from dpaudit.data import DataSource, arrays, as_torch, csv, parquet, torch_dataset
from dpaudit.data.catalog import TRAIN_NAME
from dpaudit.errors import InvalidParameter
from dpaudit.ledger import read_records
from dpaudit.verify import verify_bundle

FRAME = pd.DataFrame({"patient": [10, 11, 12, 15], "age": [30.0, 40.5, 50.0, 61.0], "dose": [1, 2, 3, 4],
                      "outcome": [0, 1, 1, 0]})


def _records(session, kind: str) -> list[dict]:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r.body for r in records if r.type == kind]


def _ledgers() -> list[Path]:
    return list(Path(os.environ["DPAUDIT_HOME"]).rglob(run_store.LEDGER))


def _write(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False) if path.suffix == ".csv" else frame.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("make, suffix", [(csv, ".csv"), (parquet, ".parquet")])
def test_a_file_round_trips_with_its_declared_columns(make_session, tmp_path, make, suffix):
    path = _write(FRAME, tmp_path / f"clinic{suffix}")
    source = make("clinic", path, target="outcome", id_column="patient", classes=2)
    s = make_session(data=[source])
    assert s.protected == ("clinic",) and s.public == ()
    data = s.data("clinic")
    assert data.feature_names == ("age", "dose") and data.classes == 2
    np.testing.assert_array_equal(data.X, FRAME[["age", "dose"]].to_numpy(np.float32))
    np.testing.assert_array_equal(data.y, [0, 1, 1, 0])
    np.testing.assert_array_equal(data.record_ids, [10, 11, 12, 15])
    assert data.X.dtype == np.float32 and not data.X.flags.writeable
    s.close()


def test_row_order_ids_and_explicit_features_and_no_target(make_session, tmp_path):
    path = _write(FRAME, tmp_path / "clinic.csv")
    s = make_session(data=[csv("ages", path, features=["age"], role="public")], protected=(TRAIN_NAME,))
    data = s.data("ages")
    assert s.public == ("ages",) and s.protected == (TRAIN_NAME,)
    assert data.y is None and len(data) == 4 and data.X.shape == (4, 1)
    np.testing.assert_array_equal(data.record_ids, np.arange(4))
    (X,) = data.tensors()
    assert X.dtype == torch.float32 and X.shape == (4, 1)
    s.close()


def test_arrays_and_a_torch_dataset_round_trip_and_feed_a_loader(make_session):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(6, 1, 2, 2)), np.array([0, 2, 1, 2, 0, 1])
    images = torch.utils.data.TensorDataset(torch.from_numpy(X).float(), torch.from_numpy(y))
    s = make_session(data=[arrays("grid", X.reshape(6, 4), y, record_ids=[5, 4, 3, 2, 1, 0], classes=3),
                           torch_dataset("images", images, role="public", classes=3)])
    grid, loaded = s.data("grid"), s.data("images")
    np.testing.assert_allclose(grid.X, X.reshape(6, 4).astype(np.float32))
    np.testing.assert_array_equal(grid.record_ids, [5, 4, 3, 2, 1, 0])
    assert loaded.X.shape == (6, 1, 2, 2) and loaded.feature_names == ()
    features, labels = next(iter(torch.utils.data.DataLoader(as_torch(loaded), batch_size=6)))
    assert features.dtype == torch.float32 and labels.dtype == torch.int64
    torch.testing.assert_close(features, torch.from_numpy(X).float())
    assert labels.tolist() == y.tolist()
    s.close()


def test_an_undeclared_name_is_refused_and_a_source_takes_no_parameters(make_session):
    s = make_session(data=[arrays("grid", np.ones((3, 2)), np.zeros(3))])
    with pytest.raises(InvalidParameter, match="not declared by this session"):
        s.data("other-grid")
    with pytest.raises(InvalidParameter, match="takes no parameters"):
        s.data("grid", rows=2)
    assert _records(s, "info") == []
    s.close()


def _bad_sources(tmp_path: Path) -> list[tuple[DataSource, str]]:
    text = FRAME.assign(dose=["a", "b", "c", "d"])
    holes = FRAME.assign(age=[30.0, np.nan, 50.0, 61.0])
    twice = FRAME.assign(patient=[1, 1, 2, 3])
    return [
        (csv("x", tmp_path / "missing.csv", target="outcome"), "no file"),
        (csv("x", _write(FRAME, tmp_path / "a.csv"), target="death"), "no column 'death'"),
        (parquet("x", _write(FRAME, tmp_path / "a.parquet"), features=["age", "weight"]), "no column 'weight'"),
        (csv("x", _write(text, tmp_path / "text.csv"), target="outcome"), "column 'dose' is not numeric"),
        (parquet("x", _write(holes, tmp_path / "holes.parquet"), target="outcome"), "NaN"),
        (csv("x", _write(twice, tmp_path / "twice.csv"), id_column="patient"), "distinct"),
        (csv("x", _write(FRAME, tmp_path / "b.csv"), target="dose", classes=3), "labels must be the integers"),
        (csv("x", _write(FRAME, tmp_path / "c.csv"), target="outcome", features=["outcome"]), "features must"),
        (arrays("x", np.ones((3, 2)), np.array([1.0, np.inf, 0.0])), "NaN or infinite"),
        (arrays("x", np.ones((3, 2)), np.ones(4)), "shape"),
        (arrays(TRAIN_NAME, np.ones((3, 2))), "name of a catalog data set"),
        (torch_dataset("x", [(np.ones(2), 1), np.ones(2)]), "all be"),
    ]


def test_bad_input_is_refused_before_anything_is_written(make_session, tmp_path):
    """Attack: a source that cannot be read as declared. The session must refuse it at open, with one line naming
    the problem, and leave no ledger behind (nothing is charged, nothing is recorded)."""
    for source, message in _bad_sources(tmp_path):
        with pytest.raises(InvalidParameter, match=message) as caught:
            make_session(data=[source])
        assert "\n" not in str(caught.value)
    assert _ledgers() == []


def test_conflicting_declarations_are_refused(make_session):
    grid = arrays("grid", np.ones((3, 2)))
    with pytest.raises(InvalidParameter, match="given twice"):
        make_session(data=[grid, grid])
    with pytest.raises(InvalidParameter, match="also declares it public"):
        make_session(data=[grid], public=("grid",))
    with pytest.raises(InvalidParameter, match="role must be"):
        arrays("grid", np.ones((3, 2)), role="private")
    with pytest.raises(InvalidParameter, match="DataSource descriptions"):
        make_session(data=["grid.csv"])
    assert _ledgers() == []


def test_accesses_are_recorded_and_charges_name_the_protected_sets_touched(make_session, tmp_path):
    """Each access is an info record with the source's description (never the data; a row count for the public set
    only); each later charge of the accessing plugin names the protected sets it had read, and no others."""
    path = _write(FRAME, tmp_path / "clinic.csv")
    s = make_session(data=[csv("clinic", path, target="outcome", id_column="patient"),
                           arrays("reference", np.ones((5, 2)), np.zeros(5), role="public")])
    assert s.protected == ("clinic",) and s.public == ("reference",)
    other = s.for_plugin("other", "1")
    other.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.data("reference")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.data("clinic")
    s.data("clinic")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    infos = [b["info"] for b in _records(s, "info")]
    assert infos[0] == {"data_access": "reference", "role": "public", "parameters": {}, "rows": 5,
                        "source": {"kind": "arrays", "role": "public", "classes": None}}
    assert infos[1] == {"data_access": "clinic", "role": "protected", "parameters": {},
                        "source": {"kind": "csv", "role": "protected", "classes": None, "path": str(path),
                                   "target": "outcome", "id_column": "patient", "features": None}}
    charges = _records(s, "charge")
    assert [c.get("data") for c in charges] == [None, None, ["clinic"]]
    s.close()
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid
    certificate = (s.run_dir / run_store.CERTIFICATE).read_text()
    assert '"clinic"' in certificate and '"reference"' in certificate


def test_the_protected_default_is_kept_when_no_protected_set_is_named(make_session):
    s = make_session(data=[arrays("reference", np.ones((2, 2)), role="public")])
    assert s.protected == ("private data set",) and s.public == ("reference",)
    s.close()
    with pytest.raises(InvalidParameter, match="name at least one protected data set"):
        make_session(protected=(), data=[arrays("reference", np.ones((2, 2)), role="public")])
