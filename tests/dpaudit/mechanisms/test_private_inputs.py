"""The imputation rule for private NaN and infinity is recorded in the charge record, identically whatever the data.

Issue 17.4: the rule (NaN → 0, clamp to ±2¹⁰⁰⁰) is public and fixed before the data is seen, so every charge of a
release that applies it names it, and no record says whether it changed a value. Ledgers written before the field
existed still parse and verify; a malformed rule is refused by the parser that ``dpaudit verify`` uses.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter, LedgerError
from dpaudit.ledger import read_records
from dpaudit.mechanisms.private_inputs import BOUND, RULE, Imputation
from dpaudit.records import ChargeBody
from dpaudit.verify import verify_bundle

RECORDED = {"nan": 0.0, "clamp": [-(2.0**1000), 2.0**1000]}
#: the checks of ``dpaudit verify`` that parse the charge records
PARSING_CHECKS = ("ledger-chain", "events-decode", "charges", "releases", "recompose")


def _charges(session) -> list[dict]:
    records, _ = read_records(session.ledger_path)
    return [r.body for r in records if r.type == "charge"]


def _run(session, data: np.ndarray, scores: list[float], query: float) -> None:
    session.laplace(data, sensitivity=1.0, epsilon=0.1, label="sum")
    session.gaussian(data, sensitivity=1.0, epsilon=0.2, delta=1e-7, label="mean")
    session.exponential(scores, sensitivity=1.0, epsilon=0.1, label="argmax")
    session.above_threshold(0.0, sensitivity=1.0, epsilon=0.1, max_queries=1).test(query)


def test_every_charge_that_applies_the_rule_records_it_and_verify_accepts_it(make_session):
    with make_session(epsilon=5.0) as s:
        _run(s, np.array([1.0, math.nan, math.inf]), [1.0, math.nan], -math.inf)
        s.charge(s.laplace_event(1.0, 0.1), plugin="p", mechanism="custom")  # no private numbers: no rule
        charges = _charges(s)
    assert RULE.to_dict() == RECORDED and Imputation(0.0, -BOUND, BOUND) == RULE
    assert [c.get("imputation") for c in charges] == [RECORDED] * 4 + [None]
    assert "imputation" not in charges[-1]  # written exactly as before the field existed
    checks = {c.name: c.ok for c in verify_bundle(s.run_dir, allow_not_for_release=True).checks}
    assert all(checks[name] for name in PARSING_CHECKS), checks


def test_the_charge_records_do_not_depend_on_whether_the_data_had_a_nan(make_session):
    with make_session(epsilon=5.0, seed=3) as dirty:
        _run(dirty, np.array([math.nan, math.inf, -math.inf]), [math.nan, 1.0], math.nan)
    with make_session(epsilon=5.0, seed=3) as clean:
        _run(clean, np.array([0.0, 1.0, 2.0]), [0.0, 1.0], 0.5)
    assert _charges(dirty) == _charges(clean)


def test_a_charge_body_without_the_rule_parses_and_round_trips_unchanged():
    body = {"event": {"kind": "laplace"}, "plugin": "session", "mechanism": "laplace", "epsilon_spent": 0.1,
            "bound_source": "rdp"}
    parsed = ChargeBody.from_dict(body)
    assert parsed.imputation is None and parsed.to_dict() == body
    with_rule = ChargeBody.from_dict({**body, "imputation": RECORDED})
    assert with_rule.imputation == RECORDED and with_rule.to_dict() == {**body, "imputation": RECORDED}


@pytest.mark.parametrize("rule", [
    "nan -> 0", [0.0, -1.0, 1.0], {"nan": 0.0}, {"nan": 0.0, "clamp": [-1.0, 1.0], "extra": 1},
    {"nan": "0", "clamp": [-1.0, 1.0]}, {"nan": True, "clamp": [-1.0, 1.0]}, {"nan": 0.0, "clamp": [-1.0]},
    {"nan": 0.0, "clamp": "[-1, 1]"}, {"nan": 2.0, "clamp": [-1.0, 1.0]}, {"nan": 0.0, "clamp": [1.0, -1.0]},
    {"nan": 0.0, "clamp": [None, 1.0]}, {"nan": 0.0, "clamp": [-1.0, 10**400]},
])
def test_a_malformed_rule_is_refused_by_the_ledger_parser(rule):
    body = {"event": {}, "plugin": "session", "mechanism": "laplace", "epsilon_spent": 0.1, "bound_source": "rdp",
            "imputation": rule}
    with pytest.raises(LedgerError, match="imputation"):
        ChargeBody.from_dict(body)


@pytest.mark.parametrize("args", [(math.nan, -1.0, 1.0), (0.0, -math.inf, 1.0), (2.0, -1.0, 1.0), (0.0, 1.0, -1.0)])
def test_an_impossible_rule_cannot_be_built(args):
    with pytest.raises(InvalidParameter):
        Imputation(*args)
