"""Per-component costs: computed at close, signed in the certificate, read by the report, recomputed by verify."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.accounting.pld import CURRENT_FOLD
from dpaudit.components import component_costs, group_charges
from dpaudit.display import COMPONENT_DIGITS, round_up
from dpaudit.errors import AccountingError
from dpaudit.events import compose
from dpaudit.ledger import read_records
from dpaudit.records import OpenBody
from dpaudit.report import build_report
from dpaudit.verify import verify_bundle
from tests.dpaudit.test_verify import _resign


@pytest.fixture
def bundle(make_session, tmp_path) -> Path:
    with make_session(epsilon=2.0, delta=1e-6) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=0.2, label="count")
        s.laplace(5.0, sensitivity=1.0, epsilon=0.1, label="count again")
        s.gaussian(2.0, sensitivity=1.0, epsilon=0.3, delta=1e-7, label="sum")
    copy = tmp_path / "bundle"
    shutil.copytree(s.run_dir, copy)
    return copy


def _certificate(bundle: Path) -> dict:
    return json.loads((bundle / "certificate.json").read_text())


def _failed(bundle: Path) -> dict[str, str]:
    report = verify_bundle(bundle, allow_not_for_release=True)
    return {c.name: c.detail for c in report.checks if not c.ok}


def test_the_certificate_carries_each_components_cost_composed_alone(bundle):
    cert = _certificate(bundle)
    records, _ = read_records(bundle / "ledger.jsonl")
    opened = OpenBody.from_dict(records[0].body)
    accountant = get_accountant(cert["claim"]["accountant"])
    expected = []
    for key, events in group_charges(records).items():
        epsilon, source = accountant.epsilon_with_source(compose(events), opened.delta)
        expected.append({"component": key, "epsilon": round_up(epsilon, COMPONENT_DIGITS), "attained_by": source,
                         "note": None})
    assert cert["components"] == expected
    assert [c["component"] for c in expected] == ["session/laplace", "session/gaussian"]


def test_the_report_reads_the_certificates_components_and_old_certificates_compute_them(bundle, tmp_path):
    from_certificate = build_report(bundle)["groups"]
    _resign(bundle, tmp_path, edit=lambda c: c.pop("components"))  # a certificate made before the field
    assert verify_bundle(bundle, allow_not_for_release=True).valid
    assert build_report(bundle)["groups"] == from_certificate


def test_a_forged_lower_component_claim_is_caught_by_verify(bundle, tmp_path):
    """Attack: an insider re-signs the certificate (the store's own key) with a smaller ε for one component, so
    the report understates what the Gaussian release cost. verify recomputes every component and names it."""
    def lower(cert: dict) -> None:
        cert["components"][1]["epsilon"] = cert["components"][1]["epsilon"] * 0.99

    _resign(bundle, tmp_path, edit=lower)
    failed = _failed(bundle)
    assert set(failed) == {"components"} and "session/gaussian" in failed["components"]


def test_a_higher_component_claim_is_still_an_upper_bound(bundle, tmp_path):
    def higher(cert: dict) -> None:
        cert["components"][0]["epsilon"] = 1.0

    _resign(bundle, tmp_path, edit=higher)
    assert _failed(bundle) == {}


@pytest.mark.parametrize("edit", [lambda c: c["components"].pop(), lambda c: c["components"][0].update(component="x/y"),
                                  lambda c: c.update(components="all fine")])
def test_components_that_are_not_the_ledgers_fail(bundle, tmp_path, edit):
    _resign(bundle, tmp_path, edit=edit)
    assert "components" in _failed(bundle)


def test_an_adaptive_sessions_components_claim_nothing_and_verify(make_session):
    with make_session(epsilon=2.0, delta=1e-5, adaptive=True) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    cert = _certificate(s.run_dir)
    assert [c["epsilon"] for c in cert["components"]] == [None]
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_component_costs_of_a_single_component_reuse_the_claim(bundle):
    records, _ = read_records(bundle / "ledger.jsonl")
    events = [e for group in group_charges(records).values() for e in group]
    claim = {"epsilon": 0.123456, "attained_by": "pld"}
    cost = component_costs(OpenBody.from_dict(records[0].body), [events], len(events), claim)
    assert cost == [{"epsilon": round_up(0.123456, COMPONENT_DIGITS), "attained_by": "pld", "note": None}]


def test_components_are_recomputed_with_the_pld_fold_the_claim_records(bundle):
    """A component is recomputed as the claim's accountant version says: a PLD fold this code does not have
    (``pld/1``) fails the whole recomputation naming the version (a per-component "n/a" would let a forged version
    switch the components check off, tests/dpaudit/test_verify.py)."""
    records, _ = read_records(bundle / "ledger.jsonl")
    groups = list(group_charges(records).values())
    total = sum(len(group) for group in groups)
    opened = OpenBody.from_dict(records[0].body)
    claim = {"epsilon": 1.0, "attained_by": "pld", "accountant_version": get_accountant("tightest").version()}
    current = component_costs(opened, groups, total, claim, ["pld"] * len(groups))
    assert all(cost["epsilon"] is not None for cost in current)
    claim["accountant_version"] = claim["accountant_version"].replace(CURRENT_FOLD, "pld/1")
    with pytest.raises(AccountingError, match="pld/1"):
        component_costs(opened, groups, total, claim, ["pld"] * len(groups))


def test_report_of_a_closed_run_imports_no_accountant(bundle):
    """The report reads the signed components: no dp_accounting (nearly a second of start-up) for a closed run, and
    no scipy (the Gaussian mechanism's module, which the report's record decoding imports, defers it)."""
    code = ("import sys\nfrom dpaudit.cli import main\nimport atexit\n"
            "atexit.register(lambda: print('LOADED', 'dp_accounting' in sys.modules, 'scipy' in sys.modules, "
            "file=sys.stderr))\n"
            f"main(['report', {str(bundle)!r}])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "LOADED False False"


def test_verify_recomputes_each_component_with_the_member_that_attained_it_only(bundle, monkeypatch):
    """Speed (issue 14): verify recomputes a component with the member its ``attained_by`` names (here pld), not
    through every member of the tightest accountant; any other member being called fails the test."""
    from dpaudit.accounting.advanced import AdvancedComposition
    from dpaudit.accounting.basic import BasicComposition
    from dpaudit.accounting.rdp import RdpAccountant

    assert {c["attained_by"] for c in _certificate(bundle)["components"]} == {"pld"}

    def not_called(self, *args, **kwargs):
        raise AssertionError(f"{self.name} was called")

    for cls in (RdpAccountant, AdvancedComposition, BasicComposition):
        monkeypatch.setattr(cls, "_epsilon_for", not_called)
    assert _failed(bundle) == {}


@pytest.mark.parametrize("named", ["rdp", "basic", "advanced", "prv", "tightest", "no-such-accountant", None, 7,
                                   "rdp (pld outside its controlled regime: forged)"])
def test_a_forged_lower_component_claim_is_caught_whatever_accountant_it_names(bundle, tmp_path, named):
    """Attack: the forger also renames the accountant that attained the lowered component, to one that fails on it
    (prv models no Laplace), one the run's accountant does not use, or one looser than the truth. verify then
    recomputes with the run's accountant or with a bound at least as large: the lowered claim is still caught."""
    def lower(cert: dict) -> None:
        cert["components"][0].update(epsilon=cert["components"][0]["epsilon"] * 0.99, attained_by=named)

    _resign(bundle, tmp_path, edit=lower)
    failed = _failed(bundle)
    assert set(failed) == {"components"} and "session/laplace" in failed["components"]


def test_a_component_that_names_a_looser_member_must_claim_that_members_bound(bundle, tmp_path):
    """Naming a member makes the check stricter, never looser: the Gaussian release's honest tightest ε (pld) under
    the name "basic", whose bound (its declared ε) is larger, fails."""
    def rename(cert: dict) -> None:
        assert cert["components"][1]["epsilon"] < 0.3  # the pld bound, below basic composition's 0.3
        cert["components"][1]["attained_by"] = "basic"

    _resign(bundle, tmp_path, edit=rename)
    assert set(_failed(bundle)) == {"components"}
