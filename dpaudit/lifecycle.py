"""How a run ends: the close status of a session's exit, SIGTERM as an interrupt, and the line the CLI prints.

Only a run whose code ended normally closes ``FINISHED``, and only such a run is for release
(:func:`dpaudit.certificate.release_problems`). A session left by an exception closes with the status
:func:`exit_status` gives it: ``ABORTED`` when it was interrupted (Ctrl-C, or SIGTERM turned into the same
:class:`KeyboardInterrupt` by :func:`sigterm_as_interrupt`), ``REFUSED`` when its input or plan was refused
(:data:`REFUSALS`: a bad configuration, an unknown plugin, a plan the budget cannot pay for), ``FAILED`` otherwise.
Every charge is still counted in the certificate; ``dpaudit verify`` fails such a run with the reason
``run aborted`` (``run refused``, ``run failed``) unless ``--allow-not-for-release`` accepts it
(docs/auditor-guide.md, "How a run ends").
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from dpaudit.errors import BudgetExceeded, InvalidParameter, PluginError
from dpaudit.records import ABORTED, CLOSE_STATUS_WORDS, FAILED, FINISHED, REFUSED

if TYPE_CHECKING:
    from dpaudit.session import Session

REFUSALS = (BudgetExceeded, InvalidParameter, PluginError)
"""Exceptions that mean the run's input or plan was refused: a session they end closes ``REFUSED``."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by :func:`sigterm_as_interrupt`: handled exactly like Ctrl-C.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def exit_status(exc_type: type[BaseException] | None) -> str:
    """The close status of a session left with an exception of type ``exc_type`` (None: left normally).

    An exception that is not an :class:`Exception` (``KeyboardInterrupt``, :class:`Terminated`, ``SystemExit``)
    interrupted the run: ``ABORTED``. A refusal (:data:`REFUSALS`): ``REFUSED``. Anything else: ``FAILED``.
    """
    if exc_type is None:
        return FINISHED
    if not issubclass(exc_type, Exception):
        return ABORTED
    return REFUSED if issubclass(exc_type, REFUSALS) else FAILED


def interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's exit status for a command ended by ``exc``: 128 + the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) in the main thread.

    Installed by the CLI's entry points that run a session (``dpaudit run``, ``dpaudit demo``) only, never by the
    library: a program embedding a :class:`~dpaudit.session.Session` keeps its own signal handling. The previous
    handler is restored on the way out. Outside the main thread (where Python cannot install a handler) it does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def ended_line(run_id: str, status: str, certified: bool) -> str:
    """The line a command prints about a run that did not finish: its id, how it ended and what to run next.

    Args:
        run_id: the run.
        status: its close status (``""``: no close record was written).
        certified: every close step succeeded (certificate, log entry, reports).
    """
    if not status:
        return (f"run {run_id} was not closed: close it with `dpaudit recover {run_id} --abort` (every charge is "
                "counted, nothing is for release)")
    word = CLOSE_STATUS_WORDS.get(status, "failed")
    if not certified:
        return (f"run {word}: {run_id} (closed {status}), but its close did not finish: run "
                f"`dpaudit recover {run_id}`")
    return (f"run {word}: {run_id}; verify with dpaudit verify {run_id} (closed {status}: every charge counted, "
            "NOT FOR RELEASE)")


@contextlib.contextmanager
def announced(session: Session, echo: Callable[[str], None]) -> Iterator[None]:
    """Around a session's ``with`` block: when an exception leaves it, ``echo`` the run's :func:`ended_line`.

    Use it outside the session's own context (``with announced(s, echo), s:``), so that the session has closed
    (with the status of :func:`exit_status`) before the line is printed. The exception is re-raised.
    """
    try:
        yield
    except BaseException:
        echo(ended_line(session.run_id, session.close_status, session.certified))
        raise
