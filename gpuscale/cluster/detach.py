"""Worker preload (``distributed.worker.preload``) for the clusters gpuscale starts: each
worker process leaves the terminal's process group as it starts.

Ctrl-C in a terminal, ``timeout`` and ``kill -- -PGID`` signal the whole foreground process
group. Worker processes that took that signal died at once, under a scheduler still running in
the gpuscale process, which then logged pages of "broadcast failed" / "Future exception was
never retrieved" before the one line the command prints. Out of that group, the workers are
closed by the gpuscale process (its cluster's ``close``) like at any other end of a run; if
that process dies, distributed ends them as always (each worker process exits when the pipe
to its parent closes).

It also drops the worker's multi-line "Compute Failed" log of a failed task
(:func:`quiet_task_failures`): the failure goes back to the client, which reports it; and it
sends the worker's log lines below ERROR to the session's log file (:mod:`gpuscale.cluster.logs`).
"""

from __future__ import annotations

import contextlib
import os

from distributed.diagnostics.plugin import SchedulerPlugin

MODULE = __name__


def dask_setup(worker=None) -> None:
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.setpgrp (Windows)
        os.setpgrp()
    quiet_task_failures()
    from . import logs

    logs.in_worker()


class _DropComputeFailed:
    """A logging filter for ``distributed.worker``: a task's failure goes back to the client
    that submitted it (the CLI makes it one line), so the worker's own multi-line "Compute
    Failed" report of it is dropped."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("Compute Failed")


class _DropCancelled:
    """A logging filter for ``distributed.worker.state_machine``: a task its client released
    while it ran (an interrupted run, a run whose client went away) ends with CancelledError,
    which the worker reports as a warning into the terminal of the command that was stopped."""

    def filter(self, record) -> bool:
        return not (
            str(record.msg).startswith("Async instruction for") and "CancelledError" in record.getMessage()
        )


def quiet_task_failures() -> None:
    import logging

    for name, kind in (
        ("distributed.worker", _DropComputeFailed),
        ("distributed.worker.state_machine", _DropCancelled),
    ):
        log = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in log.filters):
            log.addFilter(kind())


def dask_teardown(worker=None) -> None:
    """The worker is closing (``Worker.close`` runs its preloads' teardown first, before it
    stops its periodic callbacks): a heartbeat already in flight then fails against the
    closed connection pool and tornado logs it with a traceback ("ConnectionPool is closed"),
    into the terminal of `cluster up` after `cluster down`. The process is ending on purpose:
    its exit loggers are quieted (:func:`gpuscale.errors.quiet_exit_logs`)."""
    from ..errors import quiet_exit_logs

    quiet_exit_logs()


class QuietOnClose(SchedulerPlugin):
    """A scheduler plugin for the clusters `cluster up` serves: when its scheduler starts to
    close (`cluster down`, Ctrl-C), the process it lives in is ending on purpose, so its exit
    loggers are quieted (:func:`gpuscale.errors.quiet_exit_logs`) at once, before the Nannies'
    closes are cut short (a CI run once saw their tracebacks in `cluster up`'s terminal after
    its own last line; the poll that notices the stop comes up to 0.2 s later)."""

    name = "gpuscale-quiet-on-close"
    idempotent = True

    async def before_close(self) -> None:
        from ..errors import quiet_exit_logs

        quiet_exit_logs()
