"""Tests of dpaudit.ledger: format, hash chain, tamper detection, crash safety, concurrency."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dpaudit import canonical
from dpaudit import ledger as ledger_module
from dpaudit.errors import LedgerError
from dpaudit.ledger import (
    GENESIS_PREV,
    MALFORMED,
    MISSING_FINAL_NEWLINE,
    TORN_FINAL_LINE,
    Ledger,
    Record,
    read_records,
    verify_chain,
)

CHILD = Path(__file__).with_name("ledger_crash_child.py")


def _make_ledger(path: Path, n: int) -> list[Record]:
    with Ledger.create(path) as ledger:
        for i in range(n):
            ledger.append("charge" if i % 2 else "release", {"i": i, "epsilon": 0.25 * i, "tags": ["a", "é"]})
        return ledger.records()


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _problems(path: Path) -> list[str]:
    records, problems = read_records(path)
    return problems + verify_chain(records)


# --- format and round trip -------------------------------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "deep" / "ledger.jsonl"
    written = _make_ledger(path, 5)
    records, problems = read_records(path)
    assert problems == []
    assert records == written
    assert [r.seq for r in records] == list(range(5))
    assert records[0].prev == GENESIS_PREV
    assert all(b.prev == a.hash for a, b in zip(records, records[1:], strict=False))
    for line, rec in zip(_lines(path), records, strict=True):
        assert rec.to_line() == line
        assert Record.from_line(line) == rec
        assert rec.compute_hash() == rec.hash
        assert rec.to_dict() == json.loads(line)
        obj = json.loads(line)
        assert rec.hash == canonical.sha256_hex(canonical.encode({k: obj[k] for k in obj if k != "hash"}))


def test_append_returns_the_record_a_reader_sees(tmp_path: Path) -> None:
    with Ledger.create(tmp_path / "l.jsonl") as ledger:
        record = ledger.append("info", {"pair": (1, 2), "nested": {"b": 1.5, "a": None}})
        assert record.body == {"pair": [1, 2], "nested": {"a": None, "b": 1.5}}
        assert ledger.head == record.hash
        assert ledger.count == 1
        assert ledger.path == tmp_path / "l.jsonl"
    assert read_records(tmp_path / "l.jsonl")[0] == [record]


def test_empty_ledger(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    Ledger.create(path).close()
    assert read_records(path) == ([], [])
    with Ledger.open(path) as ledger:
        assert ledger.count == 0
        assert ledger.head == GENESIS_PREV
        assert ledger.append("open", {}).seq == 0


def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    first = _make_ledger(path, 3)
    with Ledger.open(path) as ledger:
        assert ledger.records() == first
        assert ledger.recovery == ()
        record = ledger.append("close", {})
    assert record.seq == 3 and record.prev == first[-1].hash
    assert _problems(path) == []


def test_create_refuses_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    _make_ledger(path, 1)
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="already exists"):
        Ledger.create(path)
    assert path.read_bytes() == before


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LedgerError):
        Ledger.open(tmp_path / "absent.jsonl")
    with pytest.raises(LedgerError):
        read_records(tmp_path / "absent.jsonl")


def test_closed_ledger_refuses_appends(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path / "l.jsonl")
    ledger.close()
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.append("info", {})


# --- bad bodies and bad lines -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rtype", "body"),
    [
        ("charge", {"epsilon": math.nan}),
        ("charge", {"deep": [1.0, {"x": math.inf}]}),
        ("charge", {"x": -math.inf}),
        ("charge", {1: "non-string key mixed with", "a": 2}),
        ("charge", {"obj": object()}),
        ("charge", [("a", 1)]),
        ("", {}),
        (3, {}),
    ],
)
def test_bad_append_is_refused_and_writes_nothing(tmp_path: Path, rtype: object, body: object) -> None:
    path = tmp_path / "l.jsonl"
    with Ledger.create(path) as ledger:
        ledger.append("open", {})
        before = path.read_bytes()
        with pytest.raises(LedgerError):
            ledger.append(rtype, body)  # type: ignore[arg-type]
        assert path.read_bytes() == before
        assert ledger.count == 1
        assert ledger.append("close", {}).seq == 1
    assert _problems(path) == []


def _good_obj() -> dict[str, object]:
    return {"seq": 0, "type": "open", "time": 1.5, "prev": GENESIS_PREV, "body": {}, "hash": "a" * 64}


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        "[1, 2]",
        canonical.dumps({k: v for k, v in _good_obj().items() if k != "body"}),
        canonical.dumps({**_good_obj(), "extra": 1}),
        canonical.dumps({**_good_obj(), "seq": True}),
        canonical.dumps({**_good_obj(), "seq": -1}),
        canonical.dumps({**_good_obj(), "seq": 1.0}),
        canonical.dumps({**_good_obj(), "type": ""}),
        canonical.dumps({**_good_obj(), "time": 2}),
        canonical.dumps({**_good_obj(), "time": "now"}),
        canonical.dumps({**_good_obj(), "prev": "0" * 63}),
        canonical.dumps({**_good_obj(), "hash": "A" * 64}),
        canonical.dumps({**_good_obj(), "body": [1]}),
        canonical.dumps(_good_obj()).replace('"time":1.5', '"time":NaN'),
        canonical.dumps(_good_obj()).replace('"time":1.5', '"time":1e400'),
        canonical.dumps(_good_obj()).replace('"body":{}', '"body":{"x":1e400}'),
        canonical.dumps(_good_obj()).replace(",", ", "),
        canonical.dumps(_good_obj()).replace('"body":{}', '"body":{},"body":{}'),
        json.dumps(_good_obj()),
    ],
)
def test_from_line_rejects(line: str) -> None:
    with pytest.raises(LedgerError):
        Record.from_line(line)


@pytest.mark.parametrize(("prev", "rhash", "named"), [
    ("0" * 63, "a" * 65, "prev"), ("0" * 65, "a" * 63, "prev"),  # 128 hex digits together, split elsewhere
    ("0" * 64, "a" * 63 + "G", "hash"), ("0" * 63 + "x", "a" * 64, "prev"), ("0" * 64, 7, "hash"),
    (None, "a" * 64, "prev"),
])
def test_prev_and_hash_are_each_64_hex_digits(prev: object, rhash: object, named: str) -> None:
    """The two digests are checked together (one match of 128 digits): a line whose digests have 128 hex digits
    between them but not 64 each is refused, and the message names the field at fault."""
    with pytest.raises(LedgerError, match=f"^{named} must be 64 lowercase hex digits"):
        Record.from_line(canonical.dumps({**_good_obj(), "prev": prev, "hash": rhash}))


def test_from_line_accepts_the_canonical_form() -> None:
    line = canonical.dumps(_good_obj())
    assert Record.from_line(line) == Record.from_line(line + "\n") == Record(**_good_obj())  # type: ignore[arg-type]


# --- tampering ---------------------------------------------------------------------------------------------------


def _edit_body(lines: list[str]) -> list[str]:
    obj = json.loads(lines[3])
    obj["body"]["epsilon"] = 0.0
    return [*lines[:3], canonical.dumps(obj) + "\n", *lines[4:]]


def _edit_body_and_rehash(lines: list[str]) -> list[str]:
    rec = Record.from_line(lines[3])
    edited = Record(rec.seq, rec.type, rec.time, rec.prev, {**rec.body, "epsilon": 0.0}, rec.hash)
    forged = Record(rec.seq, rec.type, rec.time, rec.prev, edited.body, edited.compute_hash())
    return [*lines[:3], forged.to_line(), *lines[4:]]


def _edit_hash(lines: list[str]) -> list[str]:
    obj = json.loads(lines[3])
    obj["hash"] = "f" * 64
    return [*lines[:3], canonical.dumps(obj) + "\n", *lines[4:]]


def _delete_middle(lines: list[str]) -> list[str]:
    return lines[:3] + lines[4:]


def _reorder(lines: list[str]) -> list[str]:
    return [*lines[:3], lines[4], lines[3], *lines[5:]]


def _forge_append(lines: list[str]) -> list[str]:
    last = Record.from_line(lines[-1])
    forged = Record(last.seq + 1, "release", last.time, "1" * 64, {"value": 42.0}, "")
    forged = Record(forged.seq, forged.type, forged.time, forged.prev, forged.body, forged.compute_hash())
    return [*lines, forged.to_line()]


def _duplicate(lines: list[str]) -> list[str]:
    return [*lines[:4], lines[3], *lines[4:]]


TAMPERS: dict[str, tuple[Callable[[list[str]], list[str]], list[str]]] = {
    "edit a body value": (_edit_body, ["record 3 (seq 3): hash mismatch"]),
    "edit a body value and recompute its hash": (_edit_body_and_rehash, ["record 4 (seq 4): prev"]),
    "edit a hash": (_edit_hash, ["record 3 (seq 3): hash mismatch", "record 4 (seq 4): prev"]),
    "delete a middle record": (_delete_middle, ["record 3 (seq 4): seq not consecutive", "record 3 (seq 4): prev"]),
    "reorder two records": (_reorder, ["record 3 (seq 4): seq not consecutive", "record 3 (seq 4): prev"]),
    "append a forged record": (_forge_append, ["record 6 (seq 6): prev"]),
    "duplicate a line": (_duplicate, ["record 4 (seq 3): duplicate seq", "record 4 (seq 3): seq not consecutive"]),
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_tampering_is_reported(tmp_path: Path, name: str) -> None:
    tamper, expected = TAMPERS[name]
    path = tmp_path / "l.jsonl"
    _make_ledger(path, 6)
    assert _problems(path) == []
    path.write_text("".join(tamper(_lines(path))), encoding="utf-8")
    records, problems = read_records(path)
    assert problems == []  # every line is still a well-formed record: the chain is what shows the tamper
    found = verify_chain(records)
    for prefix in expected:
        assert any(p.startswith(prefix) for p in found), (prefix, found)
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="broken hash chain"):
        Ledger.open(path)
    assert path.read_bytes() == before  # never repaired


def test_reorder_reports_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    _make_ledger(path, 6)
    path.write_text("".join(_reorder(_lines(path))), encoding="utf-8")
    found = verify_chain(read_records(path)[0])
    assert len(found) == 6, found  # seq and prev at each of records 3, 4 and 5


def test_truncating_the_last_record_mid_line(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    written = _make_ledger(path, 6)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    records, problems = read_records(path)
    assert records == written[:5]
    assert len(problems) == 1 and problems[0].startswith(f"line 6: {TORN_FINAL_LINE}")
    assert verify_chain(records) == []


def test_cutting_whole_records_off_the_end_needs_the_certified_head(tmp_path: Path) -> None:
    """The chain alone cannot see a clean truncation; the head hash and count in the certificate can."""
    path = tmp_path / "l.jsonl"
    written = _make_ledger(path, 6)
    path.write_text("".join(_lines(path)[:4]), encoding="utf-8")
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == []
    assert (records[-1].hash, len(records)) != (written[-1].hash, len(written))


def test_malformed_middle_line(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    _make_ledger(path, 4)
    lines = _lines(path)
    path.write_text("".join([lines[0], "garbage\n", *lines[1:]]), encoding="utf-8")
    records, problems = read_records(path)
    assert len(records) == 4
    assert len(problems) == 1 and problems[0].startswith(f"line 2: {MALFORMED}")
    with pytest.raises(LedgerError, match="corrupted"):
        Ledger.open(path)


def test_invalid_utf8_line(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    _make_ledger(path, 2)
    path.write_bytes(path.read_bytes() + b"\xff\xfe\n")
    _, problems = read_records(path)
    assert len(problems) == 1 and problems[0].startswith(f"line 3: {MALFORMED}")


# --- torn final line and crash recovery -----------------------------------------------------------------------


def test_open_cuts_a_torn_final_line_and_keeps_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    written = _make_ledger(path, 3)
    good = path.read_bytes()
    torn = b'{"body":{"i":3},"ha'
    path.write_bytes(good + torn)
    with Ledger.open(path) as ledger:
        assert len(ledger.recovery) == 1 and TORN_FINAL_LINE in ledger.recovery[0]
        assert ledger.records() == written
        assert path.read_bytes() == good
        assert path.with_suffix(".torn").read_bytes() == torn + b"\n"
        record = ledger.append("charge", {"i": 3})
    assert record.seq == 3 and record.prev == written[-1].hash
    assert _problems(path) == []
    path.write_bytes(path.read_bytes() + b"{")  # a second torn line: its bytes are added to the same file
    Ledger.open(path).close()
    assert path.with_suffix(".torn").read_bytes() == torn + b"\n{\n"


def test_open_keeps_a_whole_final_record_missing_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    written = _make_ledger(path, 3)
    path.write_bytes(path.read_bytes()[:-1])
    records, problems = read_records(path)
    assert records == written
    assert len(problems) == 1 and problems[0].startswith(f"line 3: {MISSING_FINAL_NEWLINE}")
    with Ledger.open(path) as ledger:
        assert len(ledger.recovery) == 1 and MISSING_FINAL_NEWLINE in ledger.recovery[0]
        assert ledger.records() == written
        ledger.append("close", {})
    assert _problems(path) == []
    assert not path.with_suffix(".torn").exists()


def test_open_refuses_a_whole_final_record_that_breaks_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    _make_ledger(path, 3)
    forged = _forge_append(_lines(path))
    path.write_text("".join(forged)[:-1], encoding="utf-8")
    with pytest.raises(LedgerError, match="broken hash chain"):
        Ledger.open(path)


def _run_child_until_killed(path: Path, delay: float) -> list[tuple[int, str]]:
    command = [sys.executable, str(CHILD), str(path)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    if ready != "ready\n":
        proc.kill()
        raise AssertionError(f"child did not start: {ready!r} {proc.communicate()[1]}")
    threading.Event().wait(delay)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    acknowledged = []
    for line in out.split("\n")[:-1]:  # the text after the last newline may be a half-printed line
        seq, digest = line.split()
        acknowledged.append((int(seq), digest))
    return acknowledged


def test_kill_9_loses_no_acknowledged_record(tmp_path: Path) -> None:
    """SIGKILL a writer 10 times at random moments (seed 20240611, 0-150 ms after it is ready).

    After each kill the file must read as a valid chain, with at most a torn final line, and hold every record
    whose append returned (the child prints seq and hash only after that). Deterministic up to kill timing: the
    property holds for every kill moment, so there is no false alarm; a writer that acknowledged before fsync
    could pass only if no kill landed between its acknowledgement and the data reaching the page cache.
    """
    rng = random.Random(20240611)
    path = tmp_path / "l.jsonl"
    all_acknowledged: list[tuple[int, str]] = []
    for _ in range(10):
        all_acknowledged += _run_child_until_killed(path, rng.uniform(0.0, 0.15))
        records, problems = read_records(path)
        assert all(TORN_FINAL_LINE in p or MISSING_FINAL_NEWLINE in p for p in problems), problems
        assert len(problems) <= 1
        assert verify_chain(records) == []
        on_disk = {(r.seq, r.hash) for r in records}
        assert set(all_acknowledged) <= on_disk
    assert len(all_acknowledged) > 0
    with Ledger.open(path) as ledger:
        count, head = ledger.count, ledger.head
        record = ledger.append("close", {})
    assert record.seq == count and record.prev == head
    assert _problems(path) == []


# --- concurrency ---------------------------------------------------------------------------------------------------


def test_threads_append_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    ledger = Ledger.create(path)
    barrier = threading.Barrier(8)
    seqs: dict[int, list[int]] = {}

    def worker(t: int) -> None:
        barrier.wait()
        seqs[t] = [ledger.append("charge", {"thread": t, "k": k}).seq for k in range(200)]

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ledger.close()
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == []
    assert len(records) == 1600
    assert [r.seq for r in records] == list(range(1600))
    assert sorted(s for v in seqs.values() for s in v) == list(range(1600))
    for t, mine in seqs.items():
        assert mine == sorted(mine)
        assert [r.body["k"] for r in records if r.body["thread"] == t] == list(range(200))


def test_second_writer_makes_the_first_refuse_instead_of_forking(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    first = Ledger.create(path)
    first.append("open", {})
    second = Ledger.open(path)
    second.append("charge", {"by": "second"})
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="another writer"):
        first.append("charge", {"by": "first"})
    assert path.read_bytes() == before
    second.append("close", {})
    first.close()
    second.close()
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == [] and len(records) == 3


def test_external_truncation_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    with Ledger.create(path) as ledger:
        ledger.append("open", {})
        ledger.append("charge", {})
        path.write_text(_lines(path)[0], encoding="utf-8")
        with pytest.raises(LedgerError, match="another writer"):
            ledger.append("release", {})


def test_a_ledger_is_not_usable_across_fork(tmp_path: Path) -> None:
    with Ledger.create(tmp_path / "l.jsonl") as ledger:
        ledger.append("open", {})
        pid = os.fork()
        if pid == 0:  # child: must refuse, and exit without running pytest's teardown
            try:
                ledger.append("charge", {})
            except LedgerError:
                os._exit(0)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ledger.append("close", {}).seq == 1


# --- failures of the operating system --------------------------------------------------------------------------------


def test_short_write_is_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "l.jsonl"
    real_write = os.write
    with Ledger.create(path) as ledger:
        ledger.append("open", {})
        before = path.read_bytes()
        monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[: len(data) // 2]))
        with pytest.raises(LedgerError, match="short write"):
            ledger.append("charge", {"x": 1})
        monkeypatch.setattr(os, "write", real_write)
        assert path.read_bytes() == before
        assert ledger.append("charge", {"x": 1}).seq == 1
    assert _problems(path) == []


def test_failed_fsync_makes_the_ledger_unusable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with Ledger.create(tmp_path / "l.jsonl") as ledger:
        ledger.append("open", {})
        monkeypatch.setattr(os, "fsync", failing_fsync)
        with pytest.raises(LedgerError, match="fsync failed"):
            ledger.append("charge", {})
        monkeypatch.undo()
        with pytest.raises(LedgerError, match="unusable"):
            ledger.append("charge", {})
        assert ledger.count == 1


def test_frozen_clock_stamps_every_later_record_with_the_last_time(tmp_path: Path, monkeypatch) -> None:
    """After ``freeze_clock`` the record times stop, however long the work between appends takes (they would
    otherwise reveal it); time never goes backwards, a second freeze keeps the first time, and the chain holds."""
    import dpaudit.ledger as ledger_module

    now = [100.0]

    class Clock:
        @staticmethod
        def time() -> float:
            now[0] += 7.0
            return now[0]

    monkeypatch.setattr(ledger_module, "time", Clock)
    path = tmp_path / "l.jsonl"
    ledger = Ledger.create(path)
    with pytest.raises(LedgerError, match="empty ledger"):
        ledger.freeze_clock()
    first = ledger.append("a", {})
    second = ledger.append("b", {})
    assert first.time < second.time
    assert ledger.freeze_clock() == second.time
    now[0] += 10_000.0  # long work
    later = [ledger.append("c", {"i": i}) for i in range(3)]
    assert ledger.freeze_clock() == second.time
    assert {r.time for r in later} == {second.time}
    ledger.close()
    records, problems = read_records(path)
    assert not problems and not verify_chain(records)
    assert [r.time for r in records] == [first.time] + [second.time] * 4
    with pytest.raises(LedgerError, match="closed"):
        ledger.freeze_clock()
    reopened = Ledger.open(path)  # the freeze belongs to the writer that froze
    assert reopened.append("d", {}).time > second.time
    reopened.close()


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd"])
def test_read_records_refuses_a_symlinked_ledger(tmp_path, target):
    """Before: the link was followed (/dev/zero read until memory ran out)."""
    (tmp_path / "ledger.jsonl").symlink_to(target)
    with pytest.raises(LedgerError, match="is a symbolic link"):
        read_records(tmp_path / "ledger.jsonl")


def test_read_records_refuses_a_fifo_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "ledger.jsonl")
    with pytest.raises(LedgerError, match="not a regular file"):
        read_records(tmp_path / "ledger.jsonl")


def test_an_overlong_line_is_malformed_and_never_written(tmp_path, monkeypatch):
    """A line over the limit is a named problem (read in bounded chunks), and append refuses to write one."""
    monkeypatch.setattr(ledger_module, "MAX_LINE_BYTES", 400)
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger.create(path)
    first = ledger.append("a", {"x": 1})
    with pytest.raises(LedgerError, match="longer than the 400-byte line limit"):
        ledger.append("b", {"x": "y" * 500})
    ledger.close()
    assert read_records(path) == ([first], [])
    with open(path, "ab") as f:
        f.write(b"z" * 5000 + b"\n" + first.to_line().encode() + b"z" * 5000)
    records, problems = read_records(path)
    assert records == [first, first]
    assert problems == ["line 2: malformed: longer than 400 bytes",
                        "line 4: torn final line: more than 400 bytes without a newline"]


# --- the fast read path: the content hash taken off the canonical line ------------------------------------------

#: bodies that put ``"hash"`` members and hash-like text where a careless slicing of the line would find them
HOSTILE_BODIES = [
    {"hash": "0" * 64, "nested": {"hash": "f" * 64, "prev": "x"}},
    {"inner": {"a": 1, "hash": "b" * 64, "prev": "0" * 64, "seq": 0}},  # a nested ',"hash":"' member
    {"text": ',"hash":"' + "a" * 64 + '","prev":"', "list": [{"hash": 1}, {"hash": {"hash": []}}]},
    {"unicode": "é\u2028\U0001f600\\\"", "float": 1e-300, "int": -(2**62), "empty": {}, "nested": [[[]]]},
]


def test_a_read_records_hash_is_the_hash_of_its_fields(tmp_path: Path) -> None:
    """The hash that a read record takes off its line equals the canonical encoding of its fields, hashed anew."""
    path = tmp_path / "l.jsonl"
    with Ledger.create(path) as ledger:
        for body in HOSTILE_BODIES:
            ledger.append("info", body)
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == []
    for rec in records:
        anew = canonical.sha256_hex(canonical.encode({"seq": rec.seq, "type": rec.type, "time": rec.time,
                                                      "prev": rec.prev, "body": rec.body}))
        assert rec.compute_hash() == anew == rec.hash


@pytest.mark.parametrize("body", HOSTILE_BODIES)
def test_an_edit_inside_a_hostile_body_is_caught(tmp_path: Path, body: dict) -> None:
    path = tmp_path / "l.jsonl"
    with Ledger.create(path) as ledger:
        ledger.append("info", body)
        ledger.append("info", {"after": True})
    lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 is no line end here
    obj = json.loads(lines[0])
    obj["body"]["edited"] = True
    path.write_text(canonical.dumps(obj) + "\n" + lines[1] + "\n", encoding="utf-8")
    records, problems = read_records(path)
    assert problems == []
    assert [p for p in verify_chain(records) if "hash mismatch" in p], verify_chain(records)


def test_a_record_replaced_in_code_is_hashed_anew(tmp_path: Path) -> None:
    """``dataclasses.replace`` of a read record does not inherit the hash its line gave."""
    from dataclasses import replace

    path = tmp_path / "l.jsonl"
    _make_ledger(path, 2)
    records, _ = read_records(path)
    edited = replace(records[1], body={**records[1].body, "i": 99})
    assert edited.compute_hash() != records[1].hash
    assert verify_chain([records[0], edited])[0].startswith("record 1 (seq 1): hash mismatch")


def test_a_read_record_is_the_constructed_one_with_its_own_attributes(tmp_path: Path) -> None:
    """The reader makes each line's parsed object the record's attribute dict (no copy) and shares one string per
    record type: the record is field for field the constructor's, holds the six fields and its line's digest only,
    owns its dict (two records of equal bodies do not share one), and its type equals the line's (a type that only
    looks like another, ``"charge "``, stays itself)."""
    from dataclasses import asdict, fields

    path = tmp_path / "l.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        with Ledger.create(path) as ledger:
            for rtype in ("charge", "charge", "charge "):
                ledger.append(rtype, {"i": 1})
    records, problems = read_records(path)
    assert problems == [] and [r.type for r in records] == ["charge", "charge", "charge "]
    assert records[0].type is records[1].type and records[2].type != records[0].type
    for r in records:
        built = Record(seq=r.seq, type=r.type, time=r.time, prev=r.prev, body=r.body, hash=r.hash)
        assert r == built and asdict(r) == asdict(built) and r.compute_hash() == built.compute_hash() == r.hash
        assert set(vars(r)) == {f.name for f in fields(Record)} | {ledger_module._LINE_DIGEST}
    assert vars(records[0]) is not vars(records[1]) and records[0].body is not records[1].body


def _record_objects() -> list[dict]:
    """Record objects that pass ``_check_fields``, with what json escapes or spells specially in every member."""
    rng = random.Random(5)
    base = {"seq": 0, "type": "charge", "time": 1.5, "prev": "0" * 64, "hash": "a" * 64, "body": {}}
    objs = [dict(base, seq=n) for n in (0, 7, 2**63 - 1, 2**64, 10**40)]
    objs += [dict(base, time=t) for t in (5e-324, 1e-5, 1e-7, 0.1 + 0.2, 1e16, 1.7976931348623157e308, -0.0, -2.5)]
    objs += [dict(base, type=t) for t in ('a "quoted" type', "back\\slash", "tab\t", "nul\x00", "\x7f", "ε",
                                          "\u2028", "\ud800", "release")]
    objs += [dict(base, prev="".join(rng.choice("0123456789abcdef") for _ in range(64)),
                  hash="".join(rng.choice("0123456789abcdef") for _ in range(64)),
                  body={"b": [1, 2.5, {"z": None, "a": "x"}], "a": {"nested": {"k": 1e-5}}, "ε": True})
             for _ in range(20)]
    return objs


def test_the_canonical_line_built_from_members_is_json_canonical_encoding() -> None:
    """The reader's canonical-form check builds a record's line from its members (``ledger._canonical_line``): the
    same text as json's canonical encoding of the object, for seqs beyond 64 bits, floats json writes with an
    exponent, types json escapes (quote, backslash, control characters, a lone surrogate) or leaves (ε, U+2028, DEL),
    and nested bodies with unsorted keys."""
    for obj in _record_objects():
        ledger_module._check_fields(obj)
        assert ledger_module._canonical_line(obj) == canonical.dumps_parsed(obj), obj


def test_the_canonical_line_test_catches_a_type_written_unescaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken variant: the type written between quotes without json's escapes (a quote inside it would read as the
    end of the string) fails the test above."""
    monkeypatch.setattr(canonical, "encode_string", lambda text: f'"{text}"')
    assert any(ledger_module._canonical_line(obj) != canonical.dumps_parsed(obj) for obj in _record_objects())


@pytest.fixture(scope="module")
def big_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10⁴ records, written with fsync off (durability is not what these tests are about)."""
    path = tmp_path_factory.mktemp("big") / "l.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        _make_ledger(path, 10_000)
    return path


def test_one_record_tampered_in_the_middle_of_ten_thousand_is_caught(big_ledger: Path, tmp_path: Path) -> None:
    lines = _lines(big_ledger)
    obj = json.loads(lines[5_000])
    obj["body"]["epsilon"] = 0.0
    path = tmp_path / "l.jsonl"
    path.write_text("".join([*lines[:5_000], canonical.dumps(obj) + "\n", *lines[5_001:]]), encoding="utf-8")
    records, problems = read_records(path)
    assert problems == [] and len(records) == 10_000
    assert verify_chain(records) == [f"record 5000 (seq 5000): hash mismatch, stored {obj['hash']} but content hashes "
                                     f"to {records[5_000].compute_hash()} (edited)"]


def test_one_record_rehashed_in_the_middle_of_ten_thousand_breaks_the_next_link(big_ledger: Path,
                                                                                 tmp_path: Path) -> None:
    lines = _lines(big_ledger)
    rec = Record.from_line(lines[5_000])
    forged = Record(rec.seq, rec.type, rec.time, rec.prev, {**rec.body, "epsilon": 0.0}, "")
    forged = Record(forged.seq, forged.type, forged.time, forged.prev, forged.body, forged.compute_hash())
    path = tmp_path / "l.jsonl"
    path.write_text("".join([*lines[:5_000], forged.to_line(), *lines[5_001:]]), encoding="utf-8")
    records, problems = read_records(path)
    assert problems == []
    found = verify_chain(records)
    assert len(found) == 1 and found[0].startswith("record 5001 (seq 5001): prev"), found


@pytest.mark.parametrize("reencode", [
    lambda obj: json.dumps(obj, sort_keys=True),  # spaces after separators
    lambda obj: json.dumps(obj, separators=(",", ":")),  # key order as parsed, not sorted
    lambda obj: json.dumps(obj, sort_keys=True, separators=(",", ":")),  # non-ASCII escaped
    lambda obj: canonical.dumps(obj).replace('"i":5000', '"i":5000,"i":5000', 1),  # a duplicate key
    lambda obj: canonical.dumps(obj).replace('"epsilon":1250.0', '"epsilon":1.25e3', 1),  # another number form
])
def test_a_non_canonical_re_encoding_in_the_middle_of_ten_thousand_is_caught(big_ledger: Path, tmp_path: Path,
                                                                             reencode) -> None:
    """The same record, same hash, in another JSON form: two parsers could read two contents from hashed bytes."""
    lines = _lines(big_ledger)
    obj = json.loads(lines[5_000])
    line = reencode(obj)
    assert line != lines[5_000].rstrip("\n") and json.loads(line) == obj
    path = tmp_path / "l.jsonl"
    path.write_text("".join([*lines[:5_000], line + "\n", *lines[5_001:]]), encoding="utf-8")
    records, problems = read_records(path)
    assert problems == [f"line 5001: {MALFORMED}: not in canonical JSON form (whitespace, key order, duplicate keys "
                        "or number format)"]
    assert len(records) == 9_999


# --- repeated body members (10⁵ charges of one event): parsed once, every line still checked whole -----------------

#: an object-valued member long enough for the reader to remember (ledger.REPEAT_MIN_CHARS)
EVENT = {"kind": "laplace", "label": "count of the rows " * 4, "sensitivity": {"value": 1.0, "inputs": {}}}
OTHER = {**EVENT, "label": "another query " * 6}


def _ledger_of(path: Path, bodies: list[dict]) -> list[str]:
    with Ledger.create(path) as ledger:
        for body in bodies:
            ledger.append("charge", body)
    return _lines(path)


def _read_each_line_alone(path: Path) -> list[Record]:
    return [Record.from_line(line) for line in _lines(path)]


def test_repeated_members_are_read_once_and_shared(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    _ledger_of(path, [{"event": EVENT, "n": i, "imputation": {"nan": 0.0}} for i in range(6)])
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == []
    assert records == _read_each_line_alone(path)
    assert all(r.body["event"] is records[0].body["event"] for r in records)  # the shortcut was taken
    assert all(r.compute_hash() == canonical.sha256_hex(canonical.encode(
        {"seq": r.seq, "type": r.type, "time": r.time, "prev": r.prev, "body": r.body})) for r in records)


@pytest.mark.parametrize("body", [
    {'a"event': EVENT, "event": OTHER},  # the remembered text first appears under another key (escaped quote)
    {'a"event': EVENT, "event": EVENT},
    {"event": OTHER, "label": json.dumps({"event": EVENT})},  # inside a string: quotes escaped, never matched
    {"event": {"event": EVENT}},  # one level down
    {"event": [EVENT]},
    {"event": EVENT, "other": EVENT},  # two members holding the one remembered text
])
def test_a_remembered_member_elsewhere_in_a_line_is_read_as_written(tmp_path: Path, body: dict) -> None:
    """Attack: the text of a remembered member in another place of a later line; the record read is the line's."""
    path = tmp_path / "l.jsonl"
    _ledger_of(path, [{"event": EVENT}, {"event": OTHER}, body, {"event": EVENT}])
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == []
    assert records == _read_each_line_alone(path)
    assert records[2].body == json.loads(canonical.dumps(body))


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda line: line.replace('"n":1', '"n": 1'), "not in canonical JSON form"),
    (lambda line: line.replace('{"event":', '{"event":' + canonical.dumps(EVENT) + ',"event":', 1),
     "not in canonical JSON form"),  # the remembered member twice: a duplicate key
    (lambda line: line.replace('"n":1', '"n":1e0'), "not in canonical JSON form"),
    (lambda line: line.replace('"n":1', '"n":NaN'), "not valid JSON"),
    (lambda line: line.replace('"seq":1', '"seq":true'), "seq must be a non-negative integer"),
    (lambda line: line.replace(canonical.dumps(EVENT), canonical.dumps(EVENT).replace(":1.0", ":1.00"), 1),
     "not in canonical JSON form"),
])
def test_a_line_repeating_a_member_is_still_checked_whole(tmp_path: Path, edit, problem: str) -> None:
    """A non-canonical or malformed line that repeats a remembered member gets the whole-line parser's verdict."""
    path = tmp_path / "l.jsonl"
    lines = _ledger_of(path, [{"event": EVENT, "n": i} for i in range(3)])
    edited = edit(lines[1])
    assert edited != lines[1]
    path.write_text("".join([lines[0], edited, lines[2]]), encoding="utf-8")
    records, problems = read_records(path)
    assert len(problems) == 1 and problems[0].startswith(f"line 2: {MALFORMED}: {problem}"), problems
    with pytest.raises(LedgerError, match=problem):
        Record.from_line(edited)
    assert records == [Record.from_line(lines[0]), Record.from_line(lines[2])]


def test_a_line_naming_the_readers_marker_is_read_as_written(tmp_path: Path) -> None:
    """Attack by someone who knows the process's marker nonce (an outsider cannot: it is drawn at random): the marker
    at the member's place and the remembered text one level down. The line is parsed whole."""
    marker = f"{ledger_module._Repeats._NONCE}-0"
    body = {"event": marker, "nested": {"event": EVENT}}
    path = tmp_path / "l.jsonl"
    _ledger_of(path, [{"event": EVENT}, body])
    records, problems = read_records(path)
    assert problems == [] and records == _read_each_line_alone(path)
    assert records[1].body == body


def _ledger_of_types(path: Path, entries: list[tuple[str, dict]]) -> None:
    with Ledger.create(path) as ledger:
        for rtype, body in entries:
            ledger.append(rtype, body)


def test_each_record_type_remembers_its_own_members(tmp_path: Path) -> None:
    """The reader keeps remembered members per record type (read from the line's tail): charges repeating one event
    between releases that hold none, and info lines repeating another, share their type's member; every line is read
    as written."""
    path = tmp_path / "l.jsonl"
    entries = []
    for i in range(6):
        entries += [("charge", {"event": EVENT, "n": i}), ("release", {"charge_seq": 2 * i, "output": float(i)}),
                    ("info", {"info": OTHER, "n": i})]
    _ledger_of_types(path, entries)
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == [] and records == _read_each_line_alone(path)
    charges = [r for r in records if r.type == "charge"]
    infos = [r for r in records if r.type == "info"]
    assert all(r.body["event"] is charges[0].body["event"] for r in charges)
    assert all(r.body["info"] is infos[0].body["info"] for r in infos)


@pytest.mark.parametrize("rtype", ['charge","type":"release', 'x,"type":"charge"}', "charge\n"])
def test_a_type_whose_text_names_another_type_is_read_as_written(tmp_path: Path, rtype: str) -> None:
    """Attack on the type hint: a record type whose escaped text holds ``,"type":`` or another type's tail. The hint
    picks which remembered members are tried; the record read is the line's."""
    path = tmp_path / "l.jsonl"
    _ledger_of_types(path, [("charge", {"event": EVENT}), (rtype, {"event": EVENT, "n": 1}),
                            ("charge", {"event": OTHER}), (rtype, {"event": OTHER, "n": 2})])
    records, problems = read_records(path)
    assert problems == [] and records == _read_each_line_alone(path)
    assert [r.type for r in records] == ["charge", rtype, "charge", rtype]


def test_more_record_types_than_kept_apart_share_one(tmp_path: Path) -> None:
    """Beyond ledger.MAX_REPEAT_TYPES distinct types the lines share one remembered set: still read as written."""
    path = tmp_path / "l.jsonl"
    types = [f"kind-{i}" for i in range(ledger_module.MAX_REPEAT_TYPES + 5)]
    _ledger_of_types(path, [(rtype, {"event": EVENT, "n": i}) for i, rtype in enumerate(types * 2)])
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == [] and records == _read_each_line_alone(path)
    first = {id(r.body["event"]) for r in records[:len(types)]}
    assert all(id(r.body["event"]) in first for r in records[len(types):])  # the second round took the shortcut


# the fast parser (``canonical.fast_loads``, orjson) is used only where json's canonical re-encoding of its parse is the
# line; these are lines where orjson and json disagree, each read as json reads it


def _rewritten(path: Path, line_no: int, old: str, new: str) -> str:
    """Replace ``old`` by ``new`` in line ``line_no`` (0-based) of the ledger; the edited line."""
    lines = _lines(path)
    assert old in lines[line_no]
    lines[line_no] = lines[line_no].replace(old, new, 1)
    path.write_text("".join(lines), encoding="utf-8")
    return lines[line_no]


@pytest.mark.parametrize(("canonical_number", "orjson_number"), [("1e-05", "0.00001"), ("1.5e-07", "0.00000015")])
def test_a_number_as_orjson_writes_it_but_json_does_not_is_refused(tmp_path: Path, canonical_number: str,
                                                                   orjson_number: str) -> None:
    """orjson writes 1e-05 as 0.00001 (json's canonical form is 1e-05): a line holding orjson's form is not canonical,
    whichever parser reads it first. (A reader that compared orjson's re-encoding instead accepts it: below.)"""
    path = tmp_path / "l.jsonl"
    _ledger_of(path, [{"x": float(canonical_number)}, {"x": 1.0}])
    edited = _rewritten(path, 0, f'"x":{canonical_number}', f'"x":{orjson_number}')
    records, problems = read_records(path)
    assert problems == [f"line 1: {MALFORMED}: not in canonical JSON form (whitespace, key order, duplicate keys or "
                        "number format)"]
    assert [r.seq for r in records] == [1]
    with pytest.raises(LedgerError, match="not in canonical JSON form"):
        Record.from_line(edited)


def test_the_orjson_form_test_catches_a_reader_comparing_orjsons_re_encoding(tmp_path: Path, monkeypatch) -> None:
    """Broken variant: the canonical check done with orjson's encoder accepts the orjson-form line above."""
    import orjson

    path = tmp_path / "l.jsonl"
    _ledger_of(path, [{"x": 1e-05}])
    _rewritten(path, 0, '"x":1e-05', '"x":0.00001')
    monkeypatch.setattr(ledger_module.canonical, "dumps_parsed",
                        lambda obj: orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode())
    records, problems = read_records(path)
    assert problems == [] and len(records) == 1  # accepted: the test above fails on this reader


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**40])
def test_an_integer_beyond_64_bits_is_read_as_json_reads_it(tmp_path: Path, value: int) -> None:
    """orjson refuses integers beyond 64 bits, json reads them: the line is read by json, exactly."""
    path = tmp_path / "l.jsonl"
    _ledger_of(path, [{"n": value, "event": EVENT}, {"n": value, "event": EVENT}])
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == []
    assert [r.body["n"] for r in records] == [value, value] and all(type(r.body["n"]) is int for r in records)
    assert records == _read_each_line_alone(path)


@pytest.mark.parametrize(("old", "new"), [
    ('"x":1', '"x":1,"x":1'),  # a duplicate key: orjson keeps one, json's re-encoding then differs
    ('"x":1', '"x":-0'),
    ('"x":1', '"x":1E0'),
])
def test_lines_orjson_parses_are_still_held_to_the_canonical_form(tmp_path: Path, old: str, new: str) -> None:
    path = tmp_path / "l.jsonl"
    _ledger_of(path, [{"x": 1}, {"x": 1}])
    edited = _rewritten(path, 0, old, new)
    _, problems = read_records(path)
    assert len(problems) == 1 and problems[0].startswith(f"line 1: {MALFORMED}: not in canonical JSON form"), problems
    with pytest.raises(LedgerError, match="not in canonical JSON form"):
        Record.from_line(edited)



def test_a_long_tail_keys_no_remembered_set_of_its_own() -> None:
    """A malformed line whose last ``,"type":`` comes early would key its remembered members by nearly the whole
    line (16 such keys kept for the read); a tail longer than MAX_TYPE_TAIL_CHARS shares the one set instead."""
    kept: dict = {}
    long_tail = '{"body":{},"type":"' + "x" * (ledger_module.MAX_TYPE_TAIL_CHARS + 10) + '"}'
    ledger_module._repeats_for(long_tail, kept)
    ledger_module._repeats_for('{"body":{},"hash":"","type":"charge"}', kept)
    assert sorted(kept) == ["", ',"type":"charge"}']


def _nested(levels: int) -> dict:
    """A body nesting ``levels`` levels (itself the first)."""
    body: dict = {"x": 1}
    for _ in range(levels - 1):
        body = {"k": body}
    return body


def test_a_body_nested_to_the_limit_is_written_and_read_one_deeper_is_refused(tmp_path: Path) -> None:
    """Ledger.append refuses a body nested deeper than MAX_BODY_DEPTH (its line would nest deeper than the readers'
    limit, and the reports' renderers recurse through bodies); nothing is written and the ledger stays usable."""
    path = tmp_path / "l.jsonl"
    with Ledger.create(path) as ledger:
        ledger.append("info", _nested(ledger_module.MAX_BODY_DEPTH))
        with pytest.raises(LedgerError, match=f"nested deeper than {ledger_module.MAX_BODY_DEPTH} levels"):
            ledger.append("info", _nested(ledger_module.MAX_BODY_DEPTH + 1))
        with pytest.raises(LedgerError, match="not canonical-JSON encodable"):
            ledger.append("info", _nested(100_000))  # beyond the encoder's recursion: refused by name, no traceback
        ledger.append("info", {"after": True})
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == [] and len(records) == 2
    assert canonical.json_depth(_lines(path)[0]) == canonical.MAX_DEPTH


@pytest.mark.parametrize("levels", [canonical.MAX_DEPTH, 900, 5_000])
def test_a_forged_line_nested_deeper_than_the_limit_is_malformed(tmp_path: Path, levels: int) -> None:
    """A line no writer makes (a body nested deeper than MAX_BODY_DEPTH) is a malformed line, refused before
    parsing: no RecursionError in the reader, the reports or verify, however deep."""
    path = tmp_path / "l.jsonl"
    with Ledger.create(path) as ledger:
        ledger.append("info", {"n": 1})
    first = _lines(path)[0]
    body = '{"k":' * (levels - 1) + '{"x":1}' + "}" * (levels - 1)
    line = (f'{{"body":{body},"hash":"{"0" * 64}","prev":"{json.loads(first)["hash"]}","seq":1,"time":1.0,'
            '"type":"info"}')
    path.write_text(first + line + "\n", encoding="utf-8")
    records, problems = read_records(path)
    assert len(records) == 1
    assert problems == [f"line 2: {MALFORMED}: nested deeper than {canonical.MAX_DEPTH} levels ({levels + 1})"]


@pytest.mark.parametrize("body", [{"path": "/data/\udcff.csv"}, {"label": "\ud800"}, {"\udc80": 1}])
def test_a_lone_surrogate_is_refused_by_name_and_nothing_is_written(tmp_path: Path, body: dict) -> None:
    """A file name read with surrogateescape holds a lone surrogate, which has no UTF-8: refused as a body that is
    not canonical-JSON encodable (a LedgerError, not a UnicodeEncodeError), nothing written, the ledger usable."""
    path = tmp_path / "l.jsonl"
    with Ledger.create(path) as ledger:
        with pytest.raises(LedgerError, match="not canonical-JSON encodable"):
            ledger.append("info", body)
        ledger.append("info", {"after": True})
    records, problems = read_records(path)
    assert problems == [] and [r.body for r in records] == [{"after": True}]
