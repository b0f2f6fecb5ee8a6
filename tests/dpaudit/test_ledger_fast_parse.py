"""The ledger reader's orjson fast path accepts exactly what json's path accepts, at every nesting depth and every
recursion limit: a line json cannot read (too deep for the stack it has) must be refused as before, never accepted
to fail later in verify (review of commit 07c0042: depths 194/394/994 were accepted at recursion limits
200/400/1000, and verify then died with an uncaught RecursionError)."""

from __future__ import annotations

import sys

import pytest

from dpaudit import canonical, ledger
from dpaudit.errors import LedgerError

_H = "a" * 64
_BASE = canonical.dumps({"body": {"x": 0}, "hash": _H, "prev": _H, "seq": 1, "time": 1.5, "type": "charge"})


def _accepts(text: str, fast: bool) -> bool:
    """Whether the reader accepts ``text``, with its fast path on, or off (json's parse alone, as before orjson);
    both read at the same stack depth."""
    original = canonical.fast_loads
    if not fast:
        canonical.fast_loads = lambda _text: None
    try:
        ledger._canonical_object(text)
    except LedgerError:
        return False
    finally:
        canonical.fast_loads = original
    return True


@pytest.mark.parametrize("limit", [200, 400, 1000])
def test_fast_and_json_paths_accept_the_same_nesting_at_every_recursion_limit(limit):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        for depth in range(1, limit + 5):
            for inner in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
                text = _BASE.replace('"x":0', f'"x":{inner}')
                assert _accepts(text, True) == _accepts(text, False), (limit, depth)
    finally:
        sys.setrecursionlimit(old)


def test_a_shallow_line_takes_the_fast_path(monkeypatch):
    """The bracket gate lets ordinary records through to orjson (else the test above could pass with no fast path)."""
    calls = []
    real = canonical.orjson.loads
    monkeypatch.setattr(canonical.orjson, "loads", lambda text: calls.append(text) or real(text))
    ledger._canonical_object(_BASE)
    wide = _BASE.replace('"x":0', '"x":[' + ",".join(["[]"] * 70) + "]")  # 73 brackets, 4 levels deep
    assert ledger._canonical_object(wide)["body"]["x"] == [[]] * 70  # read by json, accepted
    deep = _BASE.replace('"x":0', '"x":' + "[" * 65 + "]" * 65)  # deeper than the readers' limit
    with pytest.raises(LedgerError, match=f"nested deeper than {canonical.MAX_DEPTH} levels"):
        ledger._canonical_object(deep)
    assert calls == [_BASE]
