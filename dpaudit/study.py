"""Study files: one TOML (or JSON) file describing a whole tuning-plus-training run for ``dpaudit run --config``.

A study names its budget, data sources, model, loss, optimizer, search space, selection method, accountant and
tracking URI (docs/user-guide.md, "Study files", has a complete example). :func:`load_study` validates everything
before a run opens; an error names the file, the line and the key (``study.toml:12: space.parameters.lr.low:
...``). ``tomllib`` reports line numbers for syntax errors only, so a semantic error's line is found by scanning the
text for the key (:func:`key_line`: the line of the key, or of the nearest enclosing table or inline table).

A file named ``*.toml`` is TOML, any other strict JSON. A file with no ``study`` table is not a study: it is a
plugin's plain configuration (``dpaudit run PLUGIN --config``), read by :func:`read_config` from TOML or JSON alike.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit.errors import InvalidParameter
from dpaudit.files import read_regular
from dpaudit.tuning.networks import BUILTIN_MODELS, LOSSES, METRICS, OPTIMIZERS, load_factory
from dpaudit.tuning.space import SearchSpace
from dpaudit.tuning.user import check_space
from dpaudit.validation import check_delta, check_epsilon

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

METHODS = ("naive", "randtune", "constant-overhead")
GRAD_SAMPLE_MODES = ("hooks", "functorch", "ghost")
#: the size limit of a configuration or study file (that of every JSON object dpaudit reads)
MAX_STUDY_BYTES = canonical.MAX_OBJECT_BYTES
#: the most settings a design may hold: each is a model trained with DP-SGD, and the design is drawn in memory
MAX_SETTINGS = 100_000
SECTIONS = {"study", "budget", "data", "model", "training", "objective", "space", "method"}
_KEY = re.compile(r'^\s*((?:[A-Za-z0-9_-]+|"[^"]*")(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"))*)\s*=')
_TABLE = re.compile(r'^\s*\[\[?\s*([^\]]+?)\s*\]\]?')


class StudyError(InvalidParameter):
    """A study file is refused (bad syntax, an unknown or missing key, an out-of-domain value)."""


def _split(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip().strip('"') for part in dotted.split("."))


def key_line(text: str, path: tuple[str, ...]) -> int | None:
    """The 1-based line that defines ``path`` in TOML ``text``, or of its nearest enclosing table (None: none).

    A key defined inline (``lr = {low = 0.1}``) resolves to the inline table's line.
    """
    table: tuple[str, ...] = ()
    best: tuple[int, int] | None = None  # (matched length, line)
    for number, line in enumerate(text.splitlines(), 1):
        if (header := _TABLE.match(line)) and not _KEY.match(line):
            table = full = _split(header.group(1))
        elif key := _KEY.match(line):
            full = table + _split(key.group(1))
        else:
            continue
        if path[:len(full)] == full and (best is None or len(full) > best[0]):
            best = (len(full), number)
    return None if best is None else best[1]


def _json_line(text: str, path: tuple[str, ...]) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if f'"{path[-1]}"' in line:
            return number
    return None


@dataclass(frozen=True)
class _Source:
    """Where a study file came from, to name lines in errors."""

    path: Path
    text: str
    toml: bool

    def error(self, path: tuple[str, ...], message: str) -> StudyError:
        line = key_line(self.text, path) if self.toml else _json_line(self.text, path)
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        return StudyError(f"{where}: {'.'.join(path)}: {message}")


def _parse(path: Path) -> tuple[dict[str, Any], _Source]:
    raw = read_regular(path, MAX_STUDY_BYTES, StudyError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StudyError(f"{path}: not UTF-8 text: {exc}") from exc
    if path.suffix.lower() != ".toml":  # JSON unless named .toml, as every configuration was before
        return canonical.loads_object(text, str(path), StudyError), _Source(path, text, False)
    try:
        return tomllib.loads(text), _Source(path, text, True)
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise StudyError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None


def read_config(path: Path) -> dict[str, Any]:
    """A configuration file (``.toml`` or ``.json``) as a plain mapping, strictly parsed.

    Raises:
        StudyError: unreadable, too large, not UTF-8, or not valid TOML / strict JSON.
    """
    return _parse(path)[0]


def is_study(config: Mapping[str, Any]) -> bool:
    """Whether a parsed configuration is a study file (it has a ``[study]`` table)."""
    return "study" in config


@dataclass(frozen=True)
class DataSpec:
    """One data set of a study: a shipped or catalog name (``source``), or a CSV / Parquet file.

    Attributes:
        name: the name the session declares (the catalog name, or the file's table name).
        kind: ``"catalog"``, ``"csv"`` or ``"parquet"``.
        path: the file, resolved against the study file's folder.
        target, id_column, features, classes: as :func:`dpaudit.data.sources.csv`.
    """

    name: str
    kind: str
    path: str | None = None
    target: str | None = None
    id_column: str | None = None
    features: tuple[str, ...] | None = None
    classes: int | None = None


@dataclass(frozen=True)
class Study:
    """A validated study (every field public, fixed before the run opens)."""

    path: Path
    name: str
    method: str
    epsilon: float
    delta: float
    accountant: str | None
    tracking_uri: str | None
    train: DataSpec
    validation: DataSpec
    model: str
    hidden: tuple[int, ...]
    model_options: dict[str, Any]
    loss: str
    optimizer: str
    grad_sample_mode: str
    metric: str
    score_range: tuple[float, float]
    space: SearchSpace
    method_options: dict[str, Any] = field(default_factory=dict)


def _table(cfg: Mapping[str, Any], key: str, src: _Source, known: set[str], *, required: bool = True,
           prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    where = (*prefix, key)
    value = cfg.get(key)
    if value is None:
        if required:
            raise src.error(where, "missing table")
        return {}
    if not isinstance(value, Mapping):
        raise src.error(where, f"must be a table, got {type(value).__name__}")
    unknown = sorted(set(value) - known)
    if unknown:
        raise src.error((*where, unknown[0]), f"unknown key; known: {', '.join(sorted(known))}")
    return dict(value)


def _get(table: Mapping[str, Any], key: str, where: tuple[str, ...], src: _Source, kind: type | tuple[type, ...],
         default: Any = ..., choices: tuple[Any, ...] | None = None) -> Any:
    if key not in table:
        if default is ...:
            raise src.error((*where, key), "missing")
        return default
    value = table[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise src.error((*where, key), f"must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise src.error((*where, key), f"must be {_kind_name(kind)}, got {value!r}")
    if choices is not None and value not in choices:
        raise src.error((*where, key), f"must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "a string", int: "an integer", float: "a number", bool: "true or false",
                        list: "a list"}.get(k, k.__name__) for k in kinds)


def _data(table: Mapping[str, Any], role: str, src: _Source) -> DataSpec:
    where = ("data", role)
    files = [k for k in ("source", "csv", "parquet") if k in table]
    if len(files) != 1:
        raise src.error(where, "give exactly one of source (a shipped or catalog name), csv or parquet")
    kind = files[0]
    value = _get(table, kind, where, src, str)
    if kind == "source":
        extra = sorted(set(table) - {"source"})
        if extra:
            raise src.error((*where, extra[0]), "a shipped or catalog source takes no column options")
        from dpaudit.data import catalog  # importing dpaudit.data registers the shipped sets

        if value not in catalog.known_names():
            raise src.error((*where, kind), f"no shipped or catalog data set {value!r}; known: "
                                            f"{', '.join(sorted(catalog.known_names()))}")
        return DataSpec(value, "catalog")
    path = Path(value) if Path(value).is_absolute() else src.path.parent / value
    if not path.is_file():  # a missing file, a folder, a device such as /dev/zero (also through a symlink)
        raise src.error((*where, kind), f"no regular file {path}")
    features = _get(table, "features", where, src, list, None)
    if features is not None and not all(isinstance(f, str) for f in features):
        raise src.error((*where, "features"), "must be a list of column names")
    classes = _get(table, "classes", where, src, int, None)
    if classes is not None and classes < 2:
        raise src.error((*where, "classes"), f"must be at least 2, got {classes}")
    return DataSpec(_get(table, "name", where, src, str, f"{role}"), kind, str(path),
                    _get(table, "target", where, src, str), _get(table, "id_column", where, src, str, None),
                    None if features is None else tuple(features), classes)


def load_study(path: Path | str) -> Study:
    """Read and validate a study file (module docstring).

    Raises:
        StudyError: the first problem, naming the file, line and key.
    """
    path = Path(path)
    cfg, src = _parse(path)
    unknown = sorted(set(cfg) - SECTIONS)
    if unknown:
        raise src.error((unknown[0],), f"unknown table; known: {', '.join(sorted(SECTIONS))}")
    study = _table(cfg, "study", src, {"name", "method", "accountant", "tracking_uri"})
    method = _get(study, "method", ("study",), src, str, choices=METHODS)
    budget = _table(cfg, "budget", src, {"epsilon", "delta"})
    try:
        epsilon = check_epsilon(_get(budget, "epsilon", ("budget",), src, (int, float)), "epsilon")
    except InvalidParameter as exc:
        raise src.error(("budget", "epsilon"), str(exc)) from exc
    try:
        delta = check_delta(_get(budget, "delta", ("budget",), src, (int, float)), "delta", allow_zero=False)
    except InvalidParameter as exc:
        raise src.error(("budget", "delta"), str(exc)) from exc
    data = _table(cfg, "data", src, {"train", "validation"})
    data_keys = {"source", "csv", "parquet", "name", "target", "id_column", "features", "classes"}
    train = _data(_table(data, "train", src, data_keys, prefix=("data",)), "train", src)
    validation = _data(_table(data, "validation", src, data_keys, prefix=("data",)), "validation", src)
    if validation.name == train.name or (train.path is not None and validation.path is not None
                                         and os.path.samefile(train.path, validation.path)):
        # the validation set is read without protection: the protected training set must not be it
        raise src.error(("data", "validation"), f"must be another data set than the protected training set "
                                                f"({train.name!r}{'' if train.path is None else ', ' + train.path})")
    model = _table(cfg, "model", src, {"kind", "hidden", "options"})
    kind = _get(model, "kind", ("model",), src, str)
    if kind not in BUILTIN_MODELS and ":" not in kind:
        raise src.error(("model", "kind"), f"must be one of {', '.join(BUILTIN_MODELS)} or "
                                           f"'package.module:factory'; got {kind!r}")
    hidden = _get(model, "hidden", ("model",), src, (list, int), [64])
    hidden = [hidden] if isinstance(hidden, int) else hidden
    if not hidden or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden):
        raise src.error(("model", "hidden"), "must be a positive width or a list of them")
    options = _get(model, "options", ("model",), src, dict, {})
    if options and kind in BUILTIN_MODELS:
        raise src.error(("model", "options"), f"the built-in model {kind!r} takes no options (a factory does)")
    if kind not in BUILTIN_MODELS:
        try:
            load_factory(kind)  # importable and callable now; it is called on the data's shape before the run opens
        except InvalidParameter as exc:
            raise src.error(("model", "kind"), str(exc)) from exc
    training = _table(cfg, "training", src, {"loss", "optimizer", "grad_sample_mode"})
    loss = _get(training, "loss", ("training",), src, str, choices=LOSSES)
    optimizer = _get(training, "optimizer", ("training",), src, str, "sgd", tuple(OPTIMIZERS))
    mode = _get(training, "grad_sample_mode", ("training",), src, str, "hooks", GRAD_SAMPLE_MODES)
    objective = _table(cfg, "objective", src, {"metric", "range"})
    metric = _get(objective, "metric", ("objective",), src, str, choices=tuple(METRICS))
    if METRICS[metric][0] != loss:
        raise src.error(("objective", "metric"), f"{metric} goes with loss {METRICS[metric][0]!r}, not {loss!r}")
    score_range = _get(objective, "range", ("objective",), src, list, [0.0, 1.0] if metric == "accuracy" else ...)
    if (len(score_range) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                         for v in score_range) or not score_range[0] < score_range[1]):
        raise src.error(("objective", "range"), f"must be [low, high], finite with low < high, got {score_range!r}")
    space_table = _table(cfg, "space", src, {"design", "samples", "parameters"})
    try:
        space = SearchSpace.from_mapping(space_table)
    except InvalidParameter as exc:
        raise src.error(("space", *_named_parameter(str(exc), space_table)), str(exc)) from exc
    if "lr" not in {p.name for p in space.parameters}:
        raise src.error(("space", "parameters"), "the space must fix or search lr, the optimizer's learning rate")
    try:
        check_space(space)
    except InvalidParameter as exc:
        raise src.error(("space", *_named_parameter(str(exc), space_table)), str(exc)) from exc
    settings = space.samples if space.design != "grid" else math.prod(
        len(p.choices) if p.kind == "categorical" else p.points for p in space.parameters)
    if settings > MAX_SETTINGS:
        raise src.error(("space", "samples" if space.design != "grid" else "parameters"),
                        f"the design holds {settings} settings, more than {MAX_SETTINGS}")
    method_options = _table(cfg, "method", src, _METHOD_KEYS[method], required=False)
    for key, value in method_options.items():
        kinds = (str,) if key == "distribution" else (int, float)
        _get(method_options, key, ("method",), src, kinds)
        if isinstance(value, float) and not math.isfinite(value):
            raise src.error(("method", key), f"must be finite, got {value!r}")
    accountant = _get(study, "accountant", ("study",), src, str, None)
    if accountant is not None:
        from dpaudit.accounting.registry import ACCOUNTANTS

        if accountant not in ACCOUNTANTS:
            raise src.error(("study", "accountant"), f"must be one of {', '.join(sorted(ACCOUNTANTS))}; "
                                                     f"got {accountant!r}")
    tracking_uri = _get(study, "tracking_uri", ("study",), src, str, None)
    name = _get(study, "name", ("study",), src, str, path.stem)
    return Study(path=path, name=name, method=method, epsilon=epsilon, delta=delta, accountant=accountant,
                 tracking_uri=tracking_uri, train=train, validation=validation, model=kind, hidden=tuple(hidden),
                 model_options=dict(options), loss=loss, optimizer=optimizer, grad_sample_mode=mode, metric=metric,
                 score_range=(float(score_range[0]), float(score_range[1])), space=space,
                 method_options=method_options)


_METHOD_KEYS = {"naive": set(), "randtune": {"distribution", "gamma", "eta", "mu"},
                "constant-overhead": {"k", "epsilon_round", "t_max", "u0", "granularity", "fallback"}}


def _named_parameter(message: str, space: Mapping[str, Any]) -> tuple[str, ...]:
    """The key a search-space error is about: ``parameters.<name>`` when the message names a parameter."""
    for name in space.get("parameters", {}) if isinstance(space.get("parameters"), Mapping) else ():
        if message.startswith((f"parameter '{name}'", f"{name}.")):
            return ("parameters", name)
    for key in ("design", "samples"):
        if key in message:
            return (key,)
    return ("parameters",)
