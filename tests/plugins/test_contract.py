"""The kernel's plugin contract, checked for every installed plugin (DESIGN.md, "Plugin").

A plugin must: carry non-empty metadata; run its smoke configuration inside a seeded Session; charge only the
event kinds it declares; never push the session past its budget (a too-small budget ends in BudgetExceeded or a
run within budget, never an overspend); return public, JSON-able results; and leave a valid hash-chained ledger.
"""

from __future__ import annotations

import contextlib

import pytest

from dpaudit import BudgetExceeded, Session, canonical
from dpaudit.events import EVENT_KINDS, PrivacyEvent
from dpaudit.ledger import read_records, verify_chain
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.registry import Plugin, load_plugins

# Opacus hooks the first layer, whose input needs no gradient; torch notes it once per module (harmless).
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

PLUGINS = list(load_plugins().values())  # a plugin that fails to load fails collection, loudly


def _session(plugin: Plugin, tmp_path, epsilon: float) -> Session:
    return Session(epsilon=epsilon, delta=1e-5, name=f"contract-{plugin.name}", rng=SeededRandom(0),
                   store=tmp_path / "runs", mirror=False, protected=plugin.protected or ("private data set",),
                   public=plugin.public)


def _charged_kinds(session: Session) -> set[str]:
    records, _ = read_records(session.ledger_path)
    kinds: set[str] = set()
    for r in records:
        if r.type == "charge":
            event = PrivacyEvent.from_dict(r.body["event"])
            kinds.add(event.kind)
            kinds.update(leaf.kind for leaf, _ in event.leaves())
    return kinds


def _assert_valid_ledger(session: Session) -> None:
    records, problems = read_records(session.ledger_path)
    assert not problems and not verify_chain(records)
    assert records[0].type == "open" and records[-1].type == "close"
    assert sum(r.type == "close" for r in records) == 1


def test_at_least_one_plugin_is_installed():
    assert PLUGINS


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_metadata(plugin: Plugin):
    for text in (plugin.name, plugin.version, plugin.summary, plugin.citation):
        assert isinstance(text, str) and text.strip()
    assert plugin.event_kinds and set(plugin.event_kinds) <= set(EVENT_KINDS)
    assert callable(plugin.run)
    canonical.dumps(dict(plugin.smoke_config))  # the smoke config is plain JSON


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_smoke_run_keeps_the_contract(plugin: Plugin, tmp_path):
    with _session(plugin, tmp_path, epsilon=10.0) as s:
        out = plugin.run(s, plugin.smoke_config)
        assert isinstance(out, dict)
        canonical.dumps(out)  # public results are plain JSON (no tensors, no NaN)
        kinds = _charged_kinds(s)
        assert kinds, "the smoke run charged nothing"
        assert kinds <= set(plugin.event_kinds) | {"composed", "self_composed"}
        assert s.spent_epsilon() <= s.budget[0]
    _assert_valid_ledger(s)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_tiny_budget_is_never_exceeded(plugin: Plugin, tmp_path):
    with _session(plugin, tmp_path, epsilon=1e-3) as s:
        with contextlib.suppress(BudgetExceeded):
            plugin.run(s, plugin.smoke_config)
        assert s.spent_epsilon() <= s.budget[0]
    _assert_valid_ledger(s)
