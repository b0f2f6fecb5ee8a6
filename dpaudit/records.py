"""Typed bodies of the five ledger record types: what the session writes and what the certificate and reports read.

The ledger stores a record's body as a JSON object and does not interpret it (:mod:`dpaudit.ledger`). The session
builds each body as one of the frozen dataclasses below and appends ``body.to_dict()``; readers parse a body with
``<Kind>Body.from_dict``. ``to_dict`` gives exactly the JSON object the session has always written (docs/ledger.md),
so the ledger format is unchanged, and ``from_dict`` reads every ledger dpaudit has written: fields added later
(the ``open`` record's run and store ids, signing-key fingerprint and Rényi filter) are optional and omitted from
``to_dict`` when absent.

=========  ===================  =======================================================================
type       body                 written
=========  ===================  =======================================================================
open       :class:`OpenBody`    first record: budget, neighbouring relation, data sets, accounting, versions
charge     :class:`ChargeBody`  before any noise of a charged event exists (write-ahead)
release    :class:`ReleaseBody` a noisy output of a charge, before it is returned
info       :class:`InfoBody`    public information never used for accounting
close      :class:`CloseBody`   last record
=========  ===================  =======================================================================
"""

from __future__ import annotations

import contextlib
import functools
import marshal
import operator
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

from dpaudit.errors import InvalidParameter, LedgerError
from dpaudit.events import PrivacyEvent
from dpaudit.sidecar import ArrayFile

OPEN = "open"
CHARGE = "charge"
RELEASE = "release"
INFO = "info"
CLOSE = "close"
RECORD_TYPES = frozenset({OPEN, CHARGE, RELEASE, INFO, CLOSE})

FINISHED = "FINISHED"
"""Close status of a run whose code ended normally: the only status whose results may be released."""
FAILED = "FAILED"
"""Close status of a run ended by an exception (a bug, a crash inside the plugin): not for release."""
ABORTED = "ABORTED"
"""Close status of an interrupted run (Ctrl-C, SIGTERM, or a dead process closed by ``dpaudit recover --abort``)."""
REFUSED = "REFUSED"
"""Close status of a run whose configuration, plugin or plan was refused (bad input, over budget)."""
CLOSE_STATUS_WORDS = {FINISHED: "finished", FAILED: "failed", ABORTED: "aborted", REFUSED: "refused"}
"""How each close status reads in a sentence ("run aborted"); any other status is a failure."""


#: for a ``types`` argument of :func:`_get`, exact types that pass its check (``isinstance`` with an abstract class
#: such as ``Mapping`` costs several times a type lookup, per field of every record ``verify`` reads)
_PASSING: dict[type | tuple[type, ...], frozenset[type]] = {
    str: frozenset({str}), int: frozenset({int}), list: frozenset({list}), (int, float): frozenset({int, float}),
    Mapping: frozenset({dict}),
}


def _get(body: Mapping[str, Any], kind: str, name: str, types: type | tuple[type, ...], *,
         optional: bool = False) -> Any:
    """``body[name]``, checked to be one of ``types`` (bool is never a number here).

    Raises:
        LedgerError: the field is missing (and not optional) or has another type.
    """
    if name not in body:
        if optional:
            return None
        raise LedgerError(f"{kind} record body lacks {name!r}")
    value = body[name]
    if type(value) in _PASSING.get(types, ()):  # what a parsed ledger holds: passes the checks below, found faster
        return value
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise LedgerError(f"{kind} record field {name!r} has type {type(value).__name__}")
    return value


_ABSENT = object()


def _checked(body: Mapping[str, Any], kind: str, spec: tuple[tuple[str, type | tuple[type, ...]], ...]
             ) -> dict[str, Any]:
    """``{name: _get(body, kind, name, types)}`` for each required field ``(name, types)`` of ``spec``, in one loop:
    a value of a type :data:`_PASSING` lists is taken as it is (what :func:`_get` does first), any other value or a
    missing field goes through :func:`_get` (same values, same errors).

    Raises:
        LedgerError: as :func:`_get`.
    """
    if type(body) is not dict:  # another Mapping: read as :func:`_get` reads it (``in`` and ``[]``, not ``get``)
        return {name: _get(body, kind, name, types) for name, types in spec}
    out = {}
    for name, types in spec:
        value = body.get(name, _ABSENT)
        out[name] = value if type(value) in _PASSING.get(types, ()) else _get(body, kind, name, types)
    return out


def _built(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of the frozen dataclass ``cls`` with exactly ``fields`` (every field named: the dataclasses
    below have no ``__post_init__``), set as its ``__init__`` sets them, without one ``object.__setattr__`` per field
    (10⁵ bodies per ``verify`` of 10⁵ records). ``fields`` becomes the instance's attribute dict (no copy): the
    caller's own fresh dict, used for nothing else."""
    body = object.__new__(cls)
    object.__setattr__(body, "__dict__", fields)
    return body


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _mapping(body: Any, kind: str) -> Mapping[str, Any]:
    if type(body) is not dict and not isinstance(body, Mapping):  # (``isinstance`` with an abstract class is slow)
        raise LedgerError(f"{kind} record body must be a JSON object, got {type(body).__name__}")
    return body


def _names(body: Mapping[str, Any], kind: str, name: str) -> tuple[str, ...]:
    values = _get(body, kind, name, list)
    if not all(isinstance(v, str) for v in values):
        raise LedgerError(f"{kind} record field {name!r} must list names (strings)")
    return tuple(values)


#: per body class, the parse of each body object by its id; and the bodies parsed, kept alive with their parses
_Parsed = tuple[dict[type, dict[int, Any]], list[Any]]
_KEPT: ContextVar[_Parsed | None] = ContextVar("dpaudit_bodies_kept", default=None)


@contextlib.contextmanager
def bodies_kept() -> Iterator[None]:
    """Within the block (in this thread), each body object is parsed once per body class, however many readers parse
    it (``verify`` checks the charges and releases, recomposes the components and regenerates the report, each from
    the same records).

    Keyed by object identity, so it costs no hashing of bodies and cannot confuse two bodies; the kept entries hold
    the bodies, so no identity is reused meanwhile, and they are dropped when the block ends. Sound because record
    bodies are never mutated (:class:`dpaudit.ledger.Record`); a body that fails to parse is parsed (and fails) again.
    """
    token = _KEPT.set(({}, []))
    try:
        yield
    finally:
        _KEPT.reset(token)


def _parsed_once(cls: type, body: Any, parse: Callable[[Any], Any]) -> Any:
    """``parse(body)``, remembered for ``body``'s object within :func:`bodies_kept` (also for the members that
    equal bodies share: a ledger read gives repeated members one object, :mod:`dpaudit.ledger`); ``cls`` names what
    ``parse`` makes of it."""
    kept = _KEPT.get()
    if kept is None:
        return parse(body)
    parsed, alive = kept
    by_id = parsed.get(cls)
    if by_id is None:
        by_id = parsed[cls] = {}
    found = by_id.get(id(body), _ABSENT)  # (a parse may be None: no problem found)
    if found is _ABSENT:
        found = by_id[id(body)] = parse(body)
        alive.append(body)
    return found


@dataclass(frozen=True)
class OpenBody:
    """The ``open`` record: the session's budget and public metadata, fixed before any data is touched.

    Attributes:
        name: the session's name.
        budget: ``{"epsilon": ε_B, "delta": δ_B}``.
        neighbouring: ``"add_remove"`` or ``"replace_one"``.
        protected: names of the protected data sets.
        public: names of the data used without protection.
        accountant: ``{"name", "version"}`` of the certified accountant (or of the Rényi filter).
        randomness: the randomness source's description (``for_release`` among it).
        dpaudit_version: dpaudit's version.
        code_version: the code's version (``git:<commit>`` or ``dpaudit-<version>``).
        confidential_log: whether confidential logging was enabled.
        run_id: the run id (None in ledgers written before runs were bound to their ids).
        store_id: the run store's id (None likewise).
        signing_key_fingerprint: the fingerprint of the key that signs the certificate (None likewise).
        adaptive: the Rényi filter's description for an adaptive session, None otherwise.
        declarations: what the user declared about the data outside this run (``other_releases``,
            ``data_custody``: :mod:`dpaudit.nist_fields`); None in ledgers written before the field.
    """

    TYPE: ClassVar[str] = OPEN

    name: str
    budget: Mapping[str, float]
    neighbouring: str
    protected: tuple[str, ...]
    public: tuple[str, ...]
    accountant: Mapping[str, str]
    randomness: Mapping[str, Any]
    dpaudit_version: str
    code_version: str
    confidential_log: bool
    run_id: str | None = None
    store_id: str | None = None
    signing_key_fingerprint: str | None = None
    adaptive: Mapping[str, Any] | None = None
    declarations: Mapping[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "budget": dict(self.budget), "neighbouring": self.neighbouring,
            "protected": list(self.protected), "public": list(self.public), "accountant": dict(self.accountant),
            "randomness": dict(self.randomness), "dpaudit_version": self.dpaudit_version,
            "code_version": self.code_version, "confidential_log": self.confidential_log,
        }
        optional = {"run_id": self.run_id, "store_id": self.store_id,
                    "signing_key_fingerprint": self.signing_key_fingerprint,
                    "adaptive": None if self.adaptive is None else dict(self.adaptive),
                    "declarations": None if self.declarations is None else dict(self.declarations)}
        out.update({k: v for k, v in optional.items() if v is not None})
        return out

    @classmethod
    def from_dict(cls, body: Any) -> OpenBody:
        """Parse an ``open`` body.

        Raises:
            LedgerError: a missing field or one of the wrong type.
        """
        b = _mapping(body, OPEN)
        return cls(name=_get(b, OPEN, "name", str), budget=_get(b, OPEN, "budget", Mapping),
                   neighbouring=_get(b, OPEN, "neighbouring", str), protected=_names(b, OPEN, "protected"),
                   public=_names(b, OPEN, "public"), accountant=_get(b, OPEN, "accountant", Mapping),
                   randomness=_get(b, OPEN, "randomness", Mapping),
                   dpaudit_version=_get(b, OPEN, "dpaudit_version", str),
                   code_version=_get(b, OPEN, "code_version", str),
                   confidential_log=_get(b, OPEN, "confidential_log", bool),
                   run_id=_get(b, OPEN, "run_id", str, optional=True),
                   store_id=_get(b, OPEN, "store_id", str, optional=True),
                   signing_key_fingerprint=_get(b, OPEN, "signing_key_fingerprint", str, optional=True),
                   adaptive=_get(b, OPEN, "adaptive", Mapping, optional=True),
                   declarations=_get(b, OPEN, "declarations", Mapping, optional=True))

    @property
    def epsilon(self) -> float:
        """ε_B."""
        return float(self.budget["epsilon"])

    @property
    def delta(self) -> float:
        """δ_B."""
        return float(self.budget["delta"])


@dataclass(frozen=True)
class ChargeBody:
    """The ``charge`` record, written before any noise of the event exists.

    Attributes:
        event: the charged event, as :meth:`PrivacyEvent.to_dict` describes it.
        plugin: the charging plugin.
        mechanism: the mechanism's name.
        epsilon_spent: the filter's bound on ε (at δ_B) of every charge so far, this one included.
        bound_source: the accountant (or member) that attained it.
        imputation: the public rule that maps the release's private numbers into its domain
            (:class:`~dpaudit.mechanisms.private_inputs.Imputation`, as a dict), for the session's mechanisms that
            take private numbers; None otherwise and in ledgers written before it was recorded (then omitted).
        data: the protected data sets the charging plugin had accessed through ``Session.data`` before this charge
            (docs/data.md); omitted when none (and in ledgers written before it was recorded).
        key: the idempotency key of a reservation made through a budget authority (:mod:`dpaudit.authority`), so
            that a retried or resumed reservation finds its charge; omitted when None.
    """

    TYPE: ClassVar[str] = CHARGE

    event: Mapping[str, Any]
    plugin: str
    mechanism: str
    epsilon_spent: float
    bound_source: str
    imputation: Mapping[str, Any] | None = None
    data: tuple[str, ...] = ()
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        body = {"event": dict(self.event), "plugin": self.plugin, "mechanism": self.mechanism,
                "epsilon_spent": self.epsilon_spent, "bound_source": self.bound_source}
        if self.imputation is not None:
            body["imputation"] = dict(self.imputation)
        if self.data:
            body["data"] = list(self.data)
        if self.key is not None:
            body["key"] = self.key
        return body

    @classmethod
    def from_dict(cls, body: Any) -> ChargeBody:
        """Parse a ``charge`` body (once per body object within :func:`bodies_kept`).

        Raises:
            LedgerError: a missing field or one of the wrong type, or a malformed imputation rule.
        """
        return _parsed_once(cls, body, cls._parse)

    @classmethod
    def _parse(cls, body: Any) -> ChargeBody:
        b = _mapping(body, CHARGE)
        imputation = _get(b, CHARGE, "imputation", Mapping, optional=True)
        if imputation is not None:
            problem = _parsed_once(Mapping, imputation, _imputation_problem_by_value)
            if problem is not None:
                raise LedgerError(f"{CHARGE} record field 'imputation': {problem}")
        data = _get(b, CHARGE, "data", list, optional=True) or []
        if data and not all(isinstance(name, str) for name in data):
            raise LedgerError(f"{CHARGE} record field 'data' must list data set names")
        fields = _checked(b, CHARGE, cls._SCALARS)
        # in the constructor's field order (so a parsed body pickles as a constructed one does)
        fields.update(imputation=imputation, data=tuple(data), key=_get(b, CHARGE, "key", str, optional=True))
        return _built(cls, fields)

    #: the required fields (name, types) :meth:`_parse` takes as they are (:func:`_checked`), in the order the old
    #: checks ran
    _SCALARS: ClassVar[tuple[tuple[str, type | tuple[type, ...]], ...]] = (
        ("event", Mapping), ("plugin", str), ("mechanism", str), ("epsilon_spent", (int, float)),
        ("bound_source", str))

    def privacy_event(self) -> PrivacyEvent:
        """The charged event, decoded.

        Equal descriptions (equal with the same types, :func:`_by_value`) decode to one shared, immutable event
        object, decoded once (:func:`_event_of_key`): 10⁵ identical charges cost one decoding, and the accountants,
        which describe each event object once (``charges.descriptions_kept``), describe them once. The decoded
        event is kept on this body (not a field).

        Raises:
            DPAuditError: the description is not a known, valid event.
        """
        event = self.__dict__.get("_event")
        if event is None:
            event = _parsed_once(PrivacyEvent, self.event, _event_by_value)
            object.__setattr__(self, "_event", event)  # not a field: equality, hashing and ``asdict`` never see it
        return event


#: the version of the ``marshal`` format of :func:`_by_value`'s keys: 2 writes every object in full (3 and later
#: write back-references that depend on how objects are shared, which would only cost cache hits)
_KEY_FORMAT = 2


#: the types :func:`marshal.dumps` writes as themselves and ``marshal.loads`` reads back as the same types: those of
#: JSON, and tuples
_EXACT = frozenset({dict, list, tuple, str, int, float, bool, type(None)})
#: what a cached decoding returns for a key that is not a type-exact copy of the value it was made of
_INEXACT = object()


def _plain(value: Any) -> bool:
    """Whether ``value`` is built of :data:`_EXACT` types only (as every body parsed from a ledger's JSON is)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind not in _EXACT:
            return False
    return True


def _copy_of_key(key: bytes) -> Any:
    """``marshal.loads(key)`` when that is plain data (:func:`_plain`), else :data:`_INEXACT`.

    marshal writes an object of an :data:`_EXACT` type as itself and any other object with the buffer protocol (a
    numpy number or array, a bytearray) as bytes, and refuses every other object; so a key whose copy holds no bytes
    (nothing outside :data:`_EXACT`) was made of a value with exactly the copy's types. ``numpy.float64(1.5)`` and the
    ``numpy.int64`` of the same bits share a key, whose copy holds bytes: neither is decoded from it.
    """
    copy = marshal.loads(key)
    return copy if _plain(copy) else _INEXACT


def _by_value(cached: Callable[[bytes], Any], direct: Callable[[Any], Any], value: Mapping[str, Any]) -> Any:
    """``direct(value)``, through ``cached`` (a function of ``value``'s serialization) when ``value`` is plain data.

    The key is ``marshal.dumps(value)``. ``cached(key)`` decodes :func:`_copy_of_key`: for plain data a copy that
    ``marshal.loads`` makes with the same types, so two values with the same key are equal *with the same types*
    (``1``, ``1.0``, ``True`` and ``-0.0``, ``0.0`` differ, unlike under Python's ``==``), and a JSON value that is
    not the same with its exact types (e.g. ``true`` for ``1``) never gets another's decoding. For a key that is no
    type-exact copy (a mapping built in code with numpy numbers) ``cached`` returns :data:`_INEXACT` and ``value``
    is decoded directly: whether it is, is a function of the key, so a cache hit costs no walk over ``value``.
    """
    try:
        key = marshal.dumps(value, _KEY_FORMAT)
    except ValueError:  # not plain data (a mapping built in code): decoded directly
        return direct(value)
    found = cached(key)
    return direct(value) if found is _INEXACT else found


def _event_by_value(event: Mapping[str, Any]) -> PrivacyEvent:
    """The decoded event, one object per distinct description (:func:`_by_value`)."""
    return _by_value(_event_of_key, PrivacyEvent.from_dict, event)


@functools.lru_cache(maxsize=1024)
def _event_of_key(key: bytes) -> Any:
    """The event whose description serializes to ``key`` (:func:`_by_value`), one object per distinct description
    (events are immutable); :data:`_INEXACT` for a key that is no type-exact copy of its value."""
    copy = _copy_of_key(key)
    return copy if copy is _INEXACT else PrivacyEvent.from_dict(copy)


def _imputation_problem(rule: Mapping[str, Any]) -> str | None:
    """Why the ``imputation`` field of a charge is not a valid rule; None when it is."""
    # imported here: the mechanisms package loads scipy (a second of start-up for readers of the ledger)
    from dpaudit.mechanisms.private_inputs import Imputation

    try:
        Imputation.from_dict(rule)
    except InvalidParameter as exc:
        return str(exc)
    return None


def _imputation_problem_by_value(rule: Mapping[str, Any]) -> str | None:
    """:func:`_imputation_problem`, once per distinct rule (:func:`_by_value`)."""
    return _by_value(_imputation_problem_of_key, _imputation_problem, rule)


@functools.lru_cache(maxsize=256)
def _imputation_problem_of_key(key: bytes) -> Any:
    """:func:`_imputation_problem` of the rule that serializes to ``key`` (:func:`_by_value`), checked once per
    distinct rule; :data:`_INEXACT` for a key that is no type-exact copy of its value."""
    copy = _copy_of_key(key)
    return copy if copy is _INEXACT else _imputation_problem(copy)


@dataclass(frozen=True)
class ReleaseBody:
    """The ``release`` record of one noisy output of a charge, written before the output is returned.

    Attributes:
        charge_seq: the seq of the charge that covers the output.
        plugin: the plugin that charged it.
        mechanism: the charge's mechanism.
        label: the charged event's public label.
        output: the released output (JSON); None when it is in a sidecar file.
        output_file: the sidecar file holding a large released array (:mod:`dpaudit.sidecar`), or None. Bodies
            without one are written without the key, exactly as before sidecars existed.
    """

    TYPE: ClassVar[str] = RELEASE

    charge_seq: int
    plugin: str
    mechanism: str
    label: str
    output: Any
    output_file: ArrayFile | None = None

    @property
    def released(self) -> Any:
        """What was released, for the coverage rules: the :class:`ArrayFile` if there is one, else ``output``."""
        return self.output_file if self.output_file is not None else self.output

    def to_dict(self) -> dict[str, Any]:
        body = {"charge_seq": self.charge_seq, "plugin": self.plugin, "mechanism": self.mechanism,
                "label": self.label, "output": self.output}
        if self.output_file is not None:
            body["output_file"] = self.output_file.to_dict()
        return body

    @classmethod
    def from_dict(cls, body: Any) -> ReleaseBody:
        """Parse a ``release`` body (once per body object within :func:`bodies_kept`).

        Raises:
            LedgerError: a missing field or one of the wrong type.
        """
        return _parsed_once(cls, body, cls._parse)

    @classmethod
    def _parse(cls, body: Any) -> ReleaseBody:
        if type(body) is dict and body.keys() == _SCALAR_RELEASE_KEYS:
            # a release without a sidecar, as the session writes one: the fields the checks below take, where they
            # take them as they are (:data:`_PASSING`: exact types), in the same order
            charge_seq, plugin, mechanism, label = _release_scalars(body)
            if type(charge_seq) is int and type(plugin) is str and type(mechanism) is str and type(label) is str:
                return _built(cls, {"charge_seq": charge_seq, "plugin": plugin, "mechanism": mechanism,
                                    "label": label, "output": body["output"], "output_file": None})
        b = _mapping(body, RELEASE)
        if "output" not in b:
            raise LedgerError(f"{RELEASE} record body lacks 'output'")
        output_file = ArrayFile.from_dict(b["output_file"]) if "output_file" in b else None
        if output_file is not None and b["output"] is not None:
            raise LedgerError(f"{RELEASE} record has both an output and an output file")
        fields = _checked(b, RELEASE, cls._SCALARS)
        fields.update(output=b["output"], output_file=output_file)
        return _built(cls, fields)

    #: the required fields (name, types) :meth:`_parse` takes as they are (:func:`_checked`), in the order the old
    #: checks ran
    _SCALARS: ClassVar[tuple[tuple[str, type | tuple[type, ...]], ...]] = (
        ("charge_seq", int), ("plugin", str), ("mechanism", str), ("label", str))


#: the members of a release body without a sidecar, and its four checked fields
_SCALAR_RELEASE_KEYS = frozenset({"charge_seq", "plugin", "mechanism", "label", "output"})
_release_scalars = operator.itemgetter("charge_seq", "plugin", "mechanism", "label")


@dataclass(frozen=True)
class InfoBody:
    """An ``info`` record: public information (e.g. a realised iteration count), never used for accounting.

    Attributes:
        plugin: the plugin that recorded it.
        info: the information (JSON object).
    """

    TYPE: ClassVar[str] = INFO

    plugin: str
    info: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "info": dict(self.info)}

    @classmethod
    def from_dict(cls, body: Any) -> InfoBody:
        """Parse an ``info`` body.

        Raises:
            LedgerError: a missing field or one of the wrong type.
        """
        b = _mapping(body, INFO)
        return cls(plugin=_get(b, INFO, "plugin", str), info=_get(b, INFO, "info", Mapping))


@dataclass(frozen=True)
class CloseBody:
    """The ``close`` record, the ledger's last.

    Attributes:
        status: :data:`FINISHED`, :data:`FAILED`, :data:`ABORTED` or :data:`REFUSED` (docs/auditor-guide.md,
            "How a run ends"); only a finished run is for release.
        charges: how many charges the session made.
    """

    TYPE: ClassVar[str] = CLOSE

    status: str
    charges: int

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "charges": self.charges}

    @classmethod
    def from_dict(cls, body: Any) -> CloseBody:
        """Parse a ``close`` body.

        Raises:
            LedgerError: a missing field or one of the wrong type.
        """
        b = _mapping(body, CLOSE)
        return cls(status=_get(b, CLOSE, "status", str), charges=_get(b, CLOSE, "charges", int))


RecordBody = OpenBody | ChargeBody | ReleaseBody | InfoBody | CloseBody
BODY_TYPES: Mapping[str, type[RecordBody]] = {body.TYPE: body for body in
                                              (OpenBody, ChargeBody, ReleaseBody, InfoBody, CloseBody)}
"""Record type → its body class."""


def parse_body(record_type: str, body: Any) -> RecordBody:
    """The typed body of a record of type ``record_type``.

    Raises:
        LedgerError: an unknown record type, or a malformed body.
    """
    parser = BODY_TYPES.get(record_type)
    if parser is None:
        raise LedgerError(f"unknown record type {record_type!r}; expected one of {sorted(RECORD_TYPES)}")
    return parser.from_dict(body)
