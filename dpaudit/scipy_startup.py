"""SciPy start-up for the command line: SciPy's functions keep their own docstrings, without the Array API note.

SciPy 1.17 decorates several hundred functions with ``scipy._lib._array_api.xp_capabilities`` when
``scipy.special``, ``scipy.stats`` and ``scipy.signal`` are imported. The decorator does two things: it records
the function's Array API capabilities in ``xp_capabilities_table`` (which SciPy's test suite reads), and it parses
the function's numpydoc docstring and writes it back with an "Array API Standard Support" table appended to its
Notes. The parsing is about half of what ``import scipy.stats`` costs (0.3 to 0.4 s of a command that accounts or
verifies, docs/performance.md), for text that only ``help()`` shows.

:func:`skip_array_api_notes` installs a one-shot import hook: when ``scipy._lib._array_api`` is first imported,
its ``xp_capabilities`` is replaced by a wrapper that calls the original decorator on the function with its
docstring hidden and then puts the docstring back. The capabilities table is filled exactly as before and no code
path changes; a docstring lacks the appended note, nothing else. Only the ``dpaudit`` command installs it
(:func:`dpaudit.cli.main`), never ``import dpaudit``, so a program that uses dpaudit as a library sees SciPy as
SciPy made it. Where SciPy has no such decorator (another version), the hook changes nothing.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

TARGET = "scipy._lib._array_api"
"""The SciPy module whose ``xp_capabilities`` decorator is wrapped."""


def without_note(xp_capabilities: Callable[..., Callable[[Any], Any]]) -> Callable[..., Callable[[Any], Any]]:
    """``xp_capabilities`` whose decorator leaves the decorated function's docstring as it was.

    The original decorator runs on the function with ``__doc__`` set to None (so it parses an empty docstring and
    still records the function's capabilities), then the docstring is restored. An object whose ``__doc__`` cannot
    be set (a ufunc of an old NumPy) is decorated as before.
    """

    @functools.wraps(xp_capabilities)
    def wrapper(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        decorate = xp_capabilities(*args, **kwargs)

        def decorator(f: Any) -> Any:
            doc = f.__doc__
            try:
                f.__doc__ = None
            except (AttributeError, TypeError):
                return decorate(f)
            try:
                return decorate(f)
            finally:
                f.__doc__ = doc

        return decorator

    return wrapper


class _PatchingLoader:
    """Runs the real loader, then wraps the module's ``xp_capabilities`` (the loader protocol; ``importlib.abc`` is
    not imported, it costs start-up time)."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        original = getattr(module, "xp_capabilities", None)
        if callable(original):
            module.xp_capabilities = without_note(original)  # type: ignore[attr-defined]


class _Hook:
    """Finds :data:`TARGET` through the other finders, once, and hands it to :class:`_PatchingLoader` (the
    meta-path finder protocol)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None,
                  ) -> ModuleSpec | None:
        if fullname != TARGET:
            return None
        remove_hook()  # one shot; the search below must not find this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


def skip_array_api_notes() -> None:
    """Install the hook (module docstring) unless SciPy's module is already imported or the hook is installed."""
    if TARGET in sys.modules or any(isinstance(f, _Hook) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Hook())


def remove_hook() -> None:
    """Remove the hook from ``sys.meta_path`` (nothing happens when it is not installed). The list is replaced, not
    changed in place: an import searching the old list meanwhile goes on over it unchanged."""
    sys.meta_path = [f for f in sys.meta_path if not isinstance(f, _Hook)]
