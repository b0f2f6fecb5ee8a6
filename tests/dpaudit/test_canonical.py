"""The strict evidence parser: every JSON object file ``verify`` reads goes through it."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit import canonical
from dpaudit.errors import VerificationError


def _refused(text: str) -> str:
    with pytest.raises(VerificationError) as err:
        canonical.loads_object(text, "certificate.json", VerificationError)
    assert "certificate.json" in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(("text", "reason"), [
    ('{"claim":1,"claim":2}', "duplicate key 'claim'"),
    ('{"a":{"b":1,"b":1}}', "duplicate key 'b'"),
    ('{"epsilon":NaN}', "non-finite number NaN"),
    ('{"epsilon":-Infinity}', "non-finite number -Infinity"),
    ('{"epsilon":1e400}', "non-finite number 1e400"),
    ('{"n":' + "9" * 5000 + "}", "not strict JSON"),
    ("[1]", "must hold a JSON object"),
    ("{not json", "not strict JSON"),
])
def test_refused_with_a_named_reason(text, reason):
    assert reason in _refused(text)


def test_nesting_is_bounded_without_recursion():
    """10^5 levels used to raise RecursionError inside json; now refused before parsing, deepest level named."""
    assert f"nested deeper than {canonical.MAX_DEPTH} levels (100001)" in _refused(
        '{"a":' + "[" * 100_000 + "]" * 100_000 + "}")
    at_limit = '{"a":' + "[" * (canonical.MAX_DEPTH - 1) + "]" * (canonical.MAX_DEPTH - 1) + "}"
    assert canonical.loads_object(at_limit, "x", VerificationError)
    assert "deeper" in _refused('{"a":' + "[" * canonical.MAX_DEPTH + "]" * canonical.MAX_DEPTH + "}")


def test_brackets_and_quotes_inside_strings_do_not_count():
    text = '{"a":"' + "[{" * 200 + '\\"' + '","b":[1.5,-0.0]}'
    assert canonical.loads_object(text, "x", VerificationError) == {"a": "[{" * 200 + '"', "b": [1.5, -0.0]}


def test_canonical_output_reads_back():
    obj = {"claim": {"epsilon": 0.1 + 0.2, "delta": 1e-6}, "n": [1, 2, {"x": None}], "s": "é"}
    assert canonical.loads_object(canonical.dumps(obj), "x", VerificationError) == obj


def test_read_object_refuses_links_devices_fifos_and_oversized_files(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("/etc/passwd")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it blocking would hang the reader
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(2**30)  # sparse: no real disk
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for path, reason in ((link, "is a symbolic link"), (zero, "is a symbolic link"), (fifo, "not a regular file"),
                         (tmp_path, "not a regular file"), (big, "larger than the 16777216-byte limit"),
                         (tmp_path / "missing.json", "cannot read")):
        with pytest.raises(VerificationError, match=reason):
            canonical.read_object(path, VerificationError)


def test_dumps_parsed_is_dumps_for_every_parsed_value():
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.dictionaries(st.text(max_size=6), values, max_size=5))
    def same(obj):
        parsed = json.loads(canonical.dumps(obj))
        assert canonical.dumps_parsed(parsed) == canonical.dumps(parsed)

    same()
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical.dumps_parsed({"a": [float("inf")]})
