"""No plugin imports another plugin or reads data itself: walk every module under plugins/ with ``ast``.

A plugin may import the kernel (``dpaudit.*``, the tuning kit ``dpaudit.tuning`` included) and its own package; from
``dpaudit.data`` only names (data-set name constants, the ``DataSet`` type) and the declaration check, never a
loader: its data comes through ``Session.data`` (docs/data.md, "Data through the session").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
PACKAGE = "dpaudit_plugins"
#: what a plugin may import from dpaudit.data (everything else there reads data)
DATA_NAMES_ALLOWED = {"dpaudit.data.catalog": {"DataSet"}, "dpaudit.data.access": {"require_data"}}


def _imports(tree: ast.AST) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, imported names, line) of every import statement, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, (), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"line {node.lineno}: relative import (name the package in full)")
            found.append((node.module or "", tuple(a.name for a in node.names), node.lineno))
    return found


def violations(source: str, plugin: str) -> list[str]:
    """Why ``source`` (a module of the plugin package ``plugin``) breaks the isolation rules; empty if it does not."""
    out = []
    for module, names, line in _imports(ast.parse(source)):
        parts = module.split(".")
        if parts[0] == "plugins" or (parts[0] == PACKAGE and parts[1:2] != [plugin]):
            out.append(f"line {line}: imports another plugin ({module})")
        if module == "dpaudit.data.adult" or (module == "dpaudit.data" and not names):
            out.append(f"line {line}: imports the data loaders' module {module}")
        elif module == "dpaudit.data" or module.startswith("dpaudit.data."):
            allowed = DATA_NAMES_ALLOWED.get(module, set())
            loaders = [n for n in names if not (n.isupper() or n in allowed)] or ([] if names else [module])
            if loaders:
                out.append(f"line {line}: imports data loading from {module} ({', '.join(loaders)})")
    return out


def _modules() -> list[tuple[str, Path]]:
    return [(path.parent.name, path) for path in sorted(PLUGINS.glob("*/**/*.py"))]


def test_the_walk_sees_every_plugin():
    assert {plugin for plugin, _ in _modules()} >= {"constant_overhead", "kusner_bo", "naive", "opacus_training",
                                                    "randtune"}


@pytest.mark.parametrize("plugin,path", _modules(), ids=lambda v: str(v.relative_to(PLUGINS)) if isinstance(v, Path)
                         else v)
def test_no_plugin_imports_another_plugin_or_a_data_loader(plugin, path):
    assert violations(path.read_text(encoding="utf-8"), plugin) == []


@pytest.mark.parametrize("source", [
    "from dpaudit_plugins.opacus_training.candidates import Candidate",
    "import dpaudit_plugins.opacus_training",
    "from plugins.naive import PLUGIN",
    "def f():\n    from dpaudit_plugins.randtune import tune\n",
    "from dpaudit.data.adult import TRAIN_NAME",
    "from dpaudit.data import load_adult",
    "from dpaudit.data.catalog import load",
    "from dpaudit.data.access import open_data",
    "import dpaudit.data.adult",
])
def test_the_rules_catch_each_way_round_them(source):
    """The checker itself, attacked: each of these imports (the ones plugins used before) must be reported."""
    assert violations(source, "naive")


def test_the_rules_allow_the_kernel_and_the_plugins_own_package():
    source = ("from dpaudit.tuning import Candidate\nfrom dpaudit_plugins.naive.config import NaiveConfig\n"
              "from dpaudit.data.catalog import TRAIN_NAME, DataSet\nfrom dpaudit.data.access import require_data\n")
    assert violations(source, "naive") == []
