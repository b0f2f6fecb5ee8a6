"""Packaging: every package folder is installed, and the plugins install as ``dpaudit_plugins`` (never ``plugins``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _installed_names() -> set[str]:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"dpaudit_plugins": "plugins"}
    return set(setuptools["packages"])


def _package_folders() -> set[str]:
    found = set()
    for init in [*ROOT.joinpath("dpaudit").rglob("__init__.py"), *ROOT.joinpath("plugins").rglob("__init__.py")]:
        parts = init.parent.relative_to(ROOT).parts
        found.add(".".join(("dpaudit_plugins", *parts[1:]) if parts[0] == "plugins" else parts))
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    assert _installed_names() == _package_folders()


def test_plugins_import_as_dpaudit_plugins_and_no_top_level_plugins_module(tmp_path: Path) -> None:
    code = ("import importlib.util, dpaudit_plugins.randtune as r; "
            "print(importlib.util.find_spec('plugins') is None, r.PLUGIN.name)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "randtune"]


def test_an_editable_build_shows_no_same_name_folder_warning(tmp_path: Path) -> None:
    """setup.py filters setuptools' InformationOnly "Editable installation" notice (it does not apply to this
    layout; see its docstring), which pip would print on every ``pip install -e .``; the build itself succeeds."""
    code = f"from setuptools import build_meta; print(build_meta.build_editable({str(tmp_path)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].endswith(".whl")
    assert "same name as your package" not in done.stdout + done.stderr
