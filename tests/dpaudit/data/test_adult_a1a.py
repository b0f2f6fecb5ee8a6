"""Adult in the a1a construction: 123 binary features in libsvm's layout, public bin boundaries, a per-record
encoding and a split by record id (30,956 protected training records, 1,605 public evaluation records)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpaudit.data.adult import COLUMNS, data_dir
from dpaudit.data.adult_a1a import (
    ATTRIBUTES,
    BINS,
    FEATURE_NAMES,
    N_FEATURES,
    TEST_NAME,
    TRAIN_NAME,
    encode,
    load_a1a_test,
    load_a1a_train,
)
from dpaudit.data.catalog import load
from dpaudit.errors import DPAuditError


def test_shape_and_feature_count():
    train, test = load_a1a_train(), load_a1a_test()
    assert train.X.shape == (30956, 123) and test.X.shape == (1605, 123)
    assert len(FEATURE_NAMES) == N_FEATURES == 123
    assert set(np.unique(train.X)) == {0.0, 1.0}
    # one indicator per attribute, none for a missing ("?") categorical value: 11 to 14 ones per row
    assert train.X.sum(axis=1).min() >= 11 and train.X.sum(axis=1).max() == 14
    assert set(train.record_ids.tolist()).isdisjoint(test.record_ids.tolist())
    assert train.record_ids.min() == 1605 and test.record_ids.max() == 1604
    assert 0.2 < float(train.y.mean()) < 0.3


def test_layout_matches_libsvm_a1a():
    """a1a's first line (adult.data record 0) is "-1 3:1 11:1 14:1 19:1 39:1 42:1 55:1 64:1 67:1 73:1 75:1 76:1
    80:1 83:1". Every index matches but hours-per-week: our public quintiles put 40 hours in the 4th bin (81)."""
    first = np.flatnonzero(load_a1a_test().X[0]) + 1
    assert first.tolist() == [3, 11, 14, 19, 39, 42, 55, 64, 67, 73, 75, 76, 81, 83]
    assert load_a1a_test().y[0] == 0.0


def test_bin_boundaries_are_quintiles_of_the_public_test_file():
    table = pd.read_csv(data_dir() / "adult.test", header=None, names=list(COLUMNS), skipinitialspace=True,
                        comment="|")
    assert len(table) == 16281
    for column in ("age", "fnlwgt", "education-num", "hours-per-week"):
        assert BINS[column].boundaries == tuple(np.quantile(table[column], [0.2, 0.4, 0.6, 0.8]).tolist())


def test_encoding_is_a_function_of_each_record_alone():
    """Add/remove one record changes one row: encoding a record alone gives its row in the full encoding."""
    lines = (data_dir() / "adult.data").read_text().splitlines()
    train = load_a1a_train()
    for i in (0, 17, 30955):
        line = lines[int(train.record_ids[i])]
        alone = encode(pd.DataFrame([[v.strip() for v in line.split(",")][:-1]], columns=list(ATTRIBUTES)))
        np.testing.assert_array_equal(alone[0], train.X[i])


def test_a_value_outside_the_schema_is_refused():
    row = ["39", "Space-force", "77516", "Bachelors", "13", "Never-married", "Adm-clerical", "Not-in-family",
           "White", "Male", "2174", "0", "40", "United-States"]
    with pytest.raises(DPAuditError, match="workclass"):
        encode(pd.DataFrame([row], columns=list(ATTRIBUTES)))
    row[1], row[0] = "State-gov", "old"
    with pytest.raises(DPAuditError, match="age"):
        encode(pd.DataFrame([row], columns=list(ATTRIBUTES)))


def test_catalog_entries_and_row_limit():
    assert load(TRAIN_NAME, {"rows": 100}).X.shape == (100, 123)
    assert load(TEST_NAME, {}).X.shape == (1605, 123)
