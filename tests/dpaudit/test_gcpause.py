"""The cyclic-GC pause: restores the collector's state, and the short commands run under it."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from click.testing import CliRunner

import dpaudit.cli_account
from dpaudit.cli import main
from dpaudit.gcpause import cyclic_gc_paused


@pytest.fixture
def collector_state():
    enabled = gc.isenabled()
    yield
    (gc.enable if enabled else gc.disable)()


def test_the_collector_is_paused_inside_and_restored_after_even_on_error(collector_state):
    gc.enable()
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("inside")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_state):
    gc.disable()
    with cyclic_gc_paused():
        pass
    assert not gc.isenabled()


def test_an_account_command_runs_with_the_collector_paused_and_restores_it(collector_state, monkeypatch):
    seen = []
    compose = dpaudit.cli_account._compose

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return compose(*args, **kwargs)

    gc.enable()
    monkeypatch.setattr(dpaudit.cli_account, "_compose", recording)
    result = CliRunner().invoke(main, ["account", "laplace", "--sensitivity", "1", "--epsilon", "0.5"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert seen == [False] and gc.isenabled()


def test_freeze_moves_the_objects_alive_to_the_permanent_generation(collector_state):
    gc.enable()
    before = gc.get_freeze_count()
    try:
        with cyclic_gc_paused(freeze=True):
            kept = [[i] for i in range(1000)]
        assert gc.get_freeze_count() >= before + len(kept) and gc.isenabled()
    finally:
        gc.unfreeze()


def test_in_process_commands_never_freeze(collector_state):
    """Only the console script (``program``, a process that ends with the command) freezes; ``main`` called in a
    longer-lived process (here, the test's) leaves the collector as it found it."""
    before = gc.get_freeze_count()
    result = CliRunner().invoke(main, ["account", "laplace", "--sensitivity", "1", "--epsilon", "0.5"])
    assert result.exit_code == 0, result.output
    assert gc.get_freeze_count() == before


def test_the_console_script_freezes_for_verify_and_account_only():
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('FROZEN', gc.get_freeze_count() > 0, gc.isenabled(), file=sys.stderr))\n"
            "from dpaudit.cli import program\n"
            "program()\n")
    for args, frozen in ((["account", "laplace", "--sensitivity", "1", "--epsilon", "0.5"], "True"),
                         (["report", "--help"], "False")):
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == f"FROZEN {frozen} True"
