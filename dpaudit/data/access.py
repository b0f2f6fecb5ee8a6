"""Data through the session: the declared-name check, the load, and the access record (``Session.data``).

A plugin obtains protected or public data only by name through its session. The name must be one the session
declared when it opened (its ``protected`` or ``public`` tuple, which the certificate lists); anything else is
refused before any file is read. Every access is written to the ledger as an ``info`` record attributed to the
caller: the name, the role, the (public) loader parameters or the user's source description, and, for a public set
only, its row count. Never the data, and never the realised size of a protected set: whether a plugin may know that
size is its own privacy question (docs/data.md, "Data through the session"). The session remembers which protected
sets each caller has accessed, and names them in that caller's later ``charge`` records; :func:`access_problems`
is the auditor's side of that rule (``dpaudit verify``, check ``data-access``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dpaudit.data.catalog import DataSet, catalog_entry, load
from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.record_index import of_type
from dpaudit.records import CHARGE, INFO, OPEN
from dpaudit.sensitivity import Neighbouring

if TYPE_CHECKING:
    from dpaudit.ledger import Record
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Session

PROTECTED = "protected"
PUBLIC = "public"


def role_of(session: Session, name: str) -> str:
    """``"protected"`` or ``"public"``: how ``session`` declared the data set ``name``.

    Raises:
        InvalidParameter: the session declared no data set of that name.
    """
    if not isinstance(name, str):
        raise InvalidParameter(f"a data set is named by a string, got {type(name).__name__}")
    if name in session.protected:
        return PROTECTED
    if name in session.public:
        return PUBLIC
    raise InvalidParameter(f"data set {name!r} is not declared by this session (protected={session.protected}, "
                           f"public={session.public}); name it in Session(protected=...) or Session(public=...)")


def open_data(session: Session, name: str, parameters: Mapping[str, Any], plugin: str) -> DataSet:
    """Load the declared data set ``name`` for ``plugin`` and record the access, before returning it.

    Raises:
        InvalidParameter: an undeclared or unknown name, an unknown or bad parameter (nothing is recorded).
        DPAuditError: the session is closed (nothing is returned).
    """
    role = role_of(session, name)
    body: dict[str, Any] = {"data_access": name, "role": role, "parameters": dict(parameters)}
    source = session.data_sources.get(name)
    if source is not None:  # the user's own data, loaded and checked when the session opened (dpaudit/data/sources.py)
        if parameters:
            raise InvalidParameter(f"data source {name!r} takes no parameters, got {sorted(parameters)}")
        description, data = source
        body["source"] = description.describe()
    else:
        catalog_entry(name)  # an unknown name fails before the session is touched
        data = load(name, parameters)
    if role == PUBLIC:
        body["rows"] = len(data)
    session.record_info(plugin, body)
    return data


def require_data(session: PluginSession, *, protected: Sequence[str] = (), public: Sequence[str] = (),
                 add_remove: bool = False) -> None:
    """The protected-data check: refuse a session that does not declare what the plugin reads.

    Args:
        protected: names the session must list in ``protected`` (so the certificate protects them).
        public: names it must list in ``public`` (so the certificate states them as unprotected).
        add_remove: also require add/remove neighbours (the relation DP-SGD is analysed under).

    Raises:
        PluginError: a name is missing from the session's declaration, or the relation is replace-one.
    """
    missing = [n for n in protected if n not in session.protected]
    if missing:
        raise PluginError(f"{session.plugin} protects {missing}; open the Session with them in protected= so that "
                          f"the certificate names them (got {session.protected})")
    missing = [n for n in public if n not in session.public]
    if missing:
        raise PluginError(f"{session.plugin} uses public data {missing}; list them in the Session's public= so that "
                          "the certificate names them")
    if add_remove and Neighbouring(session.neighbouring) is not Neighbouring.ADD_REMOVE:
        raise PluginError(f"{session.plugin} trains with DP-SGD, which is analysed under add/remove neighbours; the "
                          f"session uses {Neighbouring(session.neighbouring).value}")


def access_problems(records: Sequence[Record]) -> list[str]:
    """What a ledger's data accesses and charges get wrong about its declared data sets (empty: nothing).

    The rules the session follows (:func:`open_data`, ``Session.data``, ``Session.charge``), replayed from the
    ledger alone: every ``info`` access names a data set the ``open`` record declares, under the role it declares
    it with; every name in a ``charge`` record's ``data`` is a protected set of the ``open`` record that the charging
    plugin accessed in an earlier ``info`` record. A forged or re-signed ledger that charges, or reads, a set the
    certificate does not protect fails here.
    """
    if not records or records[0].type != OPEN or not isinstance(records[0].body, Mapping):
        return []  # no open record: the chain and binding checks report it
    opened = records[0].body
    declared = {name: role for role in (PUBLIC, PROTECTED)
                for name in (opened.get(role) if isinstance(opened.get(role), list) else []) if isinstance(name, str)}
    accessed: dict[str, set[str]] = {}
    problems: list[str] = []
    for record in of_type(records, INFO, CHARGE):  # (records[0] is the open record)
        body = record.body if isinstance(record.body, Mapping) else {}
        if record.type == CHARGE and body.get("data", []) == []:  # names no data: nothing to check (10⁵ of them)
            continue
        plugin = body.get("plugin") if isinstance(body.get("plugin"), str) else repr(body.get("plugin"))
        info = body.get("info")
        if record.type == INFO and isinstance(info, Mapping) and "data_access" in info:
            name = info.get("data_access")
            if not isinstance(name, str) or name not in declared:
                problems.append(f"record {record.seq}: access to {name!r}, which the open record does not declare")
                continue
            role = info.get("role", declared[name])  # informational: absent in older ledgers
            if role != declared[name]:
                problems.append(f"record {record.seq}: access to {name!r} as {role!r}, declared {declared[name]!r}")
            elif role == PROTECTED:
                accessed.setdefault(plugin, set()).add(name)
        elif record.type == CHARGE:
            names = body.get("data", [])
            for name in names if isinstance(names, list) else [names]:
                if not isinstance(name, str) or declared.get(name) != PROTECTED:
                    problems.append(f"charge {record.seq}: names data {name!r}, not a protected set of the open record")
                elif name not in accessed.get(plugin, ()):
                    problems.append(f"charge {record.seq}: names data {name!r}, which plugin {plugin!r} never accessed "
                                    "before it")
    return problems
