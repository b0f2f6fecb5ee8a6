"""The plugin contract: what every dpaudit plugin must do, as pytest tests a plugin author runs on their plugin.

Subclass :class:`PluginContract` in a test module (the subclass's name must start with ``Test``) and name the
plugin; pytest then runs every ``test_*`` method below against it (docs/plugin-author.md)::

    from dpaudit.testing import PluginContract
    from my_package import PLUGIN

    class TestMyPlugin(PluginContract):
        plugin = PLUGIN                 # the Plugin object, or the name of an installed one
        budget = (10.0, 1e-5)           # (ε, δ) of the session the smoke run gets

The plugin's smoke configuration runs twice, each time in a fresh seeded :class:`~dpaudit.session.Session` of
its own store (MLflow mirror off; the certificate is marked "not for release"): once with :attr:`budget`, once
with the too-small :attr:`tiny_epsilon`. The checks (DESIGN.md, "Plugin"):

* metadata is complete and the smoke configuration is plain JSON;
* the smoke run returns plain-JSON results holding no confidential key (:mod:`dpaudit.public_values`);
* it charges something, and only the event kinds the plugin declares;
* the certificate's claim stays within the budget, and the certificate lists the plugin and its version;
* the plugin's statement about its protected set's size (``Plugin.dataset_size_public``) agrees with the
  certificate: the assumption ``dataset-size-public`` is listed exactly when the plugin states the size public;
* ``dpaudit verify`` finds the evidence bundle valid (:func:`~dpaudit.verify.verify_bundle`);
* every charge and release record names the plugin: the plugin acts through its view of the session,
  ``session.for_plugin(name, version)``, not through the bare session (whose records name ``"session"``);
* with a too-small budget the run raises :class:`~dpaudit.errors.BudgetExceeded`, and nothing was charged or
  released: a plan the budget cannot pay for is refused before any output exists.

The kit needs pytest (``pip install dpaudit[test]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dpaudit import canonical
from dpaudit.errors import BudgetExceeded
from dpaudit.events import EVENT_KINDS, PrivacyEvent
from dpaudit.ledger import Record, read_records
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.public_values import find_confidential
from dpaudit.registry import DATASET_SIZE_PUBLIC, Plugin, get_plugin
from dpaudit.session import Session
from dpaudit.trust import KeyTrust
from dpaudit.verify import VerificationReport, verify_bundle

#: event kinds that only combine other events; a plugin's charges may use them around its declared kinds
COMBINATOR_KINDS: frozenset[str] = frozenset({"composed", "self_composed"})

@dataclass(frozen=True)
class SmokeRun:
    """One run of a plugin's smoke configuration in an audited session, and what it left behind.

    Attributes:
        run_dir: the closed session's run folder (the evidence bundle).
        budget: the session's (ε, δ).
        results: what ``plugin.run`` returned, or None when it raised BudgetExceeded.
        refused: the BudgetExceeded it raised, or None.
        records: the ledger's records.
        certificate: the signed certificate.
        verification: ``verify_bundle``'s report on the run folder.
    """

    run_dir: Path
    budget: tuple[float, float]
    results: dict[str, Any] | None
    refused: BudgetExceeded | None
    records: list[Record]
    certificate: dict[str, Any]
    verification: VerificationReport

    def records_of(self, *types: str) -> list[Record]:
        """The ledger records of the given types, in ledger order."""
        return [r for r in self.records if r.type in types]


def run_smoke(plugin: Plugin, config: Mapping[str, Any], store: Path, budget: tuple[float, float], *,
              neighbouring: str = "add_remove", seed: int = 0) -> SmokeRun:
    """Run ``plugin`` on ``config`` in a fresh seeded session of ``store``, close it, and verify its bundle.

    A :class:`~dpaudit.errors.BudgetExceeded` from the plugin is caught and recorded (the session still closes and
    is verified); any other exception propagates (the session closes as FAILED).

    Args:
        plugin: the plugin.
        config: its configuration.
        store: a run store of the run's own (its signing key is the one trusted by the verification).
        budget: the session's (ε, δ).
        neighbouring: the session's neighbouring relation.
        seed: seed of the session's randomness (the certificate is marked "not for release").
    """
    refused: BudgetExceeded | None = None
    results: dict[str, Any] | None = None
    with Session(epsilon=budget[0], delta=budget[1], name=f"contract-{plugin.name}", neighbouring=neighbouring,
                 protected=plugin.protected or ("private data set",), public=plugin.public, rng=SeededRandom(seed),
                 store=store, mirror=False) as session:
        try:
            results = plugin.run(session, config)
        except BudgetExceeded as exc:
            refused = exc
    records, problems = read_records(session.ledger_path)
    assert not problems, f"the ledger does not read back: {problems}"
    trust = KeyTrust.default(store, trust_store=store / "trusted_keys.json")  # the store's own key, nothing else
    return SmokeRun(run_dir=session.run_dir, budget=budget, results=results, refused=refused, records=records,
                    certificate=json.loads(session.certificate_path.read_text(encoding="utf-8")),
                    verification=verify_bundle(session.run_dir, allow_not_for_release=True, trust=trust))


def charged_kinds(records: list[Record]) -> set[str]:
    """Every event kind charged in ``records``: each charge's own kind and the kinds of its leaves."""
    kinds: set[str] = set()
    for record in records:
        if record.type == "charge":
            event = PrivacyEvent.from_dict(record.body["event"])
            kinds.add(event.kind)
            kinds.update(leaf.kind for leaf, _ in event.leaves())
    return kinds


class PluginContract:
    """Base class of a plugin's contract tests (pytest collects subclasses named ``Test*``).

    Class attributes (set by the subclass; only :attr:`plugin` is required):
        plugin: the :class:`~dpaudit.registry.Plugin`, or the name of an installed one.
        smoke_config: the configuration to run (default: the plugin's own ``smoke_config``).
        budget: (ε, δ) of the smoke run's session; the run must fit in it.
        tiny_epsilon: an ε too small for the smoke configuration; the run must be refused.
        neighbouring: the sessions' neighbouring relation.
        seed: seed of the sessions' randomness.
    """

    plugin: ClassVar[Plugin | str]
    smoke_config: ClassVar[Mapping[str, Any] | None] = None
    budget: ClassVar[tuple[float, float]] = (10.0, 1e-5)
    tiny_epsilon: ClassVar[float] = 1e-3
    neighbouring: ClassVar[str] = "add_remove"
    seed: ClassVar[int] = 0

    @classmethod
    def _plugin(cls) -> Plugin:
        return cls.plugin if isinstance(cls.plugin, Plugin) else get_plugin(cls.plugin)

    @classmethod
    def _config(cls) -> Mapping[str, Any]:
        return cls._plugin().smoke_config if cls.smoke_config is None else cls.smoke_config

    @pytest.fixture(scope="class")
    @classmethod
    def smoke(cls, tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
        """The smoke configuration run once per contract class, within :attr:`budget`."""
        return run_smoke(cls._plugin(), cls._config(), tmp_path_factory.mktemp("contract-runs"), cls.budget,
                         neighbouring=cls.neighbouring, seed=cls.seed)

    @pytest.fixture(scope="class")
    @classmethod
    def starved(cls, tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
        """The smoke configuration run once per contract class with the too-small ε :attr:`tiny_epsilon`."""
        return run_smoke(cls._plugin(), cls._config(), tmp_path_factory.mktemp("contract-starved"),
                         (cls.tiny_epsilon, cls.budget[1]), neighbouring=cls.neighbouring, seed=cls.seed)

    def test_metadata_is_complete(self) -> None:
        plugin = self._plugin()
        for attr in ("name", "version", "summary", "citation"):
            text = getattr(plugin, attr)
            assert isinstance(text, str) and text.strip(), f"{attr} is empty"
        unknown = set(plugin.event_kinds) - set(EVENT_KINDS)
        assert not unknown, f"declared event kinds unknown to dpaudit: {sorted(unknown)}"
        canonical.dumps(dict(self._config()))  # the smoke configuration is plain JSON

    def test_smoke_run_returns_public_json_results(self, smoke: SmokeRun) -> None:
        assert smoke.refused is None, f"the smoke run was refused within its budget {smoke.budget}: {smoke.refused}"
        assert isinstance(smoke.results, dict), f"run returned {type(smoke.results).__name__}, not a dict"
        canonical.dumps(smoke.results)  # plain JSON: no tensors, arrays or NaN
        found = find_confidential(smoke.results)
        assert found is None, f"the results hold the confidential key {found!r} (a raw, data-dependent value)"

    def test_smoke_run_charges_only_declared_event_kinds(self, smoke: SmokeRun) -> None:
        kinds = charged_kinds(smoke.records)
        assert kinds, "the smoke run charged nothing"
        undeclared = kinds - set(self._plugin().event_kinds) - COMBINATOR_KINDS
        assert not undeclared, f"charged event kinds the plugin does not declare: {sorted(undeclared)}"

    def test_claim_stays_within_the_budget(self, smoke: SmokeRun) -> None:
        claim = smoke.certificate["claim"]
        assert claim["epsilon"] <= smoke.budget[0], f"claimed epsilon {claim['epsilon']} > budget {smoke.budget[0]}"
        assert claim["delta"] <= smoke.budget[1], f"claimed delta {claim['delta']} > budget {smoke.budget[1]}"

    def test_bundle_verifies(self, smoke: SmokeRun) -> None:
        assert smoke.verification.valid, f"dpaudit verify: {smoke.verification.reasons}"

    def test_certificate_lists_the_plugin(self, smoke: SmokeRun) -> None:
        plugin = self._plugin()
        listed = smoke.certificate.get("plugins", {})
        assert listed.get(plugin.name) == plugin.version, f"certificate lists {listed}, not {plugin.name}"

    def test_dataset_size_statement_matches_the_certificate(self, smoke: SmokeRun) -> None:
        plugin = self._plugin()
        listed = DATASET_SIZE_PUBLIC in {a["id"] for a in smoke.certificate["assumptions"]}
        if plugin.dataset_size_public:
            assert listed, (f"the plugin states its protected set's size public (dataset_size_public=True) but the "
                            f"certificate does not list the assumption {DATASET_SIZE_PUBLIC!r}: its charges must "
                            "carry it")
        else:
            assert not listed, (f"the certificate lists {DATASET_SIZE_PUBLIC!r} but the plugin states the size "
                                "private (dataset_size_public=False): state it public, or stop using the size")

    def test_every_charge_and_release_names_the_plugin(self, smoke: SmokeRun) -> None:
        name = self._plugin().name
        for record in smoke.records_of("charge", "release"):
            named = record.body.get("plugin")
            assert named == name, (
                f"{record.type} record {record.seq} is attributed to {named!r}, not to {name!r} (act through "
                f"session.for_plugin({name!r}, version))")

    def test_tiny_budget_is_refused_before_any_release(self, starved: SmokeRun) -> None:
        assert starved.refused is not None, (
            f"with epsilon={starved.budget[0]} the smoke run was not refused (BudgetExceeded): choose a smaller "
            "tiny_epsilon, or the plugin does not ask the budget before it acts")
        released = starved.records_of("release")
        assert not released, f"{len(released)} outputs were released before the run was refused"
        assert starved.certificate["claim"]["epsilon"] <= starved.budget[0]
        assert starved.verification.valid, f"dpaudit verify: {starved.verification.reasons}"
