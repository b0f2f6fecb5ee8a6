"""Release latency with the MLflow mirror to a live team server, against the embedded store and no mirror.

Starts a throwaway PostgreSQL + ``mlflow server --app-name basic-auth`` on loopback
(:class:`~dpaudit.tracking.local_server.LocalTeamServer`) and measures, in one run:

* **release latency** (``Session.laplace``, charge + fsynced ledger records + queueing for the mirror) over
  ``--releases`` releases, with the mirror off, to the embedded SQLite store, and to the server: median, p99 and
  maximum, as ratios (goal: p99 against the server within 2x of the embedded store's);
* the same to the server while it is **killed** half-way (``SIGKILL``): the latency of the releases made while it
  is down, against the mirror-off figures (no release may wait on the mirror);
* the **per-record mirror cost** (``MlflowMirror.record`` + ``flush`` over a session-shaped stream,
  ``bench_mlflow.time_mirror_per_record``) against the server and the embedded store.

MLflow is imported before anything is timed. Usage:
``python benchmarks/bench_team_server.py [--releases 1000] [--records 2000]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

import mlflow  # noqa: E402,F401  (imported before anything is timed)
from bench_mlflow import ledger_stream, time_mirror_per_record  # noqa: E402

from dpaudit import Session  # noqa: E402
from dpaudit.tracking import MlflowMirror, default_tracking_uri  # noqa: E402
from dpaudit.tracking.local_server import LocalTeamServer  # noqa: E402

TARGET = 2.0


class GcPauses:
    """The longest full (generation 2) cyclic-GC collection of the process since :meth:`reset`, in seconds: a
    collection stops every thread, the releasing one included (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.longest, self._start = 0.0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._start)

    def reset(self) -> float:
        longest, self.longest = self.longest, 0.0
        return longest


def release_latencies(session: Session, n: int, start: int = 0) -> list[float]:
    """Seconds taken by each of ``n`` releases of ``session``."""
    out = []
    for i in range(start, start + n):
        t0 = time.perf_counter()
        session.laplace(float(i), sensitivity=1.0, epsilon=1e-3, label="x")
        out.append(time.perf_counter() - t0)
    return out


def summary(latencies: list[float]) -> tuple[float, float, float]:
    """(median, p99, max) in seconds."""
    ordered = sorted(latencies)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], ordered[-1]


def run_session(store: Path, uri: str | None, n: int, server: LocalTeamServer | None = None,
                kill_at: int | None = None) -> list[float]:
    """Latencies of ``n`` releases in a fresh session (mirror off when ``uri`` is None), after the mirror has
    connected; with ``kill_at``, the server is killed after that many releases and only the later ones are
    returned. The close is not timed."""
    session = Session(1e3, 1e-6, name="bench", store=store, tracking_uri=uri, mirror=uri is not None)
    session._tracking.wait()  # the worker has connected and created the run: steady state from here
    if kill_at is None:
        latencies = release_latencies(session, n)
    else:
        release_latencies(session, kill_at)
        assert server is not None
        server.kill_mlflow()
        latencies = release_latencies(session, n - kill_at, kill_at)
    session.close()
    return latencies


def line(name: str, figures: tuple[float, float, float], reference: tuple[float, float, float]) -> str:
    median, p99, worst = figures
    return (f"{name:34s} median {median * 1e3:7.2f} ms ({median / reference[0]:5.2f}x)  p99 {p99 * 1e3:7.2f} ms "
            f"({p99 / reference[1]:5.2f}x)  max {worst * 1e3:8.2f} ms ({worst / reference[2]:6.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=1000)
    parser.add_argument("--records", type=int, default=2000, help="stream length for the per-record mirror cost")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalTeamServer() as server:
        os.environ.update(server.client_env())
        root = Path(tmp)
        embedded = default_tracking_uri(root / "mlruns")
        MlflowMirror(embedded, experiment="dpaudit")  # creates the embedded store (not timed)
        pauses = GcPauses()
        off = summary(run_session(root / "runs", None, args.releases))
        gc_off = pauses.reset()
        local = summary(run_session(root / "runs", embedded, args.releases))
        gc_local = pauses.reset()
        remote = summary(run_session(root / "runs", server.uri, args.releases))
        gc_remote = pauses.reset()
        stream = ledger_stream(args.records, time.time())
        per_local = time_mirror_per_record(MlflowMirror(embedded, experiment="bench"), stream)
        per_remote = time_mirror_per_record(MlflowMirror(server.uri, experiment="bench"), stream)
        pauses.reset()
        down = summary(run_session(root / "runs", server.uri, args.releases, server, kill_at=args.releases // 2))
        gc_down = pauses.reset()
    print(f"{args.releases} releases per session; ratios against the mirror off (same run)")
    print(line("mirror off", off, off))
    print(line("mirror to the embedded SQLite store", local, off))
    print(line("mirror to the team server", remote, off))
    print(line("team server killed (releases after)", down, off))
    print(f"longest full GC collection (stops the releasing thread too): off {gc_off * 1e3:.1f} ms, embedded "
          f"{gc_local * 1e3:.1f} ms, team server {gc_remote * 1e3:.1f} ms, killed {gc_down * 1e3:.1f} ms")
    ratio = remote[1] / local[1]
    print(f"p99 team server / embedded store: {ratio:.2f}x (target <= {TARGET:.0f}x: "
          f"{'met' if ratio <= TARGET else 'NOT met'})")
    print(f"mirror cost per record ({args.records} records, record + flush): embedded {per_local * 1e6:.1f} us, "
          f"team server {per_remote * 1e6:.1f} us ({per_remote / per_local:.2f}x)")


if __name__ == "__main__":
    main()
