"""Shared by the DPareto experiments (dpareto_svt.py, dpareto_adult.py): one seeded, audited ``dpareto`` run with
its bundle verified, and a mean with its two-sided 95 % Student-t interval."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats

from dpaudit import Session
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.trust import KeyTrust
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dpareto.config import DparetoConfig, parse_config
from dpaudit_plugins.dpareto.plugin import explore


@dataclass(frozen=True)
class Outcome:
    """One audited run: the plugin's output, its wall time, the certificate's ε and whether the bundle verified."""

    output: dict[str, Any]
    wall_s: float
    certified_epsilon: float
    verified: bool


def audited_run(config: Mapping[str, Any], *, seed: int, store: Path, epsilon: float, delta: float,
                adaptive: bool, name: str, wrap: Callable[[DparetoConfig], DparetoConfig] | None = None) -> Outcome:
    """Run ``dpareto`` with ``config`` in a seeded session of ``store``, close it and verify its bundle.

    ``wrap`` may replace the parsed configuration (e.g. wrap its task to observe the trials).

    Raises:
        RuntimeError: the bundle does not verify (an experiment never reports numbers of an unverified run).
    """
    cfg = parse_config(config) if wrap is None else wrap(parse_config(config))
    session = Session(epsilon, delta, name, protected=cfg.task.protected or ("private data set",),
                      public=cfg.task.public, rng=SeededRandom(seed), mirror=False, store=store, adaptive=adaptive)
    start = time.perf_counter()
    with session:
        out = explore(session, cfg)
    wall = time.perf_counter() - start
    report = verify_bundle(session.run_dir, allow_not_for_release=True, trust=KeyTrust.default(store))
    if not report.valid:
        raise RuntimeError(f"bundle {session.run_dir} does not verify: {report.reasons}")
    claim = json.loads(session.certificate_path.read_text(encoding="utf-8"))["claim"]
    return Outcome(out, wall, float(claim["epsilon"]), report.valid)


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, lower, upper) of the two-sided 95 % Student-t interval (a single value: an empty interval)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
