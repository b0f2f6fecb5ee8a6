"""Session.for_plugin: the plugin is registered once and every charge, release, info record and data access made
through its view is attributed to it (never to "session" or to another plugin)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.errors import BudgetExceeded, DPAuditError, InvalidParameter
from dpaudit.ledger import read_records
from dpaudit.plugin_session import PluginSession
from dpaudit.sensitivity import from_formula

NAME, VERSION = "toy-plugin", "1.2.3"


def _records(session) -> list:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return records


def _attributions(session) -> set[tuple[str, str]]:
    """(record type, plugin) of every record that names a plugin."""
    return {(r.type, r.body["plugin"]) for r in _records(session) if "plugin" in r.body}


def test_every_act_through_the_view_is_attributed_to_the_plugin(make_session):
    """Attack: a release made through a mechanism façade (laplace, gaussian, exponential, randomized response,
    AboveThreshold, repeat-and-select) used to be recorded as plugin "session"; each kind of record is checked."""
    s = make_session(epsilon=50.0, delta=1e-5, protected=("adult-train",), public=("adult-test",))
    view = s.for_plugin(NAME, VERSION)
    view.laplace(3.0, 1.0, 0.5, label="l")
    view.gaussian(np.array([1.0, 2.0]), 1.0, 0.5, 1e-7, label="g")
    view.exponential([0.1, 0.9, 0.3], 1.0, 0.5, label="e")
    assert isinstance(view.randomized_response(True, 0.5, label="rr"), bool)
    assert isinstance(view.above_threshold(10.0, 1.0, 0.5, max_queries=2).test(0.0), bool)
    rounds = view.above_threshold_rounds(1.0, 0.5, max_queries=1, rounds=2)
    rounds.next_round(10.0).test(0.0)
    base = view.laplace_event(1.0, 0.1)
    charge, _ = view.repeat_and_select(base, "geometric", {"gamma": 0.5}, label="r")
    view.record_release(charge, {"selected": None})
    own = view.charge(view.laplace_event(1.0, 0.1, label="c"), mechanism="laplace")
    view.record_release(own, 1.0)
    view.record_info({"note": "public"})
    view.log_public_metrics({"accuracy": 0.5})
    view.data("adult-test", rows=4)
    certificate = s.close()

    kinds = {kind for kind, _ in _attributions(s)}
    assert kinds == {"charge", "release", "info"}
    assert _attributions(s) == {(kind, NAME) for kind in kinds}
    assert certificate["plugins"] == {NAME: VERSION}


def test_registration_is_once_per_version(make_session):
    s = make_session()
    first = s.for_plugin(NAME, VERSION)
    again = s.for_plugin(NAME, VERSION)  # the same plugin asking twice: another view, one registration
    assert isinstance(first, PluginSession) and again.plugin == NAME and again.version == VERSION
    with pytest.raises(InvalidParameter, match="registered at version"):
        s.for_plugin(NAME, "9.9.9")
    assert s.close()["plugins"] == {NAME: VERSION}


@pytest.mark.parametrize("name,version", [("session", "1"), ("", "1"), ("  ", "1"), ("p", ""), (3, "1"),
                                          ("p", None)])
def test_bad_or_reserved_identities_are_refused(make_session, name, version):
    """"session" is the session's own attribution: a plugin taking it would hide its acts among the user's."""
    s = make_session()
    with pytest.raises(InvalidParameter):
        s.for_plugin(name, version)
    assert s.close()["plugins"] == {}


def test_the_view_takes_no_other_attribution(make_session):
    """A plugin cannot charge or record in another plugin's name through its view."""
    s = make_session()
    view = s.for_plugin(NAME, VERSION)
    with pytest.raises(TypeError):
        view.charge(view.laplace_event(1.0, 0.1), plugin="other", mechanism="laplace")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        view.laplace(1.0, 1.0, 0.1, plugin="other")
    with pytest.raises(TypeError):
        view.record_info("other", {"x": 1})  # type: ignore[call-arg]
    assert s.spent_epsilon() == 0.0
    s.close()


def test_a_closed_session_gives_no_view(make_session):
    s = make_session()
    s.close()
    with pytest.raises(DPAuditError, match="closed"):
        s.for_plugin(NAME, VERSION)


def test_views_share_the_session_budget(make_session):
    """Two plugins' views of one session draw on one budget filter: no view has a budget of its own."""
    s = make_session(epsilon=1.0)
    a, b = s.for_plugin("a", "1"), s.for_plugin("b", "1")
    a.laplace(0.0, from_formula("count", "add_remove"), 0.6)
    with pytest.raises(BudgetExceeded):
        b.laplace(0.0, from_formula("count", "add_remove"), 0.6)
    assert a.spent_epsilon() == b.spent_epsilon() == s.spent_epsilon()
    assert {p for _, p in _attributions(s)} == {"a"}
    s.close()
