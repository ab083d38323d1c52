"""The one exception type that ends a command with a one-line message and exit code 2.

Every check of user input raises :class:`UserError` with a message that names the problem
*and* the fix. The CLI prints ``gpuscale: error: <message>`` on one line and exits 2; the
Python API lets it propagate (it is a ``ValueError``, so notebooks show it plainly). A script
that does not catch it ends the same way, with one line and no traceback
(:func:`install_excepthook`, which ``import gpuscale`` calls); Python's exit status for an
uncaught exception is 1.
"""
from __future__ import annotations

import sys


class UserError(ValueError):
    """Bad input or a missing optional stack: a one-line message naming the fix."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


def missing_module(module: str, purpose: str, install: str) -> UserError:
    """The error for an optional library that is not importable."""
    return UserError(f"{purpose} needs the Python module '{module}', which is not installed",
                     f"install it with: {install}")


def install_excepthook() -> None:
    """An uncaught :class:`UserError` in a script prints ``gpuscale: error: <message>`` on one
    line instead of a traceback; every other exception goes to the hook there was before.
    Installed once; notebooks (IPython) do not use ``sys.excepthook`` and are unaffected."""
    previous = sys.excepthook
    if getattr(previous, "_gpuscale", False):
        return

    def hook(kind, value, tb):
        if isinstance(value, UserError):
            sys.stderr.write(f"gpuscale: error: {value}\n")
            sys.stderr.flush()
        else:
            previous(kind, value, tb)

    hook._gpuscale = True
    sys.excepthook = hook
