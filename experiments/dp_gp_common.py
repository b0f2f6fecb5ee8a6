"""What the dp-gp experiments share: certified sessions (opened, closed, verified) and their MLflow artifacts.

Every release of the experiments is made inside a :class:`dpaudit.Session` with replace-one neighbours, closed, and
its bundle checked with :func:`dpaudit.verify.verify_bundle`; an experiment stops at the first certificate that does
not verify. The figures and tables are then attached to each session's MLflow run (artifact folder ``experiment``),
so the run page shows what the certified releases were used for.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dpaudit import Session
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.tracking.mirror import MlflowMirror
from dpaudit.tracking.session_mirror import EXPERIMENT
from dpaudit.tracking.store import resolve_tracking_uri
from dpaudit.trust import KeyTrust
from dpaudit.verify import verify_bundle


def tracking(disabled: bool, uri: str | None) -> str | None:
    """The MLflow tracking URI the experiment mirrors to (``uri``, else the default store), or None when disabled."""
    return None if disabled else resolve_tracking_uri(uri)


@dataclass(frozen=True)
class Certified:
    """One closed, verified session: its name, run id, run folder and certified (ε, δ)."""

    name: str
    run_id: str
    run_dir: Path
    epsilon: float
    delta: float


def open_session(name: str, epsilon: float, delta: float, protected: Sequence[str], public: Sequence[str],
                 seed: int, store: Path | None, tracking_uri: str | None) -> Session:
    """A seeded replace-one session in ``store`` (None: the default run store), mirrored to MLflow at
    ``tracking_uri`` (None: no mirror)."""
    return Session(epsilon, delta, name, neighbouring="replace_one", protected=tuple(protected), public=tuple(public),
                   rng=SeededRandom(seed), store=store, mirror=tracking_uri is not None, tracking_uri=tracking_uri)


def close_and_verify(session: Session, store: Path | None) -> Certified:
    """Close ``session`` and verify its bundle with the store's key.

    Raises:
        SystemExit: the certificate does not verify (the experiment must not publish its numbers).
    """
    certificate = session.close()
    report = verify_bundle(session.run_dir, allow_not_for_release=True, trust=KeyTrust.default(store))
    if not report.valid:
        raise SystemExit(f"INVALID certificate {session.run_dir}: {report.reasons}")
    return Certified(session.name, session.run_id, Path(session.run_dir), float(certificate["claim"]["epsilon"]),
                     float(certificate["claim"]["delta"]))


def attach(runs: Sequence[Certified], paths: Sequence[Path], tracking_uri: str | None) -> None:
    """Attach ``paths`` (figures, tables) to the MLflow run of every session in ``runs``, folder ``experiment``."""
    if tracking_uri is None:
        return
    mirror = MlflowMirror(tracking_uri, experiment=EXPERIMENT)
    for run in runs:
        mirror.log_artifacts(mirror.find_run(run.run_id).info.run_id, list(paths), "experiment")


def certified_runs_section(runs: Sequence[Certified]) -> list[str]:
    """The Markdown section listing an experiment's certified runs and how to re-check them."""
    return ["", "## Certified runs", "", "| session | run id | certified ε | δ |", "| --- | --- | --- | --- |",
            *[f"| {r.name} | `{r.run_id}` | {r.epsilon:.4f} | {r.delta:g} |" for r in runs],
            "", "Each was verified (`verify_bundle`) before its numbers were written; the runs are seeded, so "
            "check them with `dpaudit verify --allow-not-for-release RUN_ID` (run folder or MLflow run). The figure "
            "and this table are attached to each run's MLflow page (artifact folder `experiment`).", ""]


def arguments(description: str, draws: int, out: Path, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line both experiments take (noise draws, smoke-test size, output folder, store, MLflow)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--draws", type=int, default=draws)
    parser.add_argument("--quick", action="store_true", help="a tiny run (smoke test)")
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--store", type=Path, default=None, help="run store (default: $DPAUDIT_HOME or ./dpaudit_runs)")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: the embedded ./mlruns)")
    parser.add_argument("--no-mlflow", action="store_true")
    return parser.parse_args(argv)
