"""A recoverable close: every step of close can fail (full disk, kill, MLflow down) and is finished later, once.

Each fault test stops close at one step, then finishes it (a retried ``close()`` in the same process, or
``recover_run`` as ``dpaudit recover`` does from another one) and checks the run as an auditor would: ``verify``
VALID, one ``close`` record, the store's log naming the run exactly once under a valid signed head.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit import transparency
from dpaudit.cli import main
from dpaudit.errors import InvalidParameter, LedgerError
from dpaudit.ledger import read_records
from dpaudit.recovery import ABORTED, local_run, recover_run
from dpaudit.signing import load_or_create_key
from dpaudit.store import CERTIFICATE, LEDGER, PUBLIC_KEY, REPORT_JSON, REPORT_MD
from dpaudit.verify import verify_bundle
from dpaudit.verify_store import verify_store


def _disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _open_run(make_session, **kwargs):
    s = make_session(epsilon=1.0, name="closing", **kwargs)
    s.laplace(3.0, sensitivity=1.0, epsilon=0.2, label="count")
    s.exponential([1.0, 2.0, 0.5], sensitivity=1.0, epsilon=0.1, label="pick")
    return s


def _assert_complete(run_dir: Path) -> None:
    """What an auditor checks: VALID, one close record, logged exactly once, the store consistent."""
    root = run_dir.parent
    report = verify_bundle(run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    records, problems = read_records(run_dir / LEDGER)
    assert not problems
    assert [r.type for r in records].count("close") == 1 and records[-1].type == "close"
    assert [e.run_id for e in transparency.read_log(root)].count(run_dir.name) == 1
    store = verify_store(root)
    assert store.valid, store.reasons
    assert all((run_dir / name).is_file() for name in (CERTIFICATE, PUBLIC_KEY, REPORT_MD, REPORT_JSON))


def _fail_on_call(number: int, real):
    """A stand-in for ``real`` whose ``number``-th call (1-based) fails with a full disk; the others pass through."""
    calls = {"n": 0}

    def step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == number:
            _disk_full()
        return real(*args, **kwargs)

    return step


# every step of close after the close record, as ("module:attribute" patched, failing call): the certificate file,
# the public key beside it, the log line, the log head, each report
STEPS = {
    "certificate": ("dpaudit.certificate:atomic_replace", 1),
    "public key": ("dpaudit.certificate:atomic_replace", 2),
    "log line": ("dpaudit.transparency:fsync_dir", 1),
    "log head": ("dpaudit.transparency:atomic_replace", 1),
    "report.md": ("dpaudit.report.render:atomic_replace", 1),
    "report.json": ("dpaudit.report.render:atomic_replace", 2),
}


@pytest.mark.parametrize("finisher", ["retry close()", "recover_run"])
@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_full_disk_at_any_close_step_is_finished_later_exactly_once(make_session, monkeypatch, step, finisher):
    """Attack: ENOSPC at one step of close. Before the fix a second close() read a certificate that was never
    written (or returned a stale one) and nothing could append the log entry; now both finishers complete it."""
    s = _open_run(make_session)
    target, number = STEPS[step]
    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)  # by module: `dpaudit.report.render` is also a function's name
    real = getattr(module, name)
    monkeypatch.setattr(module, name, _fail_on_call(number, real))
    with pytest.raises((OSError, LedgerError)):
        s.close()
    monkeypatch.setattr(module, name, real)  # the disk has room again
    if finisher == "retry close()":
        certificate = s.close()
    else:
        result = recover_run(s.run_dir, s.run_dir.parent)
        assert not result.aborted and result.done
        certificate = result.certificate
    _assert_complete(s.run_dir)
    assert certificate == json.loads((s.run_dir / CERTIFICATE).read_text())
    assert s.close() == certificate  # idempotent once finished


def test_a_full_disk_at_the_close_record_leaves_the_session_open_and_closable(make_session, monkeypatch):
    """The close record's append fails (nothing written): the session stays open, a later close() appends it once."""
    s = _open_run(make_session)
    real = s._ledger.append
    monkeypatch.setattr(s._ledger, "append", lambda *a, **k: (_ for _ in ()).throw(
        LedgerError("cannot write to ledger: [Errno 28] No space left on device")))
    with pytest.raises(LedgerError):
        s.close()
    monkeypatch.setattr(s._ledger, "append", real)
    s.close()
    _assert_complete(s.run_dir)


def test_close_twice_writes_nothing_more(make_session):
    s = _open_run(make_session)
    first = s.close()
    files = {p.name: p.read_bytes() for p in s.run_dir.iterdir() if p.is_file()}
    log = (transparency.log_dir(s.run_dir.parent) / transparency.LOG_FILE).read_bytes()
    assert s.close() == first
    assert {p.name: p.read_bytes() for p in s.run_dir.iterdir() if p.is_file()} == files
    assert (transparency.log_dir(s.run_dir.parent) / transparency.LOG_FILE).read_bytes() == log
    result = recover_run(s.run_dir, s.run_dir.parent)
    assert result.done == () and "nothing to recover" in result.summary()
    assert (transparency.log_dir(s.run_dir.parent) / transparency.LOG_FILE).read_bytes() == log


_KILL_CHILD = textwrap.dedent("""
    import importlib, os, signal, sys
    from dpaudit import Session
    from dpaudit.mechanisms.randomness import SeededRandom

    store, target, number = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = Session(epsilon=1.0, delta=1e-6, rng=SeededRandom(0), store=store, mirror=False, name="killed")
    s.laplace(3.0, sensitivity=1.0, epsilon=0.2, label="count")
    print(s.run_id, flush=True)
    module, _, path = target.partition(":")
    *parents, name = path.split(".")
    owner = importlib.import_module(module)
    for parent in parents:
        owner = getattr(owner, parent)
    real, calls = getattr(owner, name), [0]

    def step(*args, **kwargs):
        calls[0] += 1
        if calls[0] == number:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(owner, name, step)
    s.close()
""")

KILL_STEPS = {**STEPS, "close record": ("dpaudit.ledger:Ledger._write_durably", 1),
              "mirror": ("dpaudit.tracking.session_mirror:SessionMirror.finish", 1)}


@pytest.mark.parametrize("step", sorted(KILL_STEPS))
def test_a_kill_at_any_close_step_is_recovered(step):
    """SIGKILL in a child process at each step of close, then ``recover`` (with --abort when the close record was
    never written) from this process: VALID, closed once, logged once. Before the fix no command finished a run."""
    store = Path(os.environ["DPAUDIT_HOME"])  # the test's local store, whose key verify trusts
    target, number = KILL_STEPS[step]
    child = subprocess.run([sys.executable, "-c", _KILL_CHILD, str(store), target, str(number)],
                           capture_output=True, text=True, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr
    run_dir = store / child.stdout.split()[0]
    if step == "close record":
        with pytest.raises(InvalidParameter, match="--abort"):
            recover_run(run_dir, store)
        result = recover_run(run_dir, store, abort=True)
        assert result.aborted
    else:
        result = recover_run(run_dir, store)
        assert not result.aborted
    _assert_complete(run_dir)
    assert recover_run(run_dir, store).done == ()  # a second recovery finds nothing to do


KILL_TRIALS = 20
"""Random kills per close step in the matrix below."""

#: the system calls a step is made of (files.py, ledger.py, transparency.py write through these): a kill lands
#: before one of them, or in the middle of a write (a torn prefix reaches the file), or right after the step
_IO_CALLS = ("open", "write", "fsync", "replace", "rename", "link", "unlink", "ftruncate")


def _close_killed_inside(store: Path, target: str, number: int, position: int, torn: float, counts: int) -> None:
    """In a forked child: open a session (secure randomness, no mirror), release once, then close, dying by SIGKILL
    at system call ``position`` (1-based, counted from the start of the ``number``-th call of ``target``) of the
    step; a position past the step's last call dies right after the step. When the call is a ``write``, the fraction
    ``torn`` of its bytes is written first. With ``counts`` >= 0 no kill lands inside: the child writes the step's
    number of system calls to that pipe descriptor and dies after the step. Never returns."""
    try:
        from dpaudit import Session

        s = Session(epsilon=1.0, delta=1e-6, store=store, mirror=False, name="killed")
        s.laplace(3.0, sensitivity=1.0, epsilon=0.2, label="count")
        module, _, path = target.partition(":")
        *parents, name = path.split(".")
        owner = importlib.import_module(module)
        for parent in parents:
            owner = getattr(owner, parent)
        real, calls, seen = getattr(owner, name), [0], [0]

        def counted(call_name, real_call):
            def call(*args, **kwargs):
                seen[0] += 1
                if seen[0] == position and counts < 0:
                    if call_name == "write":
                        data = bytes(args[1])
                        real_call(args[0], data[:int(torn * len(data))])
                    os.kill(os.getpid(), signal.SIGKILL)
                return real_call(*args, **kwargs)
            return call

        def step(*args, **kwargs):
            calls[0] += 1
            if calls[0] != number:
                return real(*args, **kwargs)
            originals = {n: getattr(os, n) for n in _IO_CALLS}
            for n, real_call in originals.items():
                setattr(os, n, counted(n, real_call))
            try:
                real(*args, **kwargs)
            finally:
                for n, real_call in originals.items():
                    setattr(os, n, real_call)
            if counts >= 0:
                os.write(counts, str(seen[0]).encode())
            os.kill(os.getpid(), signal.SIGKILL)

        setattr(owner, name, step)
        s.close()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(3)  # only reached when no kill happened: the parent fails on the exit status


def _fork_and_wait(*args) -> None:
    pid = os.fork()
    if pid == 0:
        _close_killed_inside(*args)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"child exit status {status}"


def _step_calls(store: Path, target: str, number: int) -> int:
    """How many system calls the step makes (measured in a child that dies right after it)."""
    read_end, write_end = os.pipe()
    try:
        _fork_and_wait(store, target, number, 0, 0.0, write_end)
        os.close(write_end)
        write_end = -1
        return int(os.read(read_end, 64))
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


@pytest.mark.slow
@pytest.mark.parametrize("step", sorted(KILL_STEPS))
def test_twenty_random_kills_inside_each_close_step_are_recovered(tmp_path, step):
    """SIGKILL at 20 seeded random points inside each step of close: before any system call of the step (open,
    write, fsync, replace, link, unlink, ...), in the middle of a write (a torn prefix on disk), or right after the
    step. After each: ``recover`` (with ``--abort`` only when no whole close record reached the ledger) gives a run
    that verifies VALID (FINISHED: for release; ABORTED: not for release, "run aborted"), with exactly one close
    record, one log entry, a consistent store, and nothing left for a second recovery. Children are forked from this
    process (no interpreter start per trial). A finisher that skipped a step, or a close that wrote a step
    non-atomically, fails here: e.g. a report written in place is left torn and verify's report check fails."""
    from dpaudit.trust import KeyTrust

    target, number = KILL_STEPS[step]
    calls = _step_calls(tmp_path / "calibration", target, number)
    rng = random.Random(f"close-kill-{step}")
    # every point of the step (calls + 1 of them) is hit at least once when 20 trials allow, in a seeded order
    positions = [trial % (calls + 1) + 1 for trial in range(KILL_TRIALS)] if calls < KILL_TRIALS else sorted(
        rng.sample(range(1, calls + 2), KILL_TRIALS))
    rng.shuffle(positions)
    for trial, position in enumerate(positions):
        store = tmp_path / f"trial-{trial}"
        torn = rng.random()
        _fork_and_wait(store, target, number, position, torn, -1)
        (run_dir,) = [p for p in store.iterdir() if (p / LEDGER).is_file()]
        where = f"{step}, trial {trial}: kill at call {position} of {calls} (torn {torn:.2f})"
        try:
            result = recover_run(run_dir, store)
        except InvalidParameter as exc:  # the close record never (wholly) reached the ledger
            assert step == "close record" and "--abort" in str(exc), where
            result = recover_run(run_dir, store, abort=True)
        report = verify_bundle(run_dir, allow_not_for_release=True, trust=KeyTrust.default(store))
        assert report.valid, (where, report.reasons)
        if result.aborted:
            assert [r.split(" (")[0] for r in report.not_for_release] == ["run aborted"], where
        else:
            assert report.not_for_release == [], where  # the close record was whole: finished, for release
        records, problems = read_records(run_dir / LEDGER)
        assert not problems and [r.type for r in records].count("close") == 1 and records[-1].type == "close", where
        assert [e.run_id for e in transparency.read_log(store)] == [run_dir.name], where
        whole = verify_store(store, trust=KeyTrust.default(store))
        assert whole.valid, (where, whole.reasons)
        assert recover_run(run_dir, store).done == (), where


def test_abort_certifies_every_charge_including_one_never_released(make_session, monkeypatch):
    """A process dies after a charge and before its release: the aborted run's claim still counts that charge."""
    s = _open_run(make_session)
    s.charge(s.laplace_event(1.0, 0.3, label="lost"), plugin="session", mechanism="laplace")  # no release follows
    s._ledger.close()  # the process dies: no close record
    records_before = read_records(s.ledger_path)[0]
    runner = CliRunner()
    refused = runner.invoke(main, ["recover", s.run_id])
    assert refused.exit_code == 2 and "--abort" in refused.output
    assert read_records(s.ledger_path)[0] == records_before  # nothing written
    done = runner.invoke(main, ["recover", s.run_id, "--abort"])
    assert done.exit_code == 0, done.output
    assert f"closed as {ABORTED}" in done.output
    records = read_records(s.ledger_path)[0]
    assert records[-1].body == {"status": ABORTED, "charges": 3}
    certificate = json.loads((s.run_dir / CERTIFICATE).read_text())
    assert 0.59 < certificate["claim"]["epsilon"] <= 0.6 + 1e-12  # the released 0.2 + 0.1 alone compose to <= 0.3
    _assert_complete(s.run_dir)


def test_a_torn_close_line_is_cut_off_and_the_run_aborted(make_session):
    """A kill in the middle of the close record's write: the torn bytes are set aside, the run closes as aborted."""
    s = _open_run(make_session)
    s._ledger.close()
    with open(s.ledger_path, "ab") as fh:
        fh.write(b'{"body":{"charges":2,"status":"FINI')
    with pytest.raises(InvalidParameter, match="no close record"):
        recover_run(s.run_dir, s.run_dir.parent)
    assert recover_run(s.run_dir, s.run_dir.parent, abort=True).aborted
    assert s.ledger_path.with_suffix(".torn").is_file()
    _assert_complete(s.run_dir)


def test_recover_refuses_a_key_other_than_the_runs(make_session, tmp_path, monkeypatch):
    """Attack: sign a crashed run with another key. The open record names the fingerprint; nothing is written."""
    s = _open_run(make_session)
    with monkeypatch.context() as patched, pytest.raises(OSError):
        patched.setattr("dpaudit.certificate.atomic_replace", _disk_full)
        s.close()
    other = tmp_path / "other.pem"
    load_or_create_key(other)
    result = CliRunner().invoke(main, ["recover", s.run_id, "--signing-key", str(other)])
    assert result.exit_code == 2 and "refusing to sign with another key" in result.output
    assert not (s.run_dir / CERTIFICATE).exists()
    with pytest.raises(InvalidParameter, match="another key"):
        recover_run(s.run_dir, s.run_dir.parent, signing_key=other)


def test_a_log_naming_the_run_with_another_certificate_is_not_rewritten(make_session):
    """Attack: a store whose log already names the run with a different certificate (e.g. a swapped one): recovery
    refuses instead of appending a second entry or rewriting the first."""
    s = _open_run(make_session)
    s.close()
    log = transparency.log_dir(s.run_dir.parent) / transparency.LOG_FILE
    entry = json.loads(log.read_text())
    entry["certificate_sha256"] = "0" * 64
    log.write_text(json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n")
    (s.run_dir / CERTIFICATE).unlink()
    with pytest.raises(LedgerError, match="another certificate"):
        recover_run(s.run_dir, s.run_dir.parent)
    assert len(log.read_text().splitlines()) == 1


def test_a_rewritten_log_is_not_re_signed(make_session):
    """Attack: drop another run's entry from the log, then trigger a recovery hoping it re-signs the head over the
    shortened log. Only a head one entry short of the recovered run's own entry is re-signed."""
    first, second = _open_run(make_session), None
    first.close()
    second = _open_run(make_session, seed=1)
    second.close()
    root = first.run_dir.parent
    log = transparency.log_dir(root) / transparency.LOG_FILE
    log.write_text(log.read_text().splitlines(keepends=True)[1])  # the first run's entry removed
    head_before = (transparency.log_dir(root) / transparency.HEAD_FILE).read_bytes()
    (second.run_dir / REPORT_MD).unlink()
    with pytest.raises(LedgerError, match="not"):
        recover_run(second.run_dir, root)
    assert (transparency.log_dir(root) / transparency.HEAD_FILE).read_bytes() == head_before


@pytest.mark.parametrize("bad", ["../elsewhere", "a/b", "..", "."])
def test_run_ids_with_path_parts_are_refused(bad):
    with pytest.raises(InvalidParameter):
        local_run(bad, None)
    result = CliRunner().invoke(main, ["recover", bad])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_recover_of_a_folder_outside_a_store_is_refused(make_session, tmp_path):
    """An exported bundle is not a store's run: recovery would sign into no store's log."""
    s = _open_run(make_session)
    s.close()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for name in (LEDGER, CERTIFICATE, PUBLIC_KEY):
        (bundle / name).write_bytes((s.run_dir / name).read_bytes())
    result = CliRunner().invoke(main, ["recover", str(bundle)])
    assert result.exit_code == 2 and "not a folder of a run store" in result.output


def test_recover_cli_says_what_it_did(make_session, monkeypatch):
    s = _open_run(make_session)
    with monkeypatch.context() as patched, pytest.raises(LedgerError):
        patched.setattr("dpaudit.transparency.atomic_replace", _disk_full)
        s.close()
    result = CliRunner().invoke(main, ["recover", s.run_id])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("recovered: ") and "transparency log entry" in result.output
    assert "mirror sync" in result.output
    again = CliRunner().invoke(main, ["recover", s.run_id])
    assert again.exit_code == 0 and again.output.startswith("nothing to recover")
    _assert_complete(s.run_dir)


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning")  # MLflow's own, not ours
def test_mlflow_down_during_close_then_mirror_sync_completes_it(make_session, monkeypatch, capsys):
    """MLflow fails at every call of close: the ledger and certificate are complete, a warning names the command,
    and `dpaudit mirror sync RUN` later brings the MLflow run up to date, idempotently. Before the fix only
    Python could resync a run."""
    from mlflow.tracking import MlflowClient

    from dpaudit.tracking import resolve_tracking_uri

    s = _open_run(make_session, mirror=True)
    assert s._tracking.wait()  # the mirror connects lazily, in its own worker thread
    client, mlflow_id = s._tracking.mirror.client, s._tracking.mlflow_run_id()
    with monkeypatch.context() as down:
        for name in ("log_batch", "log_artifact", "set_terminated", "get_run"):
            down.setattr(client, name, lambda *a, **k: (_ for _ in ()).throw(ConnectionError("MLflow down")))
        s.close()
    assert f"dpaudit mirror sync {s.run_id}" in capsys.readouterr().err
    _assert_complete(s.run_dir)
    reader = MlflowClient(resolve_tracking_uri(None))
    assert reader.get_run(mlflow_id).info.status == "RUNNING"
    assert not reader.get_metric_history(mlflow_id, "release.count")
    result = CliRunner().invoke(main, ["mirror", "sync", s.run_id])
    assert result.exit_code == 0, result.output
    records = read_records(s.ledger_path)[0]
    assert f"mirrored {len(records)} new records" in result.output
    run = reader.get_run(mlflow_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["dpaudit.mirrored_seq"] == str(records[-1].seq)
    assert len(reader.get_metric_history(mlflow_id, "release.count")) == 1
    assert {CERTIFICATE, LEDGER, REPORT_MD} <= {a.path for a in reader.list_artifacts(mlflow_id)}
    again = CliRunner().invoke(main, ["mirror", "sync", s.run_id])
    assert again.exit_code == 0 and "mirrored 0 new records" in again.output
    assert len(reader.get_metric_history(mlflow_id, "release.count")) == 1


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning")
def test_mirror_sync_of_a_run_not_in_the_store_is_a_usage_error():
    """(A run of the store that MLflow never heard of is created there: tests/dpaudit/test_session_mirror.py.)"""
    result = CliRunner().invoke(main, ["mirror", "sync", "f" * 32])
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.parametrize("where", ["another id", "another store"])
def test_a_run_copied_elsewhere_is_neither_certified_nor_aborted_there(make_session, tmp_path, where):
    """Attack: copy a crashed run's folder under another run id (or into another store sharing the key) and
    recover it there, to get a second certificate and log entry for one run. Refused; nothing written."""
    import shutil

    s = _open_run(make_session)
    s._ledger.close()  # the process dies: no close record, no certificate
    root = s.run_dir.parent
    if where == "another id":
        target_root, target = root, root / ("f" * 32)
    else:
        target_root = tmp_path / "other_store"
        shutil.copytree(root / "keys", target_root / "keys")
        target = target_root / s.run_id
    shutil.copytree(s.run_dir, target)
    ledger_before = (target / LEDGER).read_bytes()
    with pytest.raises(LedgerError, match="copied elsewhere"):
        recover_run(target, target_root, abort=True)
    assert (target / LEDGER).read_bytes() == ledger_before and not (target / CERTIFICATE).exists()
