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


def test_plugin_formulas_load_without_the_plugin_and_register_once():
    """verify needs a plugin's formulas only: load_formulas runs the light formulas module (no torch, no plugin
    package); importing the plugin afterwards reuses that module, so the formula is registered once."""
    import json
    import subprocess
    import sys

    code = ("import json, sys\n"
            "from dpaudit.registry import ensure_formulas\n"
            "from dpaudit.sensitivity import FORMULAS\n"
            "ensure_formulas({'partition_average_utility'})\n"
            "loaded = sorted(m for m in sys.modules if m in ('torch', 'opacus', 'dpaudit_plugins.constant_overhead'))\n"
            "first = FORMULAS['partition_average_utility']\n"
            "import dpaudit_plugins.constant_overhead.utility\n"
            "from dpaudit.registry import load_plugins\n"
            "load_plugins()\n"
            "print(json.dumps({'loaded': loaded, 'same': FORMULAS['partition_average_utility'] is first,\n"
            "                  'kusner': 'kusner_alg3_best_validation' in FORMULAS}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"loaded": [], "same": True, "kusner": True}


def test_a_formula_no_light_module_registers_loads_the_plugins(monkeypatch):
    calls = []
    monkeypatch.setattr(registry, "load_plugins", lambda: calls.append(1))
    registry.ensure_formulas({"bounded_sum"})  # the kernel's: nothing to load
    assert calls == []
    registry.ensure_formulas({"no_light_module_registers_this"})
    assert calls == [1]


def test_a_formulas_module_that_fails_to_load_is_an_error_naming_the_plugin(monkeypatch, tmp_path):
    package = tmp_path / "dpaudit_test_broken_formulas"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('the heavy package must not be imported')\n")
    (package / "formulas.py").write_text("raise ValueError('bad formula')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _with_entry_points(monkeypatch, ("broken", "dpaudit_test_broken_formulas:PLUGIN"))
    with pytest.raises(PluginError, match=r"plugin 'broken': its sensitivity formulas .*ValueError: bad formula"):
        registry.load_formulas()


def test_a_plugin_declares_the_data_sets_of_its_configuration():
    fields = {"name": "x", "version": "1", "summary": "s", "citation": "c", "event_kinds": ("laplace",),
              "run": lambda session, config: {}, "smoke_config": {}, "protected": ("a", "b"), "public": ("c",)}
    assert Plugin(**fields).data_sets({"any": 1}) == (("a", "b"), ("c",))  # without data_for: all declared
    chosen = Plugin(**fields, data_for=lambda config: ((config["set"],), ()))
    assert chosen.data_sets({"set": "b"}) == (("b",), ())
    with pytest.raises(PluginError, match="does not declare protected: \\['c'\\]"):
        chosen.data_sets({"set": "c"})  # a name outside the declared protected sets
    with pytest.raises(PluginError, match="data_for must be callable"):
        Plugin(**fields, data_for=3)
