"""The plugin registry: entry-point discovery, strict loading, unknown names."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import dpaudit.registry as registry
from dpaudit.errors import PluginError
from dpaudit.registry import ENTRY_POINT_GROUP, Plugin, get_plugin, load_plugins


def _with_entry_points(monkeypatch, *specs: tuple[str, str]) -> None:
    eps = [EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP) for name, value in specs]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == ENTRY_POINT_GROUP else [])


def test_installed_plugins_load():
    plugins = load_plugins()
    assert "opacus-training" in plugins
    assert all(isinstance(p, Plugin) and p.name == name for name, p in plugins.items())
    assert get_plugin("opacus-training") is plugins["opacus-training"]


def test_unknown_plugin_names_the_installed_ones():
    with pytest.raises(PluginError, match=r"unknown plugin 'no-such-plugin'; installed: .*opacus-training"):
        get_plugin("no-such-plugin")


def test_entry_point_that_fails_to_import_is_an_error_naming_it(monkeypatch):
    _with_entry_points(monkeypatch, ("opacus-training", "dpaudit_plugins.opacus_training:PLUGIN"),
                       ("broken", "dpaudit_no_such_module_xyz:PLUGIN"))
    with pytest.raises(PluginError, match=r"plugin 'broken' .*failed to load: ModuleNotFoundError"):
        load_plugins()
    with pytest.raises(PluginError, match="'broken'"):  # never skipped, even when asking for another plugin
        get_plugin("opacus-training")


def test_entry_point_whose_object_is_not_a_plugin_is_an_error(monkeypatch):
    _with_entry_points(monkeypatch, ("pi", "math:pi"))
    with pytest.raises(PluginError, match=r"plugin 'pi' .*is a float, not a dpaudit Plugin"):
        load_plugins()


def test_entry_point_name_must_match_plugin_name(monkeypatch):
    _with_entry_points(monkeypatch, ("alias", "dpaudit_plugins.opacus_training:PLUGIN"))
    with pytest.raises(PluginError, match="holds a plugin named 'opacus-training'"):
        load_plugins()


def test_duplicate_names_are_an_error(monkeypatch):
    _with_entry_points(monkeypatch, ("opacus-training", "dpaudit_plugins.opacus_training:PLUGIN"),
                       ("opacus-training", "dpaudit_plugins.opacus_training.plugin:run"))
    with pytest.raises(PluginError, match="more than one entry point"):
        load_plugins()


@pytest.mark.parametrize("change", [{"name": ""}, {"citation": "  "}, {"event_kinds": ()}, {"run": 3},
                                    {"smoke_config": None}])
def test_plugin_metadata_is_validated(change):
    fields = {"name": "x", "version": "1", "summary": "s", "citation": "c", "event_kinds": ("laplace",),
              "run": lambda session, config: {}, "smoke_config": {}}
    with pytest.raises(PluginError):
        Plugin(**{**fields, **change})
