"""The data catalog and Session.data: undeclared names refused before anything is read or recorded, each access
recorded (never the data, never a protected set's size), and each entry the slice of Adult it names."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.data import load_adult
from dpaudit.data.catalog import (
    FINAL_TEST_NAME,
    SLICE_TRAINING_NAME,
    SLICE_VALIDATION_NAME,
    TEST_NAME,
    TRAIN_NAME,
    VALIDATION_NAME,
    CatalogEntry,
    catalog_entry,
    load,
    register_data_set,
)
from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.ledger import read_records


def _infos(session) -> list[dict]:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r.body for r in records if r.type == "info"]


def test_an_undeclared_name_is_refused_and_nothing_is_recorded(make_session):
    """Attack: a plugin reads a data set the session never declared (so the certificate would not name it)."""
    s = make_session(protected=(TRAIN_NAME,), public=())
    view = s.for_plugin("p", "1")
    for name in (TEST_NAME, VALIDATION_NAME, SLICE_VALIDATION_NAME):
        with pytest.raises(InvalidParameter, match="not declared by this session"):
            view.data(name, rows=10)
    with pytest.raises(InvalidParameter, match="not declared"):
        s.data(FINAL_TEST_NAME)
    assert _infos(s) == []
    s.close()


def test_a_declared_name_without_a_loader_or_a_bad_parameter_records_nothing(make_session):
    s = make_session(protected=("patients",), public=(TEST_NAME,))
    with pytest.raises(InvalidParameter, match="no data set named 'patients'"):
        s.data("patients")
    with pytest.raises(InvalidParameter, match="takes the parameters"):
        s.data(TEST_NAME, row=10)
    with pytest.raises(InvalidParameter):
        s.data(TEST_NAME, rows=0)
    assert _infos(s) == []
    s.close()


def test_each_access_is_recorded_without_the_data_or_the_protected_size(make_session):
    """A public set's row count is recorded; a protected set's is not (only the public parameters the plugin
    chose): the access record must not release the protected set's size (docs/data.md)."""
    s = make_session(protected=(TRAIN_NAME,), public=(VALIDATION_NAME, FINAL_TEST_NAME))
    view = s.for_plugin("p", "1")
    train = view.data(TRAIN_NAME, rows=500)
    validation = view.data(VALIDATION_NAME, rows=101)
    infos = _infos(s)
    assert [i["plugin"] for i in infos] == ["p", "p"]
    assert infos[0]["info"] == {"data_access": TRAIN_NAME, "role": "protected", "parameters": {"rows": 500}}
    assert infos[1]["info"] == {"data_access": VALIDATION_NAME, "role": "public", "parameters": {"rows": 101},
                                "rows": 50}
    assert len(train) == 500 and len(validation) == 50
    s.close()


def test_a_closed_session_returns_no_data(make_session):
    s = make_session(protected=(TRAIN_NAME,))
    s.close()
    with pytest.raises(DPAuditError, match="closed"):
        s.data(TRAIN_NAME, rows=10)


def test_the_adult_entries_are_the_slices_they_name():
    full = load_adult(train_rows=700, test_rows=9)
    train = load(TRAIN_NAME, {"rows": 700})
    assert np.array_equal(train.X, full.X_train) and np.array_equal(train.record_ids, full.record_ids)
    assert np.array_equal(load(TEST_NAME, {"rows": 9}).y, full.y_test)
    validation, final_test = load(VALIDATION_NAME, {"rows": 9}), load(FINAL_TEST_NAME, {"rows": 9})
    assert np.array_equal(np.concatenate([validation.X, final_test.X]), full.X_test)
    assert (len(validation), len(final_test)) == (4, 5)
    public = load(SLICE_TRAINING_NAME, {"rows": 300})
    protected = load(SLICE_VALIDATION_NAME, {"offset": 300, "rows": 400})
    assert set(public.record_ids) == {i for i in full.record_ids if i < 300}
    assert set(protected.record_ids) == {i for i in full.record_ids if 300 <= i < 700}
    assert not protected.X.flags.writeable and not train.y.flags.writeable
    with pytest.raises(InvalidParameter, match="rows must be >= 2"):
        load(VALIDATION_NAME, {"rows": 1})


def test_a_name_registers_once():
    entry = catalog_entry(TRAIN_NAME)
    assert register_data_set(entry) is entry  # the same entry again: a no-op
    with pytest.raises(InvalidParameter, match="already in the catalog"):
        register_data_set(CatalogEntry(TRAIN_NAME, (), lambda: None, "another loader under a taken name"))
    assert catalog_entry(TRAIN_NAME) is entry
