"""docs/plugin-author.md and the example plugin the suite runs are the same code, and its registration works."""

from __future__ import annotations

import re
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from dpaudit import registry
from dpaudit.testing import PluginContract

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "plugin-author.md"
EXAMPLE = Path(__file__).resolve().parent / "example_plugin"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", GUIDE.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_guide_shows_the_example_plugin_and_its_contract_verbatim() -> None:
    plugin, contract = _blocks("python")
    assert plugin == (EXAMPLE / "mean_column.py").read_text(encoding="utf-8")
    assert contract == (EXAMPLE / "test_mean_column_contract.py").read_text(encoding="utf-8")


def test_the_example_plugin_is_about_25_lines() -> None:
    code = [line for line in (EXAMPLE / "mean_column.py").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(code) <= 25


def test_the_guide_s_entry_point_loads_the_example_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registration the guide shows, read from the guide, found by the registry (without installing)."""
    (toml,) = _blocks("toml")
    group, name, value = re.fullmatch(r'\[project\.entry-points\."([^"]+)"\]\n(\S+) = "([^"]+)"\n', toml).groups()
    assert group == registry.ENTRY_POINT_GROUP
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "mean_column", raising=False)
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [EntryPoint(name=name, value=value, group=group)])
    plugin = registry.get_plugin(name)
    assert plugin.name == name and plugin.event_kinds == ("laplace",)


def test_the_guide_lists_every_check_of_the_contract() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    checks = {name for name in dir(PluginContract) if name.startswith("test_")}
    assert checks and {c for c in checks if f"| `{c}` |" not in text} == set()
