"""verify's ``data-access`` check (dpaudit/data/access.py ``access_problems``): an insider who rewrites the ledger,
rebuilds its chain and re-signs the certificate with the store's own key, so that a charge names a data set the run
never declared protected, or an access reads a set under another role or one never declared, fails verification
with exit 1 and a reason naming the record; the honest ledger passes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import main
from dpaudit.data import arrays
from dpaudit.data.access import access_problems
from dpaudit.ledger import Record, read_records
from tests.dpaudit.test_verify import _forge


@pytest.fixture
def bundle(make_session):
    """A closed seeded run: one charge before any access, the protected set read, then a charge naming it."""
    s = make_session(data=[arrays("clinic", np.ones((4, 2)), np.zeros(4)),
                           arrays("reference", np.ones((3, 2)), role="public")])
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.data("reference")
    s.data("clinic")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.close()
    return s.run_dir


def _edit_charge(data):
    def edit(records: list[Record]) -> list[Record]:
        last = [r for r in records if r.type == "charge"][-1]
        return [replace(r, body={**r.body, "data": data}) if r is last else r for r in records]
    return edit


def _edit_access(**changes):
    def edit(records: list[Record]) -> list[Record]:
        first = next(r for r in records if r.type == "info" and "data_access" in r.body["info"])
        body = {**first.body, "info": {**first.body["info"], **changes}}
        return [replace(r, body=body) if r is first else r for r in records]
    return edit


def test_the_honest_ledger_passes_the_check(bundle):
    records, _ = read_records(bundle / "ledger.jsonl")
    assert access_problems(records) == []
    result = CliRunner().invoke(main, ["verify", str(bundle), "--allow-not-for-release"])
    assert result.exit_code == 0, result.output
    assert "data-access" in CliRunner().invoke(main, ["verify", str(bundle), "--allow-not-for-release",
                                                      "--json"]).output


@pytest.mark.parametrize("edit, reason", [
    (_edit_charge(["hospital-b"]), "names data 'hospital-b', not a protected set of the open record"),
    (_edit_charge(["reference"]), "names data 'reference', not a protected set of the open record"),
    (_edit_access(data_access="hospital-b"), "access to 'hospital-b', which the open record does not declare"),
    (_edit_access(role="protected"), "access to 'reference' as 'protected', declared 'public'"),
])
def test_a_resigned_ledger_naming_undeclared_data_fails_with_exit_1(bundle, tmp_path, edit, reason):
    reasons = _forge(bundle, tmp_path, edit)
    (problem,) = [r for r in reasons if r.startswith("data-access:")]
    assert reason in problem
    result = CliRunner().invoke(main, ["verify", str(bundle), "--allow-not-for-release"])
    assert result.exit_code == 1 and "data-access" in result.output and "Traceback" not in result.output


def test_a_charge_naming_a_protected_set_its_plugin_never_read_fails(bundle, tmp_path):
    """The first charge came before any access: claiming it used ``clinic`` (declared, but not yet read by that
    plugin) is a ledger the session could not have written."""
    def edit(records: list[Record]) -> list[Record]:
        first = next(r for r in records if r.type == "charge")
        return [replace(r, body={**r.body, "data": ["clinic"]}) if r is first else r for r in records]

    (problem,) = [r for r in _forge(bundle, tmp_path, edit) if r.startswith("data-access:")]
    assert "names data 'clinic', which plugin 'session' never accessed before it" in problem


def test_hostile_bodies_are_reported_not_a_crash(bundle):
    """Unhashable names and plugins, non-list fields: each a reason (events-decode also refuses such a charge)."""
    records, _ = read_records(bundle / "ledger.jsonl")
    charge = [r for r in records if r.type == "charge"][-1]
    access = next(r for r in records if r.type == "info" and "data_access" in r.body["info"])
    hostile = [replace(charge, body={**charge.body, "data": [{"name": "clinic"}], "plugin": ["x"]}),
               replace(charge, body={**charge.body, "data": "clinic"}),
               replace(access, body={**access.body, "info": {**access.body["info"], "data_access": ["clinic"]}})]
    problems = access_problems([records[0], *hostile])
    assert len(problems) == 3 and "access to ['clinic']" in problems[2]


def test_only_a_charge_without_data_or_with_an_empty_list_is_passed_over() -> None:
    """The check skips the charges that name no data (10⁵ of them in a long run) before reading anything else; a
    ``data`` of None, 0 or a bare string is still judged (a forged body), as before."""
    bodies = [{"plugin": "x", "data": None}, {"plugin": "x", "data": []}, {"plugin": "x", "data": "p"},
              {"plugin": "x"}, {"plugin": "x", "data": 0}]
    records = [Record(seq=i, type="open" if i == 0 else "charge", time=0.0, prev="0" * 64, hash="0" * 64,
                      body={"protected": ["p"], "public": []} if i == 0 else bodies[i - 1])
               for i in range(len(bodies) + 1)]
    assert access_problems(records) == [
        "charge 1: names data None, not a protected set of the open record",
        "charge 3: names data 'p', which plugin 'x' never accessed before it",
        "charge 5: names data 0, not a protected set of the open record"]
