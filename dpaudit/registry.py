"""The plugin registry: algorithms from the literature, found through the ``dpaudit.plugins`` entry-point group.

A plugin is a package that exposes a :class:`Plugin` object and registers it in its distribution's metadata::

    [project.entry-points."dpaudit.plugins"]
    opacus-training = "dpaudit_plugins.opacus_training:PLUGIN"

``dpaudit verify`` needs a plugin only for its sensitivity formulas. A plugin that keeps them in a light module
``formulas.py`` of its package (importing the kernel and no sibling module, so no torch) lets verify load that
module alone (:func:`load_formulas`); the plugin package imports the same module, so each formula is registered once.

Loading is strict (DESIGN.md, "a plugin that fails to load ... makes certification fail loudly"): an entry point
that cannot be imported, or whose object is not a :class:`Plugin`, or whose object's name differs from the entry
point's name, raises :class:`~dpaudit.errors.PluginError` naming it. Nothing is skipped with a warning, because a
silently missing plugin would let a run certify without the sensitivity formulas the plugin registers.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.machinery import PathFinder
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpaudit.errors import PluginError
from dpaudit.sensitivity import FORMULAS

if TYPE_CHECKING:
    from dpaudit.session import Session

ENTRY_POINT_GROUP = "dpaudit.plugins"
FORMULAS_MODULE = "formulas"
"""The module, inside a plugin's package, that registers the plugin's sensitivity formulas and imports nothing heavy
(:func:`load_formulas`)."""
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
        check_config: ``check_config(config)`` parses a configuration without touching data or a session and raises
            :class:`~dpaudit.errors.InvalidParameter` for a bad one; ``dpaudit run`` calls it before it opens the
            run, so a malformed configuration leaves no run behind (optional: without it the plugin's own refusal
            closes the run ``REFUSED``, not for release).
        dataset_size_public: whether ``run`` treats the size of its protected data set as public (it uses or
            releases it, e.g. DP-SGD's sampling rate q = B/n); its charges then carry the conditional assumption
            :data:`DATASET_SIZE_PUBLIC`, which the certificate lists. False (the default): ``run`` never releases
            the size, or anything that grows with it, except through a charged mechanism. The contract kit checks
            that the statement and the certificate agree (docs/data.md, "The protected set's size").
        data_for: ``data_for(config) -> (protected, public)``, the data sets a run with that configuration reads,
            each a subset of ``protected`` / ``public`` (optional: without it every run declares all of them).
            ``dpaudit run`` declares these in the session (:meth:`data_sets`), so a run does not list as public a set
            another configuration protects (e.g. ``dpareto``'s evaluation records under a private front).
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
    check_config: Callable[[Mapping[str, Any]], Any] | None = None
    data_for: Callable[[Mapping[str, Any]], tuple[tuple[str, ...], tuple[str, ...]]] | None = None

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
        if self.check_config is not None and not callable(self.check_config):
            raise PluginError(f"plugin {self.name!r}: check_config must be callable or None")
        if not isinstance(self.smoke_config, Mapping):
            raise PluginError(f"plugin {self.name!r}: smoke_config must be a mapping")
        if not isinstance(self.dataset_size_public, bool):
            raise PluginError(f"plugin {self.name!r}: dataset_size_public must be True or False")
        if self.data_for is not None and not callable(self.data_for):
            raise PluginError(f"plugin {self.name!r}: data_for must be callable or None")

    def data_sets(self, config: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(protected, public): the data sets a run with ``config`` reads (``data_for``; without it, all declared).

        Raises:
            PluginError: ``data_for`` names a set the plugin does not declare in that role.
        """
        if self.data_for is None:
            return self.protected, self.public
        protected, public = (tuple(names) for names in self.data_for(config))
        for role, names, declared in (("protected", protected, self.protected), ("public", public, self.public)):
            if not set(names) <= set(declared):
                raise PluginError(f"plugin {self.name!r}: data_for names {role} data sets it does not declare "
                                  f"{role}: {sorted(set(names) - set(declared))}")
        return protected, public


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


def _package_dir(package: str) -> Path | None:
    """The folder of the package ``package``, found without importing it or its parents (a parent's
    ``__init__`` may import torch); None where it is not a plain folder package."""
    locations: list[str] | None = None
    for depth, part in enumerate(package.split(".")):
        spec = (importlib.util.find_spec(part) if depth == 0  # a top-level find_spec imports nothing
                else PathFinder.find_spec(part, locations))
        if spec is None or not spec.submodule_search_locations:
            return None
        locations = list(spec.submodule_search_locations)
    return Path(locations[0]) if locations and len(locations) == 1 else None


def _load_formulas_module(name: str, path: Path) -> None:
    """Execute ``path`` as the module ``name`` (registered in ``sys.modules`` first, so that the plugin package,
    imported later in the same process, reuses it instead of registering its formulas a second time)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def load_formulas() -> None:
    """Register the sensitivity formulas of every installed plugin that keeps them in a light ``formulas`` module,
    without importing the plugin itself. A plugin without such a module registers its formulas only when
    :func:`load_plugins` imports it.

    Raises:
        PluginError: a plugin's formulas module fails to load.
    """
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        name = f"{ep.module}.{FORMULAS_MODULE}"
        if name in sys.modules:
            continue
        folder = _package_dir(ep.module)
        path = None if folder is None else folder / f"{FORMULAS_MODULE}.py"
        if path is None or not path.is_file():
            continue
        try:
            _load_formulas_module(name, path)
        except Exception as exc:  # any import-time failure is the plugin's, and must be named
            raise PluginError(f"plugin {ep.name!r}: its sensitivity formulas ({name}) failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc


def ensure_formulas(formula_ids: set[str]) -> None:
    """Make every formula in ``formula_ids`` registered if an installed plugin registers it: first through the
    plugins' light formulas modules (:func:`load_formulas`), then, for any still unknown, by loading every plugin
    (:func:`load_plugins`; a broken plugin fails loudly there).

    Raises:
        PluginError: a plugin or its formulas module fails to load.
    """
    if formula_ids <= FORMULAS.keys():
        return
    load_formulas()
    if not formula_ids <= FORMULAS.keys():
        load_plugins()
