"""Cost of mirroring a ledger record into MLflow, against raw MLflow logging on the same SQLite store.

Measured in one run, on one fresh embedded SQLite store (the default backend):

* reference: ``MlflowClient.log_batch`` of plain metrics (one key, 1000 per call), per metric;
* the mirror: ``MlflowMirror.record`` for every record of a ledger-shaped stream (open, then charge / release
  pairs, then close) with the default batch size, plus the final ``flush``, per record;
* the same entities the mirror writes, sent by hand with ``log_batch`` (MLflow's own cost of that payload), per
  record: the mirror's overhead is the gap between this and the line above;
* ``MlflowClient.log_metric``, one call per record, for reference.

Each figure is the best of ``--repeats`` runs. Prints ratios; target: mirror per record <= 2x raw per metric.
Usage: ``python benchmarks/bench_mlflow.py [--records 2000] [--repeats 3] [--batch-size 200]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

from mlflow.entities import Metric  # noqa: E402

from dpaudit.tracking import MlflowMirror, default_tracking_uri  # noqa: E402
from dpaudit.tracking.batching import Batch, plan_batches  # noqa: E402
from dpaudit.tracking.entities import record_entities  # noqa: E402
from dpaudit.tracking.mirror import MARK_TAGS, RECORDS  # noqa: E402

TARGET = 2.0


def ledger_stream(n_records: int, t0: float) -> list[tuple[dict, float]]:
    """(record, spent) pairs shaped like a Session's ledger: open, charge/release pairs, close."""
    out = []

    def add(rtype: str, body: dict, spent: float) -> None:
        seq = len(out)
        out.append(({"seq": seq, "type": rtype, "time": t0 + 0.001 * seq, "prev": "0" * 64, "body": body,
                     "hash": f"{seq:064x}"}, spent))

    add("open", {"name": "bench", "budget": {"epsilon": 1e3, "delta": 1e-6}, "neighbouring": "add_remove"}, 0.0)
    spent = 0.0
    while len(out) < n_records - 1:
        spent += 0.1
        event = {"kind": "laplace", "label": "score", "epsilon": 0.1, "scale": 10.0, "grid": 0.01, "dimension": 1,
                 "neighbouring": "add_remove", "assumptions": [],
                 "sensitivity": {"value": 1.0, "norm": "l1", "formula": "count", "inputs": {}, "source": "",
                                 "assumptions": []}}
        add("charge", {"event": event, "plugin": "bench", "mechanism": "laplace", "epsilon_spent": spent,
                       "bound_source": "pure"}, spent)
        add("release", {"charge_seq": len(out) - 1, "plugin": "bench", "mechanism": "laplace", "label": "score",
                        "output": 0.5 * len(out)}, spent)
    add("close", {"status": "FINISHED", "charges": (n_records - 2) // 2}, spent)
    return out


def time_raw_per_metric(mirror: MlflowMirror, n: int) -> float:
    client = mirror.client
    run_id = mirror.start_run("raw-log-batch", {}, {})
    now = int(time.time() * 1000)
    metrics = [Metric("m", float(i), now + i, i) for i in range(n)]
    start = time.perf_counter()
    for i in range(0, n, 1000):
        client.log_batch(run_id, metrics=metrics[i:i + 1000])
    return (time.perf_counter() - start) / n


def time_mirror_per_record(mirror: MlflowMirror, stream) -> float:
    run_id = mirror.start_run("mirror", {}, {})
    start = time.perf_counter()
    for record, spent in stream:
        mirror.record(run_id, record, spent)
    mirror.flush()
    elapsed = time.perf_counter() - start
    assert mirror.client.get_run(run_id).data.tags[MARK_TAGS[RECORDS]] == str(len(stream) - 1)
    return elapsed / len(stream)


def mirror_payload(stream, batch_size: int) -> list[Batch]:
    """The log_batch calls the mirror makes for ``stream`` (its buffer is written every ``batch_size`` records)."""
    items = [(RECORDS, record_entities(r, s)) for r, s in stream]
    calls = []
    for i in range(0, len(items), batch_size):
        calls.extend(plan_batches(items[i:i + batch_size], MARK_TAGS))
    return calls


def time_same_payload_per_record(mirror: MlflowMirror, stream) -> float:
    run_id = mirror.start_run("same-payload", {}, {})
    calls = mirror_payload(stream, mirror.batch_size)
    start = time.perf_counter()
    for batch in calls:
        mirror.client.log_batch(run_id, metrics=list(batch.metrics), tags=list(batch.tags))
    return (time.perf_counter() - start) / len(stream)


def time_log_metric_per_record(mirror: MlflowMirror, n: int) -> float:
    run_id = mirror.start_run("log-metric", {}, {})
    start = time.perf_counter()
    for i in range(n):
        mirror.client.log_metric(run_id, "m", float(i), step=i)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=200, help="the mirror's batch size (default: its default)")
    args = parser.parse_args()
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        mirror = MlflowMirror(default_tracking_uri(Path(tmp) / "mlruns"), experiment="bench",
                              batch_size=args.batch_size)
        mirror.start_run("warm-up", {}, {})                                 # creates the database (not timed)
        stream = ledger_stream(args.records, time.time())
        raw, mine, same, single = [], [], [], []
        for _ in range(args.repeats):
            raw.append(time_raw_per_metric(mirror, args.records))
            mine.append(time_mirror_per_record(mirror, stream))
            same.append(time_same_payload_per_record(mirror, stream))
            single.append(time_log_metric_per_record(mirror, min(args.records, 200)))
    raw_t, mine_t, same_t, single_t = min(raw), min(mine), min(same), min(single)
    calls = mirror_payload(stream, mirror.batch_size)
    n_metrics = sum(len(b.metrics) for b in calls)
    n_tags = sum(len(b.tags) for b in calls)
    print(f"records: {len(stream)}, batch size {mirror.batch_size}, best of {args.repeats}; the mirror writes "
          f"{n_metrics / len(stream):.2f} metrics + {n_tags / len(stream):.3f} tags per record in {len(calls)} calls")
    print(f"raw log_batch, per metric             : {raw_t * 1e6:8.1f} us  (reference)")
    print(f"MlflowMirror.record + flush, per record: {mine_t * 1e6:8.1f} us  ratio {mine_t / raw_t:5.2f}x "
          f"(target <= {TARGET:.0f}x: {'met' if mine_t / raw_t <= TARGET else 'NOT met'})")
    print(f"same payload by raw log_batch, per rec.: {same_t * 1e6:8.1f} us  ratio {same_t / raw_t:5.2f}x "
          f"(mirror overhead over its own payload: {mine_t / same_t:4.2f}x)")
    print(f"log_metric, one call per record        : {single_t * 1e6:8.1f} us  ratio {single_t / raw_t:5.2f}x")


if __name__ == "__main__":
    main()
