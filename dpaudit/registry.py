"""The plugin registry: algorithms from the literature, found through the ``dpaudit.plugins`` entry-point group.

A plugin is a package that exposes a :class:`Plugin` object and registers it in its distribution's metadata::

    [project.entry-points."dpaudit.plugins"]
    opacus-training = "dpaudit_plugins.opacus_training:PLUGIN"

Loading is strict (DESIGN.md, "a plugin that fails to load ... makes certification fail loudly"): an entry point
that cannot be imported, or whose object is not a :class:`Plugin`, or whose object's name differs from the entry
point's name, raises :class:`~dpaudit.errors.PluginError` naming it. Nothing is skipped with a warning, because a
silently missing plugin would let a run certify without the sensitivity formulas the plugin registers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from dpaudit.errors import PluginError

if TYPE_CHECKING:
    from dpaudit.session import Session

ENTRY_POINT_GROUP = "dpaudit.plugins"
DATASET_SIZE_PUBLIC = "dataset-size-public"
"""The id of the conditional certificate assumption under which a plugin treats its protected set's size as public."""


@dataclass(frozen=True)
class Plugin:
    """An algorithm that touches private data only through a :class:`~dpaudit.session.Session`.

    Attributes:
        name: the entry-point name, e.g. ``"opacus-training"``.
        version: the plugin's own version string.
        summary: one line saying what it does.
        citation: the paper(s) it implements.
        event_kinds: every :class:`~dpaudit.events.PrivacyEvent` ``kind`` it may charge (the contract tests check
            that it charges nothing else).
        run: ``run(session, config) -> dict`` performs the algorithm inside an open session and returns public
            results only (the return value may be logged; it must not hold unnoised data-dependent values).
        smoke_config: a tiny configuration the contract tests run (seconds, not minutes).
        protected: names of the data sets ``run`` protects; the session that runs the plugin must list them in its
            ``protected`` tuple (so the certificate names them), and ``run`` may refuse a session that does not.
        public: names of the data sets ``run`` uses without protection (e.g. a public test set), for the
            session's ``public`` tuple.
        dataset_size_public: whether ``run`` treats the size of its protected data set as public (it uses or
            releases it, e.g. DP-SGD's sampling rate q = B/n); its charges then carry the conditional assumption
            :data:`DATASET_SIZE_PUBLIC`, which the certificate lists. False (the default): ``run`` never releases
            the size, or anything that grows with it, except through a charged mechanism. The contract kit checks
            that the statement and the certificate agree (docs/data.md, "The protected set's size").
    """

    name: str
    version: str
    summary: str
    citation: str
    event_kinds: tuple[str, ...]
    run: Callable[[Session, Mapping[str, Any]], dict[str, Any]]
    smoke_config: Mapping[str, Any]
    protected: tuple[str, ...] = ()
    public: tuple[str, ...] = ()
    dataset_size_public: bool = False

    def __post_init__(self) -> None:
        for attr in ("name", "version", "summary", "citation"):
            value = getattr(self, attr)
            if not isinstance(value, str) or not value.strip():
                raise PluginError(f"plugin {self.name!r}: {attr} must be a non-empty string")
        for attr in ("event_kinds", "protected", "public"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        if not self.event_kinds or not all(isinstance(k, str) and k for k in self.event_kinds):
            raise PluginError(f"plugin {self.name!r}: event_kinds must list at least one event kind")
        if not callable(self.run):
            raise PluginError(f"plugin {self.name!r}: run must be callable")
        if not isinstance(self.smoke_config, Mapping):
            raise PluginError(f"plugin {self.name!r}: smoke_config must be a mapping")
        if not isinstance(self.dataset_size_public, bool):
            raise PluginError(f"plugin {self.name!r}: dataset_size_public must be True or False")


def _load_entry_point(ep: EntryPoint) -> Plugin:
    try:
        obj = ep.load()
    except Exception as exc:  # any import-time failure is the plugin's, and must be named
        raise PluginError(f"plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, Plugin):
        raise PluginError(f"plugin {ep.name!r} ({ep.value}) is a {type(obj).__name__}, not a dpaudit Plugin")
    if obj.name != ep.name:
        raise PluginError(f"plugin entry point {ep.name!r} ({ep.value}) holds a plugin named {obj.name!r}")
    return obj


def load_plugins() -> dict[str, Plugin]:
    """Load every plugin registered under the ``dpaudit.plugins`` entry-point group.

    Returns:
        Plugins by name, sorted by name.

    Raises:
        PluginError: an entry point fails to import, is not a :class:`Plugin`, or two entry points share a name.
    """
    eps = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value))
    names = [ep.name for ep in eps]
    for name in sorted(set(names)):
        if names.count(name) > 1:
            values = ", ".join(ep.value for ep in eps if ep.name == name)
            raise PluginError(f"plugin name {name!r} is registered by more than one entry point: {values}")
    return {ep.name: _load_entry_point(ep) for ep in eps}


def get_plugin(name: str) -> Plugin:
    """The installed plugin called ``name``.

    Raises:
        PluginError: no such plugin is installed, or loading the plugins failed.
    """
    plugins = load_plugins()
    if name not in plugins:
        installed = ", ".join(plugins) or "none"
        raise PluginError(f"unknown plugin {name!r}; installed: {installed}")
    return plugins[name]
