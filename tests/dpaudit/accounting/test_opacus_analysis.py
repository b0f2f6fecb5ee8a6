"""Opacus's RDP analysis loaded without Opacus's package: the same file, the same numbers, and no torch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis.rdp import compute_rdp

from dpaudit.accounting.opacus_analysis import rdp_analysis_path
from dpaudit.accounting.rdp import LARGE_ORDERS, ORDERS

CASES = [(0.01, 1.0, 1.5), (0.0157, 1.1, 8.0), (0.5, 0.7, 32.0), (1.0, 2.0, 3.0)]


def test_orders_are_opacus_default_alphas_plus_the_large_ones():
    assert tuple(float(a) for a in RDPAccountant.DEFAULT_ALPHAS) + LARGE_ORDERS == ORDERS


def test_the_loaded_file_imports_nothing_relative_to_its_package():
    """Loading the file alone is sound only while it needs nothing else of Opacus (a new Opacus could change it)."""
    tree = ast.parse(rdp_analysis_path().read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports and not [n for n in imports if isinstance(n, ast.ImportFrom) and n.level > 0]
    names = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in imports if isinstance(n, ast.ImportFrom)}
    assert {name.split(".")[0] for name in names} <= {"math", "warnings", "typing", "numpy", "scipy"}


def test_a_fresh_process_gets_opacus_numbers_without_importing_opacus():
    code = ("import json, sys\n"
            "from dpaudit.accounting.opacus_analysis import rdp_analysis\n"
            f"values = [float(rdp_analysis().compute_rdp(q=q, noise_multiplier=s, steps=1, orders=a)) "
            f"for q, s, a in {CASES!r}]\n"
            "print(json.dumps({'values': values, 'loaded': [m for m in ('opacus', 'torch') if m in sys.modules]}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(done.stdout)
    assert out["loaded"] == []
    assert out["values"] == [float(compute_rdp(q=q, noise_multiplier=s, steps=1, orders=a)) for q, s, a in CASES]


PRV_FILES = ("prv/prvs.py", "prv/domain.py", "prv/compose.py")
PRV_HISTORIES = [((0.0157, 1.0, 192),), ((0.01, 1.1, 50), (0.02, 0.9, 30))]


def _imports(path) -> set[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            found |= {(0, a.name.split(".")[0]) for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            found.add((n.level, n.module if n.level else (n.module or "")))
    return found


def test_the_prv_files_import_only_what_the_private_loading_provides():
    """PRV: numpy/scipy, each other, ``analysis/rdp.py`` and ``accountants/rdp.py``, whose only outside name is
    ``opacus.optimizers.DPOptimizer`` (in ``accountant.py``, replaced by a placeholder while loading)."""
    analysis = rdp_analysis_path().parent
    allowed = {(0, m) for m in ("typing", "dataclasses", "numpy", "scipy", "numpy.typing", "scipy.fft", "scipy.signal",
                                "scipy.special", "math", "warnings")}
    for name in PRV_FILES:
        assert _imports(analysis / name) <= allowed | {(1, "prvs"), (1, "domain"), (2, "rdp"), (3, "rdp")}, name
    accountants = analysis.parent
    assert _imports(accountants / "rdp.py") <= allowed | {(1, "accountant"), (1, "analysis")}
    assert _imports(accountants / "accountant.py") <= {(0, m) for m in ("abc", "collections", "copy", "typing")} | {
        (0, "opacus.optimizers")}


def test_prv_bounds_are_opacus_numbers_without_importing_opacus_or_torch():
    """The same (ε_lower, ε_estimate, ε_upper) as Opacus's PRV modules imported normally, in a fresh process that
    never imports opacus or torch; the real Opacus still imports afterwards (the placeholder is gone)."""
    code = ("import json, sys\n"
            "from dpaudit.accounting.prv import prv_bounds\n"
            f"values = [prv_bounds(h, 1e-5) for h in {PRV_HISTORIES!r}]\n"
            "loaded = [m for m in ('opacus', 'torch', 'opacus.optimizers') if m in sys.modules]\n"
            "import opacus.optimizers\n"
            "real = opacus.optimizers.DPOptimizer.__module__\n"
            "print(json.dumps({'values': values, 'loaded': loaded, 'real': real}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(done.stdout)
    assert out["loaded"] == [] and out["real"].startswith("opacus.optimizers")
    from opacus.accountants import PRVAccountant

    for history, (lower, estimate, upper) in zip(PRV_HISTORIES, out["values"], strict=True):
        accountant = PRVAccountant()
        accountant.history = [(sigma, q, k) for q, sigma, k in history]
        # Opacus's own get_epsilon returns ε_upper; ours sums its formula without overflow (prv.discrete_epsilons)
        assert upper == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-12)
        assert lower <= estimate <= upper


def test_the_private_copy_memoises_each_order_and_the_real_opacus_is_left_alone():
    """Opacus's PRV domain rule evaluates the same curve twice: in the private copy the second pass is read from the
    cache, with Opacus's numbers; a process that imported the real Opacus (this one) gets it unpatched."""
    from opacus.accountants.analysis import rdp as real

    from dpaudit.accounting.opacus_analysis import rdp_analysis

    assert rdp_analysis() is real and not hasattr(real._compute_rdp, "cache_info")
    code = ("import json\n"
            "from dpaudit.accounting.opacus_analysis import rdp_analysis\n"
            "from dpaudit.accounting.prv import prv_bounds\n"
            f"first = prv_bounds({PRV_HISTORIES[0]!r}, 1e-5)\n"
            "info = rdp_analysis()._compute_rdp.cache_info()\n"
            f"again = [float(rdp_analysis().compute_rdp(q=q, noise_multiplier=s, steps=1, orders=a)) "
            f"for q, s, a in {CASES!r}]\n"
            "print(json.dumps({'hits': info.hits, 'misses': info.misses, 'again': again}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(done.stdout)
    assert out["hits"] >= out["misses"] > 0  # the second pass over Opacus's orders: every value from the cache
    assert out["again"] == [float(compute_rdp(q=q, noise_multiplier=s, steps=1, orders=a)) for q, s, a in CASES]
