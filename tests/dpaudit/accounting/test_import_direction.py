"""The import graph runs one way: dpaudit/accounting/ reads privacy maps, never samplers or calibrations.

Every module under dpaudit/accounting/ is parsed with :mod:`ast` (imports inside functions included). From the
mechanism layer it may import only privacy maps and the pure helpers they are made of (names ending in
``_epsilon`` or ``_delta``, ``gaussian_grid_parameters``, ``grid_sensitivity``, the table of registered maps), and
never a sampler module (``discrete``, ``randomness``) or a whole mechanism module. The pre-issue-9 tree fails this test
(``charges.py`` imported ``gaussian_event_delta`` from ``dpaudit.mechanisms.calibration``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dpaudit.accounting

ACCOUNTING = Path(dpaudit.accounting.__file__).parent
#: the sampler layer and the modules that no longer exist (dissolved into the mechanism modules)
FORBIDDEN_MODULES = frozenset({
    "dpaudit.mechanisms.discrete", "dpaudit.mechanisms.randomness", "dpaudit.mechanisms.calibration",
    "dpaudit.mechanisms.additive", "dpaudit.privacy_maps",
})
PURE_HELPERS = frozenset({"gaussian_grid_parameters", "grid_sensitivity"})
#: the table of registered privacy maps (dpaudit.mechanisms.registry) is read by event type
MAP_TABLE = "dpaudit.mechanisms.registry"


def _is_map(name: str) -> bool:
    return name.endswith(("_epsilon", "_delta")) or name in PURE_HELPERS


def mechanism_imports(source: str) -> list[str]:
    """Every import of the mechanism layer in ``source`` that accounting may not make, as ``module:name``."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [alias.name for alias in node.names if alias.name.startswith("dpaudit.mechanisms")
                    or alias.name in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in FORBIDDEN_MODULES or node.module == "dpaudit.mechanisms":
                bad += [f"{node.module}:{alias.name}" for alias in node.names]
            elif node.module.startswith("dpaudit.mechanisms.") and node.module != MAP_TABLE:
                bad += [f"{node.module}:{alias.name}" for alias in node.names if not _is_map(alias.name)]
    return bad


@pytest.mark.parametrize("path", sorted(ACCOUNTING.glob("*.py")), ids=lambda p: p.name)
def test_accounting_imports_only_privacy_maps_from_the_mechanism_layer(path: Path) -> None:
    assert mechanism_imports(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source", [
    "from dpaudit.mechanisms.calibration import gaussian_event_delta",  # the import issue 9 removed
    "from dpaudit.mechanisms.laplace import calibrate_laplace_scale",
    "from dpaudit.mechanisms.gaussian import release_gaussian",
    "from dpaudit.mechanisms.discrete import sample_discrete_laplace",
    "import dpaudit.mechanisms.laplace",
    "from dpaudit.mechanisms import laplace",
    "def f():\n    from dpaudit.mechanisms.randomness import SecureRandom\n",
])
def test_the_check_catches_a_sampler_or_calibration_import(source: str) -> None:
    assert mechanism_imports(source)
