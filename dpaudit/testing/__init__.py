"""The test kit for plugin and accountant authors, shipped with dpaudit (docs/plugin-author.md).

* :class:`PluginContract`: pytest tests every plugin must pass (smoke run in an audited session, verification,
  attribution, declared event kinds, budget, public results, refusal of a too-small budget).
* :class:`AccountantContract` and :class:`Reference`: pytest tests every accountant must pass.
* :mod:`dpaudit.testing.events`: calibrated privacy events with defaults (``laplace_event``, ``gaussian_event``,
  ``dpsgd_event``).
* :func:`dp_test`: the statistical DP tester, false-alarm probability ≤ ``alpha`` for a correct mechanism.
* :func:`max_neighbour_change`: brute-force sensitivity of a query over small neighbouring data sets, to test a
  sensitivity formula against.
* :func:`mentions_number`: whether a run's published output mentions a number (a size stated private must not).

The contracts need pytest (``pip install dpaudit[test]``).
"""

from dpaudit.testing.accountant_contract import AccountantContract, Reference
from dpaudit.testing.disclosure import mentions_number
from dpaudit.testing.plugin_contract import PluginContract, SmokeRun, run_smoke
from dpaudit.testing.sensitivity import max_neighbour_change
from dpaudit.testing.statistical import DPTestResult, clopper_pearson, dp_test

__all__ = [
    "AccountantContract",
    "DPTestResult",
    "PluginContract",
    "Reference",
    "SmokeRun",
    "clopper_pearson",
    "dp_test",
    "max_neighbour_change",
    "mentions_number",
    "run_smoke",
]
