"""Where the MLflow mirror writes: the tracking URI and, for the embedded store, the artifact folder.

The default store is embedded and local: a SQLite database ``mlruns/mlflow.db`` under the current directory, with
artifacts under ``mlruns/artifacts``. Any other MLflow tracking URI (a server, another database) works as well.
Precedence: an explicit URI, then the ``MLFLOW_TRACKING_URI`` environment variable, then the default. A local
SQLite store is created once, under a lock, atomically (:mod:`dpaudit.tracking.embedded_store`). A tracking server
(``http(s)://``) is used only with credentials in the environment (:func:`check_credentials`), and a mirroring
session makes MLflow's client try each request once, its own worker retrying (:func:`use_server_defaults`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from dpaudit.errors import InvalidParameter

DEFAULT_STORE_DIR = Path("mlruns")
"""The embedded store's folder, relative to the current directory."""

DATABASE_FILE = "mlflow.db"
ARTIFACTS_DIR = "artifacts"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
_SQLITE_PREFIX = "sqlite:///"
CREDENTIAL_ENV = (("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"), ("MLFLOW_TRACKING_TOKEN",),
                  ("MLFLOW_TRACKING_AUTH",))
"""The environment variables MLflow's client authenticates with: each tuple is one complete set (basic-auth, a
bearer token, an auth provider plugin); a tracking server is used only when one set is all non-empty."""
SERVER_CLIENT_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
                          "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
"""MLflow client settings dpaudit uses with a tracking server unless they are set: one attempt per request (a
session's mirror worker retries with back-off itself, :mod:`dpaudit.tracking.session_mirror`; MLflow's defaults, 7
retries with back-off factor 2 and a 120 s timeout, keep one failed request retrying for about four minutes), and
no run links printed to stdout (which carries ``--json`` output)."""


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s'\"<>]*@")
"""A URI's scheme and its user information (``user:password@``), up to the last ``@`` of the token: a password with
an unescaped ``/`` or ``@`` in it is covered too (a host or path with an ``@`` after it is hidden as well)."""


def redact_credentials(text: str) -> str:
    """``text`` with the user information (``user:password@``) of every URI in it replaced by ``***@``.

    Every message and log line of dpaudit that may show a tracking or database URI goes through it
    (``http://alice:pw@host`` becomes ``http://***@host``, ``postgresql://user:pw@db/mlflow`` becomes
    ``postgresql://***@db/mlflow``): a URI is printed, and its password must not be.
    """
    return _USERINFO.sub(r"\1***@", text)


def default_tracking_uri(base: Path | None = None) -> str:
    """The embedded SQLite store's URI: ``sqlite:///<base, resolved>/mlflow.db``.

    Args:
        base: the store folder; ``./mlruns`` when omitted.
    """
    store = (DEFAULT_STORE_DIR if base is None else Path(base)).resolve()
    return f"{_SQLITE_PREFIX}{store.as_posix()}/{DATABASE_FILE}"


def resolve_tracking_uri(explicit: str | None) -> str:
    """The tracking URI to use: ``explicit`` if given, else ``$MLFLOW_TRACKING_URI`` if set, else the default.

    Raises:
        InvalidParameter: ``explicit`` is given but empty or not a string.
    """
    if explicit is not None:
        if not isinstance(explicit, str) or not explicit.strip():
            raise InvalidParameter(f"tracking URI must be a non-empty string, got {explicit!r}")
        return explicit
    from_env = os.environ.get(TRACKING_URI_ENV, "").strip()
    return from_env or default_tracking_uri()


def sqlite_database(tracking_uri: str) -> Path | None:
    """The database file of a local ``sqlite:///`` URI (None for any other kind of store, or an in-memory one)."""
    if not tracking_uri.startswith(_SQLITE_PREFIX):
        return None
    path = tracking_uri[len(_SQLITE_PREFIX):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def prepare_store(tracking_uri: str) -> str | None:
    """Make a local SQLite store ready for MLflow and return its artifact root URI (None for other stores).

    Call it before MLflow opens the store: MLflow would create and migrate a missing database in place, unlocked
    (:mod:`dpaudit.tracking.embedded_store` says why that breaks and what is done instead). The artifact root of a
    local SQLite store is the ``artifacts`` folder next to the database, so that the whole store lives in one
    folder; other stores keep their own default artifact location.

    Raises:
        MirrorError: the local store cannot be made ready (the message says what to run).
    """
    database = sqlite_database(tracking_uri)
    if database is None:
        return None
    database = database.resolve()
    artifacts = database.parent / ARTIFACTS_DIR
    artifacts.mkdir(parents=True, exist_ok=True)
    from dpaudit.tracking.embedded_store import ensure_embedded_store  # it imports mirror, which imports us

    ensure_embedded_store(database, artifacts.as_uri())
    return artifacts.as_uri()


def is_server(tracking_uri: str) -> bool:
    """Whether ``tracking_uri`` names a tracking server (``http://`` or ``https://``)."""
    return urlsplit(tracking_uri).scheme.lower() in ("http", "https")


def check_credentials(tracking_uri: str) -> None:
    """Refuse a tracking server without credentials, before anything is sent to it.

    A team server runs MLflow's basic-auth app (docs/mlflow.md, "Team server"); a client without credentials would
    be refused by it anyway, after the session had started mirroring. Credentials come from the environment
    (:data:`CREDENTIAL_ENV`), never from the URI: a URI is printed in messages and logs.

    Raises:
        InvalidParameter: an ``http(s)`` URI with a user or password in it, or with no complete credential set in
            the environment.
    """
    if not is_server(tracking_uri):
        return
    parts = urlsplit(tracking_uri)
    if parts.username is not None or parts.password is not None:
        raise InvalidParameter("the MLflow tracking URI holds credentials (user:password@host), which would end up in "
                               "messages and logs: remove them and set MLFLOW_TRACKING_USERNAME and "
                               "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) instead")
    if any(all(os.environ.get(name, "").strip() for name in names) for names in CREDENTIAL_ENV):
        return
    raise InvalidParameter(f"the MLflow tracking server {redact_credentials(tracking_uri)} needs credentials and none "
                           "are set: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic-auth), or "
                           "MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_AUTH; nothing was sent")


def use_server_defaults() -> None:
    """Set :data:`SERVER_CLIENT_DEFAULTS` in the process environment where unset (MLflow reads them at every
    request)."""
    for name, value in SERVER_CLIENT_DEFAULTS.items():
        os.environ.setdefault(name, value)
