"""The shipped plugin contract (dpaudit.testing.PluginContract), run on every installed plugin.

One contract class per plugin found under the ``dpaudit.plugins`` entry-point group; a plugin that fails to load
fails collection, loudly. What the contract checks is listed in dpaudit/testing/plugin_contract.py.
"""

from __future__ import annotations

import re

import pytest

from dpaudit.registry import load_plugins
from dpaudit.testing import PluginContract

# Opacus hooks the first layer, whose input needs no gradient; torch notes it once per module (harmless).
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

PLUGINS = load_plugins()


def _class_name(plugin_name: str) -> str:
    return "Test" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", plugin_name)) + "Contract"


#: plugins whose guarantee is stated under replace-one neighbours only (the contract's default is add/remove)
REPLACE_ONE_ONLY = {"dp-gp"}  # outputs protected at public inputs: a record added or removed would change X

for _plugin in PLUGINS.values():
    globals()[_class_name(_plugin.name)] = type(_class_name(_plugin.name), (PluginContract,), {
        "plugin": _plugin, "neighbouring": "replace_one" if _plugin.name in REPLACE_ONE_ONLY else "add_remove"})
del _plugin


def test_at_least_one_plugin_is_installed() -> None:
    assert PLUGINS


def test_every_installed_plugin_has_a_contract_class() -> None:
    contracts = {cls.plugin.name for cls in globals().values()
                 if isinstance(cls, type) and issubclass(cls, PluginContract) and cls is not PluginContract}
    assert contracts == set(PLUGINS)
