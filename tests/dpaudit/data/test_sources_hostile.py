"""Hostile and careless data sources (dpaudit/data/sources.py): each is refused with one line when the session opens,
before its ledger exists, so nothing is charged or recorded; values are checked as the model will see them (float32).

Each case below was accepted before the fix noted beside it, or is a refusal the issue asked to pin down.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dpaudit import store as run_store
from dpaudit.data import arrays, csv, parquet, torch_dataset
from dpaudit.data.sources import MAX_RECORD_ID, load_source
from dpaudit.errors import InvalidParameter


class _Raises(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int):
        raise RuntimeError("disk gone")


class _Varying(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int):
        return torch.ones(i + 1), 0


def _text(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path / name


def _cases(tmp_path: Path) -> list[tuple[object, str]]:
    def table(name: str, text: str, **kw) -> object:
        return csv("x", _text(tmp_path, name, text), target="y", **kw)

    nested = tmp_path / "nested.parquet"
    pd.DataFrame({"id": [1, 2], "a": [[1, 2], [3, 4]], "y": [0, 1]}).to_parquet(nested)
    struct = tmp_path / "struct.parquet"
    pd.DataFrame({"id": [1, 2], "a": [{"b": 1}, {"b": 2}], "y": [0, 1]}).to_parquet(struct)
    return [
        (table("dup.csv", "id,a,y\n1,2,0\n1,3,1\n", id_column="id"), "record ids must be distinct"),
        (table("text.csv", "id,a,y\n1,x,0\n2,3,1\n"), "column 'a' is not numeric"),
        (table("nan.csv", "a,y\nnan,0\n3,1\n"), "NaN or infinite"),
        (table("inf.csv", "a,y\ninf,0\n3,1\n"), "NaN or infinite"),
        (table("empty.csv", ""), "cannot read"),
        (table("header.csv", "a,y\n"), "not numeric"),
        (table("float_ids.csv", "id,a,y\n1.5,2,0\n2,3,1\n", id_column="id"), "finite integers"),
        # accepted before: negative ids (constant-overhead partitions need non-negative ones)
        (table("negative_ids.csv", "id,a,y\n-1,2,0\n2,3,1\n", id_column="id"), r"lie in \[0, 2\*\*53\]"),
        # accepted before: 1e30 and 2**63 overflowed int64 silently (read as float64, then cast)
        (table("huge_ids.csv", "id,a,y\n1e30,2,0\n2,3,1\n", id_column="id"), r"lie in \[0, 2\*\*53\]"),
        (table("uint_ids.csv", "id,a,y\n9223372036854775808,2,0\n2,3,1\n", id_column="id"), r"lie in \[0, 2\*\*53\]"),
        # accepted before: pandas renamed the second "a" to "a.1" and both became features
        (table("repeated.csv", "a,a,y\n1,2,0\n3,4,1\n"), r"column names repeat .*\['a'\]"),
        (table("classes.csv", "a,y\n2,0\n3,5\n", classes=2), "labels must be the integers 0, ..., 1"),
        (table("negative_class.csv", "a,y\n2,-1\n3,1\n", classes=2), "labels must be the integers"),
        # accepted before: 1e300 is finite in float64 but inf in the float32 the model sees
        (table("overflow.csv", "a,y\n1e300,0\n3,1\n"), "beyond float32's range"),
        (parquet("x", nested, target="y"), "column 'a' is not numeric"),
        (parquet("x", struct, target="y"), "column 'a' is not numeric"),
        (parquet("x", _text(tmp_path, "garbage.parquet", "hello"), target="y"), "cannot read"),
        (torch_dataset("x", _Raises()), "RuntimeError: disk gone"),
        (torch_dataset("x", _Varying()), "one shape"),
        (torch_dataset("x", [(torch.ones(2), 7)], classes=2), "labels must be the integers"),
        (arrays("x", np.ones((2, 2)), record_ids=[0.5, 1]), "finite integers"),
        (arrays("x", np.ones((2, 2)), record_ids=[True, False]), "finite integers"),
        (arrays("x", np.ones((2, 2)), record_ids=[-1, 1]), r"lie in \[0, 2\*\*53\]"),
        (arrays("x", np.ones((2, 2)), record_ids=[MAX_RECORD_ID + 2, 1]), r"lie in \[0, 2\*\*53\]"),
        # accepted before: the imaginary part was dropped with only a warning
        (arrays("x", np.ones((2, 2)) * 1j), "X is not numeric"),
        (arrays("x", np.full((2, 2), 1e300)), "beyond float32's range"),
    ]


def test_hostile_sources_are_refused_at_open_and_leave_no_ledger(make_session, tmp_path):
    for source, message in _cases(tmp_path):
        with pytest.raises(InvalidParameter, match=message) as caught:
            make_session(data=[source])
        assert "\n" not in str(caught.value), str(caught.value)
    assert list(Path(os.environ["DPAUDIT_HOME"]).rglob(run_store.LEDGER)) == []


def test_a_name_declared_both_protected_and_public_is_refused(make_session):
    """Accepted before: ``Session(protected=("x",), public=("x",))`` opened, so the certificate stated a set as
    public that ``session.data`` served as protected (and a study could score on its protected set unprotected)."""
    with pytest.raises(InvalidParameter, match="both protected and public"):
        make_session(protected=("x",), public=("x",))
    with pytest.raises(InvalidParameter, match="both protected and public"):
        make_session(protected=("x", "y"), public=("y",), data=[arrays("z", np.ones((2, 2)))])
    assert list(Path(os.environ["DPAUDIT_HOME"]).rglob(run_store.LEDGER)) == []


def test_ids_at_the_limits_are_kept_exactly(tmp_path):
    path = _text(tmp_path, "ids.csv", f"id,a,y\n0,1,0\n{MAX_RECORD_ID},2,1\n{MAX_RECORD_ID - 1},3,1\n")
    data = load_source(csv("x", path, target="y", id_column="id", classes=2))
    assert data.record_ids.tolist() == [0, MAX_RECORD_ID, MAX_RECORD_ID - 1]
