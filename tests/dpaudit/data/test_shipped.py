"""The shipped offline sets: documented shapes, classes and value ranges, a split that is a function of each record's
own position (so a neighbouring file keeps every other record's part), and access through the session."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.data.catalog import catalog_entry, load
from dpaudit.data.shipped import in_test_part, split
from dpaudit.ledger import read_records

# name: (records in the train part, in the test part, features, classes, feature range or None)
SHAPES = {
    "mnist-5000": (4044, 956, 784, 10, (0.0, 1.0)),
    "digits": (1461, 336, 64, 10, (0.0, 1.0)),
    "diabetes": (361, 81, 10, None, None),
}


@pytest.mark.parametrize("base", sorted(SHAPES))
def test_each_shipped_set_loads_with_the_documented_shape(base):
    n_train, n_test, d, classes, bounds = SHAPES[base]
    train, test = load(f"{base}-train", {}), load(f"{base}-test", {})
    assert train.X.shape == (n_train, d) and test.X.shape == (n_test, d)
    assert train.classes == test.classes == classes and len(train.feature_names) == d
    assert train.X.dtype == np.float32 and not train.X.flags.writeable
    assert not set(train.record_ids) & set(test.record_ids)
    assert sorted([*train.record_ids, *test.record_ids]) == list(range(n_train + n_test))
    assert in_test_part(test.record_ids).all() and not in_test_part(train.record_ids).any()
    if classes is not None:  # every class in both parts
        assert set(np.unique(train.y)) == set(np.unique(test.y)) == set(range(classes))
    if bounds is not None:
        assert train.X.min() == bounds[0] and train.X.max() == bounds[1]
    for name in (f"{base}-train", f"{base}-test"):
        assert catalog_entry(name).parameters == ()


def test_diabetes_is_in_original_units_not_scaled_by_the_data():
    """scikit-learn's default diabetes is centred and scaled by statistics of all 442 records (one record moves every
    row); the shipped entry must be the unscaled file: ages in years, sex coded 1/2."""
    train = load("diabetes-train", {})
    age, sex = train.X[:, 0], train.X[:, 1]
    assert age.min() >= 18 and age.max() <= 80 and set(np.unique(sex)) == {1.0, 2.0}
    assert train.y.min() >= 25 and train.y.max() <= 346


def test_the_split_depends_on_each_records_own_position_only():
    """Attack: a neighbouring file (one record removed at the end) must leave every other record in its part."""
    X, y = np.arange(40.0).reshape(20, 2), np.arange(20.0)
    whole = split("t", lambda: (X, y, ("a", "b")), True, None)
    fewer = split("t", lambda: (X[:-1], y[:-1], ("a", "b")), True, None)
    assert set(fewer.record_ids) == set(whole.record_ids) - {19}
    assert 0 < in_test_part(np.arange(5000)).mean() < 0.25


def test_a_shipped_set_is_read_through_the_session_and_recorded(make_session):
    s = make_session(protected=("digits-train",), public=("digits-test",))
    view = s.for_plugin("p", "1")
    train, test = view.data("digits-train"), view.data("digits-test")
    X, labels = train.tensors()
    assert X.shape == (1461, 64) and str(labels.dtype) == "torch.int64"
    infos = [r.body["info"] for r in read_records(s.ledger_path)[0] if r.type == "info"]
    assert infos == [{"data_access": "digits-train", "role": "protected", "parameters": {}},
                     {"data_access": "digits-test", "role": "public", "parameters": {}, "rows": len(test)}]
    s.close()
