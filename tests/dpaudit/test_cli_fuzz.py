"""No tracebacks from the CLI (issue 17.5): hostile command lines end in one error line and exit 1 or 2.

Every command line runs in one child process (cli_fuzz_child.py) under a 6 GiB address-space limit (RLIMIT_AS), so a
command that tries to read /dev/zero or build a huge object fails inside the limit instead of exhausting the machine;
a per-command hang guard (a timeout on the child's answer, not a speed assertion) catches a command that never
ends. Checked for each: no exception escaped the CLI, no "Traceback" in its output, exit code in {0, 1, 2}.

The hypothesis search is derandomized (a fixed seed derived from the test) and bounded to 120 examples; it is a
smoke fuzz, not a proof: its miss rate for a crash reachable only by a specific value is not quantified, which is why
the hostile cases the issue found are also listed explicitly.
"""

from __future__ import annotations

import json
import math
import os
import resource
import select
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CHILD = Path(__file__).with_name("cli_fuzz_child.py")
MEMORY_LIMIT = 6 << 30
#: hang guard per command, generous for a loaded 2-core machine; not a speed requirement
HANG_GUARD_S = 120.0


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _isolated_env(root: Path) -> dict[str, str]:
    """The child's environment: run store, trust store and MLflow store inside ``root``."""
    return {**os.environ, "DPAUDIT_HOME": str(root / "home"), "DPAUDIT_TRUST_STORE": str(root / "trusted_keys.json"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}


class Cli:
    """The child process: send a command line, get its exit code, output and any escaped exception."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen([sys.executable, str(CHILD)], cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=_isolated_env(cwd),
                                        preexec_fn=_limit_memory)

    def run(self, args: list[str]) -> dict:
        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], HANG_GUARD_S)
        assert ready, f"no answer within the hang guard for {args}"
        line = self.process.stdout.readline()
        assert line, f"the CLI process died on {args} (exit {self.process.poll()})"
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=HANG_GUARD_S)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """A folder of hostile inputs, and one valid run whose certificate is then damaged in several ways."""
    from dpaudit import Session
    from dpaudit.mechanisms.randomness import SeededRandom

    root = tmp_path_factory.mktemp("hostile")
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "deep_object.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    (root / "dup.json").write_text('{"a": 1, "a": 2}')
    (root / "nan.json").write_text('{"a": NaN}')
    (root / "not_json.json").write_bytes(b"\xff\xfe\x00garbage")
    (root / "passwd_link.json").symlink_to("/etc/passwd")
    with Session(1.0, 1e-6, store=root / "store", mirror=False, rng=SeededRandom(0)) as session:
        session.laplace(1.0, 1.0, 0.5)
    good = session.run_dir
    certificate = (good / "certificate.json").read_text()
    epsilon = json.dumps(json.loads(certificate)["claim"]["epsilon"])
    for name, replacement in [("nan_claim", "NaN"), ("huge_claim", "1e400"), ("inf_claim", "Infinity")]:
        folder = root / name
        folder.mkdir()
        for f in good.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        damaged = certificate.replace(f'"epsilon": {epsilon}', f'"epsilon": {replacement}', 1)
        assert damaged != certificate
        (folder / "certificate.json").write_text(damaged)
    for name, content in [("deep_certificate", '{"claim": ' + "[" * 100_000 + "]" * 100_000 + "}"),
                          ("zero_certificate", None)]:
        folder = root / name
        folder.mkdir()
        for f in good.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        (folder / "certificate.json").unlink()
        if content is None:
            (folder / "certificate.json").symlink_to("/dev/zero")
        else:
            (folder / "certificate.json").write_text(content)
    return root


@pytest.fixture(scope="module")
def cli(hostile):
    child = Cli(hostile)
    yield child
    child.close()


def _assert_clean(result: dict, args: list[str]) -> None:
    assert result["uncaught"] is None, f"{args}: {result['uncaught']}"
    assert "Traceback" not in result["output"], f"{args}: {result['output']}"
    assert result["exit_code"] in (0, 1, 2), f"{args}: exit {result['exit_code']}"


DPSGD = ["account", "dpsgd", "--sample-rate", "0.01", "--noise-multiplier", "1.0", "--steps", "100", "--delta", "1e-5"]


def _dpsgd(**changes: str) -> list[str]:
    args = list(DPSGD)
    for option, value in changes.items():
        args[args.index("--" + option.replace("_", "-")) + 1] = value
    return args


#: (command line, expected exit code): the hostile cases the issue lists, and their neighbours
HOSTILE = [
    (_dpsgd(noise_multiplier="1e-300"), 2),
    (_dpsgd(noise_multiplier="5e-324"), 2),
    (_dpsgd(steps=str(10**30)), 2),
    (_dpsgd(steps="-1"), 2),
    (_dpsgd(sample_rate="nan"), 2),
    (_dpsgd(sample_rate="inf"), 2),
    (_dpsgd(delta="1e400"), 2),
    (_dpsgd(noise_multiplier="-0.0"), 2),
    (["run", "constant-overhead", "--epsilon", "1", "--delta", "1e-6", "--config", "deep.json"], 2),
    (["run", "constant-overhead", "--epsilon", "1", "--delta", "1e-6", "--config", "deep_object.json"], 2),
    (["run", "constant-overhead", "--epsilon", "1", "--delta", "1e-6", "--config", "/dev/zero"], 2),
    (["run", "constant-overhead", "--epsilon", "1", "--delta", "1e-6", "--config", "dup.json"], 2),
    (["run", "constant-overhead", "--epsilon", "1", "--delta", "1e-6", "--config", "nan.json"], 2),
    (["run", "constant-overhead", "--epsilon", "1", "--delta", "1e-6", "--config", "not_json.json"], 2),
    (["run", "constant-overhead", "--epsilon", "1", "--delta", "1e-6", "--config", "passwd_link.json"], 2),
    (["run", "constant-overhead", "--epsilon", "nan", "--delta", "1e-6"], 2),
    (["run", "constant-overhead", "--epsilon", "1e400", "--delta", "1e-6"], 2),
    (["verify", "nan_claim", "--allow-not-for-release"], 1),
    (["verify", "huge_claim", "--allow-not-for-release"], 1),
    (["verify", "inf_claim", "--allow-not-for-release"], 1),
    (["verify", "deep_certificate", "--allow-not-for-release"], 1),
    (["verify", "zero_certificate", "--allow-not-for-release"], 1),
    (["verify", "../../etc/passwd"], 2),
    (["recover", "../x"], 2),
    (["mirror", "sync", "../../x"], 2),
    (["account", "dpsgd", "--steps", "abc"], 2),
    (["--bogus"], 2),
]


@pytest.mark.parametrize("args, expected", HOSTILE, ids=[" ".join(a)[-60:] for a, _ in HOSTILE])
def test_hostile_command_lines_end_in_a_clear_error(cli, args, expected):
    result = cli.run(args)
    _assert_clean(result, args)
    assert result["exit_code"] == expected, result["output"]


def test_a_real_process_prints_one_error_line_and_no_traceback(hostile):
    """The installed entry point, not the test runner: stderr is exactly one ``error:`` line."""
    for args in (_dpsgd(noise_multiplier="1e-300"), _dpsgd(steps=str(10**30)), _dpsgd(steps="abc")):
        done = subprocess.run([sys.executable, "-c", "from dpaudit.cli import main; main()", *args], cwd=hostile,
                              capture_output=True, text=True, timeout=HANG_GUARD_S, preexec_fn=_limit_memory,
                              env=_isolated_env(hostile))
        assert done.returncode == 2
        assert done.stdout == "" and done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr


#: every command but ``demo`` (trains a model), ``ui`` (starts a server) and ``export`` (writes wherever it is told:
#: the fuzz runs as whatever user runs the tests)
COMMANDS = [["account", "dpsgd"], ["verify"], ["report"], ["recover"], ["mirror", "sync"], ["log"],
            ["run", "constant-overhead"], ["plugins", "list"], ["keys"], []]
OPTIONS = ["--sample-rate", "--noise-multiplier", "--steps", "--delta", "--accountant", "--json", "--epsilon",
           "--config", "--seed", "--format", "--store", "--trusted-key", "--log-head", "--allow-not-for-release",
           "--abort", "--name"]
HOSTILE_FILES = ["deep.json", "dup.json", "nan.json", "not_json.json", "passwd_link.json", "/dev/zero", "nan_claim",
                 "deep_certificate", "zero_certificate", "../../../etc", "store"]
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.sampled_from(["1e-300", "5e-324", "1e400", "-0.0", "nan", "inf", "-inf", "0x10", "1_000", "", " "]),
)
values = st.one_of(numbers, st.sampled_from(HOSTILE_FILES),
                   st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40))


@settings(derandomize=True, max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(command=st.sampled_from(COMMANDS), rest=st.lists(st.one_of(st.sampled_from(OPTIONS), values), max_size=8))
def test_fuzzed_command_lines_never_end_in_a_traceback(cli, command, rest):
    args = [*command, *rest]
    if args[:2] == ["run", "constant-overhead"] and "--config" not in args:
        args += ["--config", "nan.json"]  # a run that succeeds would spend the budget of the fuzz on training
    _assert_clean(cli.run(args), args)


def test_the_memory_limit_is_in_force(cli):
    """The guard itself: the child really runs under RLIMIT_AS (a 6 GiB allocation fails there)."""
    assert math.isclose(MEMORY_LIMIT, 6 * 2**30)
    limits = Path(f"/proc/{cli.process.pid}/limits").read_text()
    assert str(MEMORY_LIMIT) in limits
