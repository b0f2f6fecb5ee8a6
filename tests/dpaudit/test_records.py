"""Typed record bodies: exactly today's ledger JSON, old ledgers still read, malformed bodies refused."""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import pickle
import types

import pytest

from dpaudit.errors import DPAuditError, LedgerError
from dpaudit.events import PrivacyEvent
from dpaudit.ledger import read_records
from dpaudit.records import (
    BODY_TYPES,
    CHARGE,
    CLOSE,
    INFO,
    OPEN,
    RECORD_TYPES,
    RELEASE,
    ChargeBody,
    CloseBody,
    OpenBody,
    ReleaseBody,
    bodies_kept,
    parse_body,
)
from dpaudit.sensitivity import declared

# the open body of a ledger written before runs were bound to their run id, store id and signing key (issue 8)
OLD_OPEN = {"name": "old", "budget": {"epsilon": 1.0, "delta": 1e-6}, "neighbouring": "add_remove",
            "protected": ["adult"], "public": [], "accountant": {"name": "tightest", "version": "tightest/1"},
            "randomness": {"kind": "seeded", "seed": 0, "for_release": False}, "dpaudit_version": "0.1.0",
            "code_version": "dpaudit-0.1.0", "confidential_log": False}


def _ledger(session):
    session.close()
    records, problems = read_records(session.ledger_path)
    assert not problems
    return records


def _exercise(session):
    session.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="a")
    session.exponential([1, 2, 3], sensitivity=1.0, epsilon=0.1)
    session.record_info("tester", {"iterations": 3})
    rounds = session.above_threshold_rounds(1.0, 0.1, max_queries=2, rounds=1)
    rounds.next_round(0.5).test(0.0)


@pytest.mark.parametrize("adaptive", [False, True])
def test_every_body_the_session_writes_round_trips_exactly(make_session, adaptive):
    """``to_dict(from_dict(body))`` is the body the ledger holds, for every record of a real session."""
    s = make_session(adaptive=adaptive)
    _exercise(s)
    records = _ledger(s)
    assert {r.type for r in records} == RECORD_TYPES
    for r in records:
        typed = parse_body(r.type, r.body)
        assert r.type == type(typed).TYPE
        assert typed.to_dict() == r.body
    opened = OpenBody.from_dict(records[0].body)
    assert (opened.adaptive is not None) == adaptive
    assert (opened.epsilon, opened.delta) == s.budget
    assert opened.run_id == s.run_id and opened.signing_key_fingerprint == s.key_fingerprint


def test_an_old_open_body_reads_and_writes_back_unchanged():
    opened = OpenBody.from_dict(OLD_OPEN)
    assert opened.run_id is opened.store_id is opened.signing_key_fingerprint is opened.adaptive is None
    assert opened.to_dict() == OLD_OPEN


def test_a_charge_body_decodes_its_event(make_session):
    s = make_session()
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    charge = next(r for r in _ledger(s) if r.type == CHARGE)
    body = ChargeBody.from_dict(charge.body)
    assert body.privacy_event() == PrivacyEvent.from_dict(charge.body["event"])
    assert (body.plugin, body.mechanism) == ("session", "laplace")



def _charge_bodies(make_session):
    """Two charge bodies of the same Laplace release, as separate JSON objects (two charges of the ledger)."""
    s = make_session()
    for _ in range(2):
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    return [r.body for r in _ledger(s) if r.type == CHARGE]


def test_equal_charges_share_one_decoded_event(make_session):
    first, second = _charge_bodies(make_session)
    assert first is not second and first["event"] == second["event"]
    assert ChargeBody.from_dict(first).privacy_event() is ChargeBody.from_dict(second).privacy_event()


@pytest.mark.parametrize(("field", "value"), [("dimension", True), ("dimension", 1.0)])
def test_a_value_equal_only_up_to_its_type_gets_no_other_charges_decoding(make_session, field, value):
    # Python's == holds for 1 == 1.0 == True: a decoding shared by == would accept the second event because the
    # first (with the integer 1) was valid; keyed by the exact value, it is decoded, and refused, on its own
    first, second = _charge_bodies(make_session)
    ChargeBody.from_dict(first).privacy_event()
    second["event"][field] = value
    assert second["event"] == first["event"]
    with pytest.raises(DPAuditError, match="whole number"):
        ChargeBody.from_dict(second).privacy_event()


def test_a_body_built_in_code_with_numpy_numbers_is_decoded_type_exactly(make_session):
    """marshal writes a numpy number as its raw bytes, so numpy.float64(1.5) and the numpy.int64 of the same bits
    share a key: neither may be decoded from it (the float one was refused as "got b'...'", and the integer one would
    have borrowed the float's decoding); both are decoded directly, and JSON bodies still share one decoding."""
    np = pytest.importorskip("numpy")
    first, second = _charge_bodies(make_session)
    as_float = copy.deepcopy(first)
    as_float["event"]["sensitivity"]["value"] = np.float64(1.5)
    as_int = copy.deepcopy(first)
    as_int["event"]["sensitivity"]["value"] = np.float64(1.5).view(np.int64)
    assert ChargeBody.from_dict(as_float).privacy_event().sensitivity.value == 1.5
    with pytest.raises(DPAuditError, match="real number, got np.int64"):
        ChargeBody.from_dict(as_int).privacy_event()
    assert ChargeBody.from_dict(as_float).privacy_event().sensitivity.value == 1.5
    assert ChargeBody.from_dict(first).privacy_event() is ChargeBody.from_dict(second).privacy_event()


def test_a_malformed_imputation_rule_is_refused_after_a_valid_one(make_session):
    first, second = _charge_bodies(make_session)
    ChargeBody.from_dict(first)
    second["imputation"]["nan"] = False  # == 0.0, the rule's value: valid only if it borrowed the first's check
    assert second["imputation"] == first["imputation"]
    with pytest.raises(LedgerError, match="imputation"):
        ChargeBody.from_dict(second)


def test_within_bodies_kept_a_body_object_is_parsed_once(make_session):
    first, second = _charge_bodies(make_session)
    with bodies_kept():
        parsed = ChargeBody.from_dict(first)
        assert ChargeBody.from_dict(first) is parsed
        assert ChargeBody.from_dict(second) is not parsed  # another object, parsed on its own
        assert ChargeBody.from_dict(copy.deepcopy(first)) is not parsed
    assert ChargeBody.from_dict(first) is not parsed  # nothing kept after the block

def _body(record_type):
    event = {"kind": "laplace", "sensitivity": declared(1.0, "l1", "test").to_dict()}
    return copy.deepcopy({OPEN: OLD_OPEN,
                          CHARGE: {"event": event, "plugin": "p", "mechanism": "laplace", "epsilon_spent": 0.1,
                                   "bound_source": "rdp"},
                          RELEASE: {"charge_seq": 1, "plugin": "p", "mechanism": "laplace", "label": "",
                                    "output": 1.5},
                          INFO: {"plugin": "p", "info": {"k": 1}},
                          CLOSE: {"status": "FINISHED", "charges": 1}}[record_type])


@pytest.mark.parametrize("record_type", sorted(RECORD_TYPES))
def test_every_missing_field_is_a_ledger_error(record_type):
    good = _body(record_type)
    assert parse_body(record_type, good).to_dict() == good
    for name in good:
        if record_type == OPEN and name in {"run_id", "store_id", "signing_key_fingerprint", "adaptive"}:
            continue
        broken = {k: v for k, v in good.items() if k != name}
        with pytest.raises(LedgerError, match=repr(name)):
            parse_body(record_type, broken)


@pytest.mark.parametrize(("record_type", "field", "value"), [
    (RELEASE, "charge_seq", True),       # a bool is not a seq
    (RELEASE, "charge_seq", 1.0),
    (RELEASE, "label", None),
    (CHARGE, "epsilon_spent", "0.1"),
    (CHARGE, "epsilon_spent", False),
    (CHARGE, "event", [1, 2]),
    (CLOSE, "charges", "1"),
    (OPEN, "confidential_log", 0),
    (OPEN, "protected", ["adult", 3]),
    (OPEN, "protected", "adult"),
    (OPEN, "run_id", 7),
    (INFO, "info", "text"),
])
def test_a_field_of_the_wrong_type_is_a_ledger_error(record_type, field, value):
    body = {**_body(record_type), field: value}
    with pytest.raises(LedgerError, match=field):
        parse_body(record_type, body)


@pytest.mark.parametrize("body", [None, [], "open", 3])
def test_a_body_that_is_not_an_object_is_a_ledger_error(body):
    for record_type in RECORD_TYPES:
        with pytest.raises(LedgerError, match="JSON object"):
            parse_body(record_type, body)


def test_an_unknown_record_type_is_a_ledger_error():
    with pytest.raises(LedgerError, match="unknown record type"):
        parse_body("charges", _body(CHARGE))
    assert set(BODY_TYPES) == RECORD_TYPES


def test_a_release_without_output_is_refused_but_a_null_output_is_kept():
    body = _body(RELEASE)
    assert ReleaseBody.from_dict({**body, "output": None}).output is None
    del body["output"]
    with pytest.raises(LedgerError, match="output"):
        ReleaseBody.from_dict(body)


def test_close_body_is_what_the_session_writes(make_session):
    s = make_session()
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    assert CloseBody.from_dict(_ledger(s)[-1].body) == CloseBody(status="FINISHED", charges=1)


def _by_constructor(cls, body):
    """The body parsed field by field into ``cls``'s own constructor (what ``from_dict`` built before it set the
    fields directly)."""
    names = [f.name for f in dataclasses.fields(cls)]
    return cls(**{n: tuple(body.get(n) or ()) if n == "data" else body.get(n) for n in names if n != "output_file"})


@pytest.mark.parametrize("body", [
    _body(CHARGE),
    {**_body(CHARGE), "epsilon_spent": 1, "key": "k-1", "data": ["adult"],
     "imputation": {"nan": 0.0, "clamp": [-1.0, 1.0]}},
    {**_body(CHARGE), "event": types.MappingProxyType(_body(CHARGE)["event"])},  # a Mapping that is not a dict
])
def test_a_charge_body_set_field_by_field_is_the_constructors(body):
    """``from_dict`` sets every field (none missing, none extra) to what the constructor sets, for the fast path's
    types and the others (an int ε, a mapping that is not a dict, the optional fields present)."""
    parsed = ChargeBody.from_dict(body)
    assert parsed == _by_constructor(ChargeBody, body)
    # every field, in the constructor's order (so a parsed body pickles to the constructed one's bytes)
    assert list(vars(parsed)) == [f.name for f in dataclasses.fields(ChargeBody)]
    if type(body["event"]) is dict:  # (a mappingproxy does not pickle)
        assert pickle.dumps(parsed) == pickle.dumps(_by_constructor(ChargeBody, body))
    assert parsed.to_dict() == {k: dict(v) if k == "event" else v for k, v in body.items()}


@pytest.mark.parametrize("output", [1.5, 3, None, [1.0, 2.0], {"a": 1}])
def test_a_release_body_set_field_by_field_is_the_constructors(output):
    body = {**_body(RELEASE), "output": output}
    parsed = ReleaseBody.from_dict(body)
    assert parsed == _by_constructor(ReleaseBody, body)
    assert list(vars(parsed)) == [f.name for f in dataclasses.fields(ReleaseBody)]
    assert parsed.to_dict() == body


def test_the_field_by_field_test_catches_a_body_missing_a_field(monkeypatch):
    """Broken variant: a parse that leaves one field unset (``plugin``, ``bound_source``) fails the tests above."""
    for dropped in ("plugin", "bound_source"):
        monkeypatch.setattr(ChargeBody, "_SCALARS", tuple(s for s in ChargeBody._SCALARS if s[0] != dropped))
        parsed = ChargeBody.from_dict(_body(CHARGE))
        assert list(vars(parsed)) != [f.name for f in dataclasses.fields(ChargeBody)]
        with pytest.raises(AttributeError):
            assert parsed == _by_constructor(ChargeBody, _body(CHARGE))
        monkeypatch.undo()


class _BareMapping:
    """A mapping registered with ``Mapping`` that has no ``get`` (what a caller of the public API may pass)."""

    def __init__(self, data):
        self._data = data

    def __getitem__(self, key):
        return self._data[key]

    def __contains__(self, key):
        return key in self._data

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


collections.abc.Mapping.register(_BareMapping)


def test_a_body_mapping_without_get_is_read_as_before():
    """Review of 78f92b5: the one-loop check read fields with ``get``, so such a body raised AttributeError."""
    assert ChargeBody.from_dict(_BareMapping(_body(CHARGE))) == ChargeBody.from_dict(_body(CHARGE))
    assert ReleaseBody.from_dict(_BareMapping(_body(RELEASE))) == ReleaseBody.from_dict(_body(RELEASE))


class _Label(str):
    """A str subclass: not the exact type the release fast path takes."""


@pytest.mark.parametrize("body", [
    {"charge_seq": 3, "label": "count", "mechanism": "laplace", "output": 1.5, "plugin": "session"},
    {"charge_seq": 3, "label": "", "mechanism": "laplace", "output": [1, 2.5], "plugin": "session"},
    {"charge_seq": 3, "label": _Label("count"), "mechanism": "laplace", "output": None, "plugin": "session"},
    {"plugin": "session", "output": 7, "mechanism": "laplace", "label": "count", "charge_seq": 3},  # other order
])
def test_a_release_body_reads_as_the_constructed_one_by_either_path(body):
    """The session-shaped fast path of ``ReleaseBody._parse`` and the generic path give the constructed body: the
    same fields in the constructor's order (a str subclass takes the generic path)."""
    parsed = ReleaseBody.from_dict(body)
    built = ReleaseBody(charge_seq=body["charge_seq"], plugin=body["plugin"], mechanism=body["mechanism"],
                        label=body["label"], output=body["output"])
    assert parsed == built and list(vars(parsed)) == list(vars(built))


@pytest.mark.parametrize(("body", "problem"), [
    ({"charge_seq": True, "label": "c", "mechanism": "m", "output": 1.5, "plugin": "p"}, "'charge_seq' has type bool"),
    ({"charge_seq": 3.0, "label": "c", "mechanism": "m", "output": 1.5, "plugin": "p"}, "'charge_seq' has type float"),
    ({"charge_seq": 3, "label": 1, "mechanism": "m", "output": 1.5, "plugin": "p"}, "'label' has type int"),
    ({"charge_seq": 3, "label": "c", "mechanism": "m", "plugin": "p", "outputs": 1.5}, "lacks 'output'"),
])
def test_a_malformed_release_body_of_the_sessions_shape_is_refused_by_name(body, problem):
    with pytest.raises(LedgerError, match=problem):
        ReleaseBody.from_dict(body)
