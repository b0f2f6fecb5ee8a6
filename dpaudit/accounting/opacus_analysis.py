"""Opacus's privacy analyses (RDP and PRV of the subsampled Gaussian), without Opacus's training stack.

``opacus.accountants.analysis.rdp`` (Mironov, Talwar & Zhang 2019; the ``compute_rdp`` the RDP accountant uses) and
``opacus.accountants.analysis.prv`` (Gopi, Lee & Wutschitz 2021; the PRV accountant's discretisation) need only
math, numpy and scipy, but importing them first runs ``opacus/__init__.py`` and ``opacus/accountants/__init__.py``,
which import torch, the privacy engine and every grad sampler: seconds of start-up for a command that only
accounts. :func:`opacus_module` executes the installed Opacus's own files under the private package name
:data:`PRIVATE_ROOT` instead, whose packages are created empty (their ``__init__`` files are not run), so the code
that runs is Opacus's own, byte for byte, and ``opacus`` is not imported. When the process has already imported
the real module, that module is returned.

What this rests on (tests/dpaudit/accounting/test_opacus_analysis.py checks it for the installed Opacus):

* ``analysis/rdp.py`` imports nothing relative to its package;
* ``analysis/prv/{prvs,domain,compose}.py`` import, besides numpy and scipy, only each other, ``analysis/rdp.py`` and
  ``accountants/rdp.py`` (the RDP accountant ``compute_safe_domain_size`` runs, Gopi et al. Remark 5.6);
  ``accountants/rdp.py`` imports ``analysis/rdp.py`` and ``accountants/accountant.py``, whose one outside name,
  ``opacus.optimizers.DPOptimizer``, appears only in the annotation and body of the optimizer-hook factory, which
  no analysis calls. While the files load, ``opacus.optimizers`` is therefore a placeholder module naming an empty
  ``DPOptimizer`` class, removed right after, with the import lock held so that no other thread imports the real
  ``opacus`` meanwhile.
"""

from __future__ import annotations

import _imp
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, lru_cache, wraps
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType, SimpleNamespace

PRIVATE_ROOT = "_dpaudit_opacus"
"""The private name under which Opacus's files are executed (``_dpaudit_opacus.accountants.analysis.rdp``, ...)."""

RDP_CACHE_SIZE = 1 << 16
"""How many (q, σ, α) values of Opacus's ``_compute_rdp`` a process keeps (:func:`rdp_analysis`)."""

OPTIMIZERS = "opacus.optimizers"


def opacus_dir() -> Path:
    """The folder of the installed ``opacus`` package (found without importing it).

    Raises:
        ModuleNotFoundError: Opacus is not installed.
    """
    spec = importlib.util.find_spec("opacus")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("opacus is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def rdp_analysis_path() -> Path:
    """The installed file of ``opacus.accountants.analysis.rdp``."""
    return opacus_dir() / "accountants" / "analysis" / "rdp.py"


def _empty_package(name: str, folder: Path) -> ModuleType:
    """The package ``name`` over ``folder`` without running its ``__init__.py`` (registered in ``sys.modules``)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    return package


@contextmanager
def _optimizers_placeholder() -> Iterator[None]:
    """``opacus.optimizers`` as a placeholder while Opacus's accountant files load (see the module docstring)."""
    if OPTIMIZERS in sys.modules:
        yield
        return
    placeholder = ModuleType(OPTIMIZERS, "placeholder: Opacus's analysis files need the name DPOptimizer only")
    placeholder.DPOptimizer = type("DPOptimizer", (), {})  # type: ignore[attr-defined]
    sys.modules[OPTIMIZERS] = placeholder
    try:
        yield
    finally:
        if sys.modules.get(OPTIMIZERS) is placeholder:
            del sys.modules[OPTIMIZERS]


@cache
def opacus_module(relative: str) -> ModuleType:
    """Opacus's module ``opacus.<relative>`` (e.g. ``"accountants.analysis.rdp"``): the real one when the process
    has imported it, else the same file executed as ``<PRIVATE_ROOT>.<relative>`` without Opacus's ``__init__``
    files.

    Raises:
        ModuleNotFoundError: Opacus is not installed, or has no such module.
    """
    if f"opacus.{relative}" in sys.modules:
        return sys.modules[f"opacus.{relative}"]
    parts = relative.split(".")
    _imp.acquire_lock()  # no other thread may import the real opacus while the placeholder is in place
    try:
        folder = opacus_dir()
        _empty_package(PRIVATE_ROOT, folder)
        for i, part in enumerate(parts[:-1]):
            folder = folder / part
            _empty_package(".".join([PRIVATE_ROOT, *parts[:i + 1]]), folder)
        with _optimizers_placeholder():
            return importlib.import_module(f"{PRIVATE_ROOT}.{relative}")
    finally:
        _imp.release_lock()


def _memoised(compute_rdp_at: Callable[[float, float, float], float]) -> Callable[[float, float, float], float]:
    """``_compute_rdp(q, σ, α)`` with its results kept per (q, σ, α): a pure function of three numbers, evaluated
    by a Python series at a fractional α (milliseconds each). Unhashable arguments are passed through uncached."""
    cached = lru_cache(maxsize=RDP_CACHE_SIZE, typed=True)(compute_rdp_at)

    @wraps(compute_rdp_at)
    def wrapper(q: float, sigma: float, alpha: float) -> float:
        try:
            return cached(q, sigma, alpha)
        except TypeError:  # an unhashable argument: not from dpaudit, whose arguments are floats
            return compute_rdp_at(q, sigma, alpha)

    wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return wrapper


@cache
def rdp_analysis() -> ModuleType:
    """Opacus's ``opacus.accountants.analysis.rdp`` module, loaded without ``opacus/__init__.py``.

    In the private copy (never in a real ``opacus`` module the process imported) the per-order ``_compute_rdp``,
    through which ``compute_rdp`` and the PRV files reach it, is memoised (:func:`_memoised`): Opacus's PRV domain
    rule (``compute_safe_domain_size``) evaluates the same (q, σ) curve twice over Opacus's orders, which are also
    the fractional orders of the RDP accountant (:mod:`dpaudit.accounting.rdp`), so each is computed once per
    process. The values are Opacus's, unchanged.
    """
    module = opacus_module("accountants.analysis.rdp")
    if module.__name__.startswith(f"{PRIVATE_ROOT}.") and not hasattr(module._compute_rdp, "cache_info"):
        module._compute_rdp = _memoised(module._compute_rdp)
    return module


@cache
def prv_analysis() -> SimpleNamespace:
    """The functions and classes of Opacus's ``opacus.accountants.analysis.prv`` that the PRV accountant composes
    (``PRVAccountant._get_dprv``), loaded without ``opacus/__init__.py`` (after :func:`rdp_analysis`, so that
    ``prvs.py``, which imports ``_compute_rdp`` by name, binds the memoised one)."""
    rdp_analysis()
    prvs = opacus_module("accountants.analysis.prv.prvs")
    domain = opacus_module("accountants.analysis.prv.domain")
    compose = opacus_module("accountants.analysis.prv.compose")
    return SimpleNamespace(Domain=domain.Domain, compute_safe_domain_size=domain.compute_safe_domain_size,
                           PoissonSubsampledGaussianPRV=prvs.PoissonSubsampledGaussianPRV,
                           TruncatedPrivacyRandomVariable=prvs.TruncatedPrivacyRandomVariable,
                           discretize=prvs.discretize, compose_heterogeneous=compose.compose_heterogeneous)
