"""The shipped plugin contract (dpaudit.testing.PluginContract) catches plugins that break it.

Each broken plugin below differs from a well-behaved one (``_good``) in one way, and exactly the check about that
way fails on it; the well-behaved one passes every check (the control). The plugins touch no data: they release
public constants, which is enough to exercise the session path the contract inspects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dpaudit.events import EVENT_KINDS
from dpaudit.registry import DATASET_SIZE_PUBLIC, Plugin
from dpaudit.sensitivity import Assumption
from dpaudit.testing import PluginContract, SmokeRun, run_smoke

BUDGET = (1.0, 1e-6)


def _plugin(run: Callable, *, event_kinds: tuple[str, ...] = ("laplace",), name: str = "toy",
            dataset_size_public: bool = False) -> Plugin:
    return Plugin(name=name, version="0.1", summary="a toy", citation="none", event_kinds=event_kinds, run=run,
                  smoke_config={}, protected=("toy data",), dataset_size_public=dataset_size_public)


def _good(session, config) -> dict:
    view = session.for_plugin("toy", "0.1")
    return {"value": float(view.laplace(3.0, 1.0, 0.5, label="a public constant"))}


def _undeclared_kind(session, config) -> dict:
    view = session.for_plugin("toy", "0.1")
    return {"index": view.exponential([0.0, 1.0], 1.0, 0.5)}


def _confidential_result(session, config) -> dict:
    return {**_good(session, config), "true_value": 3.0}


def _array_result(session, config) -> dict:
    return {"value": np.asarray([_good(session, config)["value"]])}


def _unregistered(session, config) -> dict:
    event = session.laplace_event(1.0, 0.5)
    charge = session.charge(event, plugin="toy", mechanism="laplace")
    session.record_release(charge, 3.0)
    return {}


def _charges_as_another_plugin(session, config) -> dict:
    session.for_plugin("toy", "0.1")
    session.for_plugin("someone-else", "2.0").laplace(3.0, 1.0, 0.5)
    return {}


def _bare_session(session, config) -> dict:
    session.for_plugin("toy", "0.1")
    return {"value": float(session.laplace(3.0, 1.0, 0.5))}  # attributed to "session", not to the plugin


def _releases_before_asking_the_budget(session, config) -> dict:
    view = session.for_plugin("toy", "0.1")
    view.laplace(1.0, 1.0, 1e-4, label="a cheap first release")
    return {"value": float(view.laplace(3.0, 1.0, 0.5))}


def _never_refused(session, config) -> dict:
    view = session.for_plugin("toy", "0.1")
    return {"value": float(view.laplace(3.0, 1.0, 1e-4))}


def _uses_the_size(session, config) -> dict:
    """A release whose event carries the assumption that the protected set's size is public."""
    view = session.for_plugin("toy", "0.1")
    event = dataclasses.replace(view.laplace_event(1.0, 0.5, label="a mean over a public n"), assumptions=(
        Assumption(id=DATASET_SIZE_PUBLIC, statement="n is public: the mean divides by it"),))
    charge = view.charge(event, mechanism="laplace")
    view.record_release(charge, 3.0)
    return {}


def _nothing_charged(session, config) -> dict:
    session.for_plugin("toy", "0.1")
    return {}


def _contract(plugin: Plugin) -> PluginContract:
    return type("Contract", (PluginContract,), {"plugin": plugin, "budget": BUDGET})()


def _runs(plugin: Plugin, tmp_path: Path) -> dict[str, SmokeRun]:
    return {"smoke": run_smoke(plugin, {}, tmp_path / "smoke", BUDGET),
            "starved": run_smoke(plugin, {}, tmp_path / "starved", (1e-3, BUDGET[1]))}


def _checks() -> list[str]:
    return sorted(name for name in dir(PluginContract) if name.startswith("test_"))


def _call(contract: PluginContract, check: str, runs: dict[str, SmokeRun]) -> None:
    method = getattr(contract, check)
    arguments = method.__code__.co_varnames[1:method.__code__.co_argcount]
    method(**{a: runs[a] for a in arguments})


def test_a_well_behaved_plugin_passes_every_check(tmp_path: Path) -> None:
    plugin = _plugin(_good)
    runs = _runs(plugin, tmp_path)
    for check in _checks():
        _call(_contract(plugin), check, runs)


@pytest.mark.parametrize(("plugin", "failing", "message"), [
    (_plugin(_undeclared_kind), "test_smoke_run_charges_only_declared_event_kinds", "does not declare"),
    (_plugin(_confidential_result), "test_smoke_run_returns_public_json_results", "confidential key 'true_value'"),
    (_plugin(_array_result), "test_smoke_run_returns_public_json_results", None),
    (_plugin(_unregistered), "test_certificate_lists_the_plugin", "certificate lists"),
    (_plugin(_charges_as_another_plugin), "test_every_charge_and_release_names_the_plugin", "someone-else"),
    (_plugin(_bare_session), "test_every_charge_and_release_names_the_plugin", "'session'"),
    (_plugin(_releases_before_asking_the_budget), "test_tiny_budget_is_refused_before_any_release",
     "released before"),
    (_plugin(_never_refused), "test_tiny_budget_is_refused_before_any_release", "was not refused"),
    (_plugin(_good, dataset_size_public=True), "test_dataset_size_statement_matches_the_certificate",
     "does not list the assumption"),
    (_plugin(_uses_the_size), "test_dataset_size_statement_matches_the_certificate", "states the size private"),
], ids=lambda v: getattr(getattr(v, "run", None), "__name__", "")[1:] or None)
def test_the_contract_catches_a_broken_plugin(plugin: Plugin, failing: str, message: str | None,
                                              tmp_path: Path) -> None:
    """Exactly the named check fails; every other check passes (so each check tests one thing)."""
    runs = _runs(plugin, tmp_path)
    failed = []
    for check in _checks():
        try:
            _call(_contract(plugin), check, runs)
        except Exception as exc:  # an assertion, or canonical.dumps refusing a non-JSON value
            failed.append(check)
            if check == failing and message is not None:
                assert message in str(exc)
    assert failed == [failing]


def test_a_plugin_that_charges_nothing_fails_the_kinds_and_the_tiny_budget_checks(tmp_path: Path) -> None:
    plugin = _plugin(_nothing_charged)
    runs = _runs(plugin, tmp_path)
    contract = _contract(plugin)
    with pytest.raises(AssertionError, match="charged nothing"):
        contract.test_smoke_run_charges_only_declared_event_kinds(runs["smoke"])
    with pytest.raises(AssertionError, match="was not refused"):
        contract.test_tiny_budget_is_refused_before_any_release(runs["starved"])


def test_undeclared_event_kind_names_are_caught_in_the_metadata() -> None:
    plugin = _plugin(_good, event_kinds=("laplace", "no-such-mechanism"))
    assert "no-such-mechanism" not in EVENT_KINDS
    with pytest.raises(AssertionError, match="no-such-mechanism"):
        _contract(plugin).test_metadata_is_complete()


def test_a_plugin_may_be_named_instead_of_given() -> None:
    """``plugin = "<name>"`` looks the plugin up among the installed ones (entry-point group dpaudit.plugins)."""
    contract = type("Contract", (PluginContract,), {"plugin": "opacus-training"})()
    contract.test_metadata_is_complete()
