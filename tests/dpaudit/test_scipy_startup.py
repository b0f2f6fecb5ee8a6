"""The command line's SciPy import hook: capabilities recorded as SciPy records them, docstrings left as written."""

from __future__ import annotations

import json
import subprocess
import sys

from dpaudit.scipy_startup import _Hook, remove_hook, skip_array_api_notes, without_note

NOTE = "Array API Standard Support"


def _toy_xp_capabilities(table: dict):
    """A stand-in with SciPy's two effects: record the capabilities, rewrite the docstring with a note."""
    def xp_capabilities(**capabilities):
        def decorator(f):
            table[f] = capabilities
            f.__doc__ = f"{f.__doc__ or ''}\n\nNotes\n-----\n{NOTE}: {capabilities}"
            return f
        return decorator
    return xp_capabilities


def test_the_wrapped_decorator_records_the_same_capabilities_and_keeps_the_docstring():
    plain, wrapped = {}, {}

    def f():
        """f's own docstring."""

    def g():
        """f's own docstring."""

    assert _toy_xp_capabilities(plain)(cpu_only=True)(f) is f
    assert without_note(_toy_xp_capabilities(wrapped))(cpu_only=True)(g) is g
    assert plain == {f: {"cpu_only": True}} and wrapped == {g: {"cpu_only": True}}
    assert NOTE in f.__doc__ and g.__doc__ == "f's own docstring."


def test_an_object_whose_docstring_cannot_be_set_is_decorated_as_before():
    table = {}
    decorator = without_note(lambda **kw: lambda f: table.setdefault(f, kw) and f)
    assert decorator(np_only=True)(len) is len  # builtins refuse a new __doc__
    assert table == {len: {"np_only": True}}


def test_the_hook_is_installed_once_and_removed():
    remove_hook()
    try:
        skip_array_api_notes()
        skip_array_api_notes()
        assert sum(isinstance(f, _Hook) for f in sys.meta_path) == (0 if "scipy._lib._array_api" in sys.modules
                                                                     else 1)
    finally:
        remove_hook()
    assert not any(isinstance(f, _Hook) for f in sys.meta_path)


_PROBE = """
import json, sys
{setup}
import scipy.special, scipy.stats, scipy.signal
from scipy._lib import _array_api
def name(f):
    return f"{{getattr(f, '__module__', '')}}.{{getattr(f, '__name__', repr(f))}}"
table = _array_api.xp_capabilities_table
print(json.dumps({{
    "capabilities": sorted(f"{{name(f)}} {{sorted(c.items(), key=str)}}" for f, c in table.items()),
    "notes": sum(NOTE in (getattr(f, "__doc__", None) or "") for f in table),
    "hooks": sum(type(f).__name__ == "_Hook" for f in sys.meta_path),
    "values": [float(scipy.stats.norm.cdf(1.5)), float(scipy.special.erfc(2.0)),
               [float(x) for x in scipy.signal.fftconvolve([1.0, 2.0], [3.0, 4.0])]],
}}))
"""
_COMMAND = """
import contextlib, io
from dpaudit.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["account", "laplace", "--sensitivity", "1", "--epsilon", "0.5"], standalone_mode=False)
"""


def _probe(setup: str) -> dict:
    code = _PROBE.replace("NOTE", repr(NOTE)).format(setup=setup)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_scipy_under_the_hook_has_the_same_capabilities_and_values_and_no_notes():
    """Two fresh interpreters: a library import (``import dpaudit.accounting``, no hook) and a command
    (``dpaudit account laplace``, under the hook). SciPy's capabilities table and results are identical; only the
    appended notes are gone, and the hook removed itself."""
    library = _probe("import dpaudit.accounting")
    cli = _probe(_COMMAND)
    assert library["capabilities"] == cli["capabilities"] and len(cli["capabilities"]) > 300
    assert library["values"] == cli["values"]
    assert library["notes"] > 300 and cli["notes"] == 0
    assert cli["hooks"] == 0
