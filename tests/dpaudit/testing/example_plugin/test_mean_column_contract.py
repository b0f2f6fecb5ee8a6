"""The dpaudit plugin contract, run on the mean-column plugin."""

from mean_column import PLUGIN

from dpaudit.testing import PluginContract


class TestMeanColumn(PluginContract):
    plugin = PLUGIN
    budget = (1.0, 1e-6)
