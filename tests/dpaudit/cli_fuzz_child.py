"""Child process of the CLI fuzz test (test_cli_fuzz.py): runs ``dpaudit`` command lines, one per input line.

Usage: ``python cli_fuzz_child.py``; reads JSON lists of arguments from stdin, runs each through the CLI's ``main``
(click's test runner, exceptions caught) and prints one JSON line per command: the exit code, the end of the output,
and the last line of the traceback of any exception that escaped the CLI (``null`` when none did). One process
serves every example, so the parent's memory limit (RLIMIT_AS) and hang guard apply to all of them.
"""

from __future__ import annotations

import json
import sys
import traceback

from click.testing import CliRunner

from dpaudit.cli import main


def serve() -> None:
    runner = CliRunner()
    for line in sys.stdin:
        result = runner.invoke(main, json.loads(line), catch_exceptions=True)
        escaped = result.exception
        uncaught = None
        if escaped is not None and not isinstance(escaped, SystemExit):
            uncaught = traceback.format_exception_only(type(escaped), escaped)[-1].strip()
        sys.stdout.write(json.dumps({"exit_code": result.exit_code, "output": result.output[-2000:],
                                     "uncaught": uncaught}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
