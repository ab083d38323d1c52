"""How a command ends: the exit codes (:data:`EXIT_CODES`), the exceptions that carry them, and
the phase a run was in.

Every check of user input raises :class:`UserError` with a message that names the problem *and*
the fix. The CLI prints ``gpuscale: error: <message>`` on one line and exits 2; the Python API
lets it propagate (a ``ValueError``), and a script that leaves it uncaught ends with the same
line (:func:`one_line_errors`). How a signal ends a process: :mod:`gpuscale.interrupts`.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_FAILED = 3
EXIT_CLUSTER_GONE = 4
EXIT_RECORD_NOT_WRITTEN = 5
EXIT_SIGHUP = 129
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

EXIT_CODES = {
    EXIT_OK: "ok",
    EXIT_INTERNAL: "unexpected internal error (--debug shows the traceback)",
    EXIT_BAD_INPUT: "bad input",
    EXIT_CHECK_FAILED: "a check failed (validation, a bench case, results compare --fail-if-slower)",
    EXIT_CLUSTER_GONE: "the cluster went away",
    EXIT_RECORD_NOT_WRITTEN: "the record (printed to stdout instead), --output (the record "
    "is written) or stdout (the record is written) could not be written",
    EXIT_SIGHUP: "interrupted (SIGHUP: the terminal closed, the ssh session dropped)",
    EXIT_SIGINT: "interrupted (SIGINT, Ctrl-C)",
    EXIT_SIGTERM: "interrupted (SIGTERM)",
}


class UserError(ValueError):
    """Bad input or a missing optional stack: a one-line message naming the fix."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = _capped(problem)
        self.fix = _capped(fix) if fix is not None else None
        super().__init__(f"{self.problem}; {self.fix}" if fix else self.problem)


LINE_CHARS = 1000
"""A one-line error's problem and its fix are each cut to this many characters."""


def _capped(text: str) -> str:
    text = str(text)
    return text if len(text) <= LINE_CHARS else f"{text[:LINE_CHARS]}... ({len(text):,} characters)"


LISTED = 20
"""Names a one-line error lists before it says how many more there are."""


def listed(names, limit: int = LISTED) -> str:
    """``names`` for a one-line error: the first ``limit``, comma-separated, then how many more."""
    names = [str(n) for n in names]
    head = ", ".join(names[:limit])
    return head if len(names) <= limit else f"{head} ... and {len(names) - limit:,} more"


SHOWN_CHARS = 24
"""An echoed value (an invalid setting, a spec's entry) is cut to this many characters."""


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a one-line message, cut to about ``limit`` characters (never rendered whole)."""
    import reprlib

    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = limit
    text = r.repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    if isinstance(value, (str, bytes)) and len(value) > limit:
        text += f" ({len(value):,} characters)"
    return text


def missing_module(module: str, purpose: str, install: str) -> UserError:
    """The error for an optional library that is not importable."""
    return UserError(
        f"{purpose} needs the Python module '{module}', which is not installed", f"install it with: {install}"
    )


def one_line_errors():
    """Installs, for a session's lifetime, the ``sys.excepthook`` by which an uncaught error of
    :data:`ONE_LINE` prints ``gpuscale: error: <message>`` on one line instead of a traceback.
    Returns ``done(exc)``, called as the session ends: the previous hook comes back, unless
    ``exc`` is one of those errors, which may be about to end the script."""
    previous = sys.excepthook
    if getattr(previous, "_gpuscale", False):  # an outer session's
        return lambda exc: None

    def hook(kind, value, tb):
        if isinstance(value, RecordNotWritten):  # the measured result is not lost
            sys.stdout.write(value.record_json + "\n")
            sys.stdout.flush()
        if isinstance(value, ONE_LINE):
            sys.stderr.write(f"gpuscale: error: {value}\n")
            sys.stderr.flush()
        else:
            previous(kind, value, tb)

    hook._gpuscale = True
    sys.excepthook = hook

    def done(exc: BaseException | None) -> None:
        if not isinstance(exc, ONE_LINE) and sys.excepthook is hook:
            sys.excepthook = previous

    return done


class ClusterGone(RuntimeError):
    """The running cluster a run used (``--scheduler``) stopped answering under it."""

    exit_code = EXIT_CLUSTER_GONE

    def __init__(self, address: str, phase: str | None = None):
        self.address = address
        self.phase = phase
        during = f" during {phase}" if phase else ""
        super().__init__(
            f"the cluster at {address} went away{during} (its scheduler stopped answering); "
            "nothing was written; start it again (gpuscale cluster up) and rerun"
        )


class RecordNotWritten(RuntimeError):
    """The run finished but its record could not be written; ``record_json`` holds it."""

    exit_code = EXIT_RECORD_NOT_WRITTEN

    def __init__(self, where: str, why: str, record_json: str):
        self.record_json = record_json
        super().__init__(
            f"could not write the record under {where} ({why}); the record was printed to "
            "stdout instead: save it, free some space and keep it with your results"
        )


class StdoutNotWritten(RuntimeError):
    """What a command shows could not be written to stdout (a closed pipe, a full disk)."""

    exit_code = EXIT_RECORD_NOT_WRITTEN

    def __init__(self, e: OSError):
        super().__init__(
            f"could not write to stdout ({e.strerror or type(e).__name__}); a run's record is kept "
            "in its results folder (`gpuscale results list` where stdout can be written)"
        )


class OutputNotWritten(RuntimeError):
    """The run finished and its record was written, but its ``--output`` could not be (a full
    disk); ``result`` holds the record, whose ``info.output`` says why."""

    exit_code = EXIT_RECORD_NOT_WRITTEN

    def __init__(self, why: str, result, what: str = "--output"):
        self.result = result
        super().__init__(
            f"{why}; the measured result is kept in the record {result.path}: free some space "
            f"and run again to write {what}"
        )


ONE_LINE = (UserError, ClusterGone, RecordNotWritten, OutputNotWritten)
"""The errors that end a script in one line (:func:`one_line_errors`)."""


PHASE_ATTR = "gpuscale_phase"


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Name the phase of a run that an exception left (the innermost wins; :func:`phase_of`)."""
    OPEN_PHASES.append(name)
    try:
        yield
    except BaseException as e:
        if getattr(e, PHASE_ATTR, None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(e, PHASE_ATTR, name)
        raise
    finally:
        with contextlib.suppress(ValueError):
            OPEN_PHASES.remove(name)


OPEN_PHASES: list[str] = []
"""The phases open now, innermost last (what a hard exit names)."""


def phase_of(exc: BaseException, default: str = "start-up") -> str:
    return getattr(exc, PHASE_ATTR, None) or default
