"""Worker preload (``distributed.worker.preload``) for the clusters gpuscale starts: each
worker process leaves the terminal's process group as it starts, so a signal to the group
(Ctrl-C, ``timeout``) reaches only the gpuscale process, which closes its workers; a worker
still exits when the pipe to its parent closes. It also drops the worker's logs of failures
the client reports, of a scheduler closing under a heartbeat and of a peer closing while the
worker sends it data (:func:`quiet_task_failures`),
sends its log lines below ERROR to the session's log file (:mod:`gpuscale.cluster.logs`), and
imports the libraries its work needs (:data:`PRE_IMPORT_KEY`) before it joins the cluster.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator

from distributed.diagnostics.plugin import SchedulerPlugin

from .. import memory
from ..errors import quiet_exit_logs
from . import logs

PRE_IMPORT_KEY = "gpuscale-pre-import"
"""The dask config key that carries the modules each worker imports as it starts (the family's
``pre_import`` for the work's collection), before it joins the cluster, as dask-cuda's
``pre_import`` does: the workers import in parallel while the cluster starts, and the first task
does not wait for them. Not in a thread beside the worker: a task unpickled meanwhile that
imports a submodule of the same package can meet it half-initialized."""


def leave_terminal_group() -> None:
    """This process leaves the terminal's process group: a signal to the group (Ctrl-C,
    ``timeout``) no longer reaches it."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.setpgrp (Windows)
        os.setpgrp()


def dask_setup(worker=None) -> None:
    import warnings

    from . import SLOW_SCRATCH

    warnings.filterwarnings("ignore", SLOW_SCRATCH)  # a worker process of gpuscale's own
    leave_terminal_group()
    quiet_task_failures()
    logs.in_worker()
    import dask

    memory.pre_import(dask.config.get(PRE_IMPORT_KEY, None) or ())


class _DropComputeFailed:
    """A logging filter for ``distributed.worker``: drops "Compute Failed" (the client
    reports the failure)."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("Compute Failed")


class _DropCancelled:
    """A logging filter for ``distributed.worker.state_machine``: drops the CancelledError of
    a task its client released while it ran."""

    def filter(self, record) -> bool:
        return not (
            str(record.msg).startswith("Async instruction for") and "CancelledError" in record.getMessage()
        )


class _DropHeartbeatToAClosedScheduler:
    """A logging filter for ``distributed.worker``: drops the traceback of a heartbeat whose
    connection the scheduler closed. The scheduler is closing (its close reaches the worker
    next) or gone (the process that started it says so); a scheduler that stops answering
    still shows, as a failure to connect."""

    def filter(self, record) -> bool:
        from distributed.comm import CommClosedError

        exc = record.exc_info[1] if record.exc_info else None
        return not (
            str(record.msg).startswith("Failed to communicate with scheduler during heartbeat")
            and isinstance(exc, CommClosedError)
        )


class _DropSendToAClosedPeer:
    """A logging filter for ``distributed.worker``: drops the traceback of a worker whose peer
    (the client fetching a result, or another worker) closed the connection while the worker
    sent it data. The peer reports its own failure; a client interrupted mid-fetch closes its
    connections on purpose. Other errors of the send still show."""

    def filter(self, record) -> bool:
        from distributed.comm import CommClosedError

        exc = record.exc_info[1] if record.exc_info else None
        return not (
            str(record.msg).startswith("failed during get data with") and isinstance(exc, CommClosedError)
        )


def quiet_task_failures() -> Callable[[], None]:
    """The filters above on their loggers; returns the function that removes those it added
    (a cluster whose worker runs in this process: :func:`quiet_in_this_process`)."""
    import logging

    added = []
    for name, kind in (
        ("distributed.worker", _DropComputeFailed),
        ("distributed.worker", _DropHeartbeatToAClosedScheduler),
        ("distributed.worker", _DropSendToAClosedPeer),
        ("distributed.worker.state_machine", _DropCancelled),
    ):
        log = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in log.filters):
            f = kind()
            log.addFilter(f)
            added.append((log, f))

    def remove() -> None:
        for log, f in added:
            log.removeFilter(f)

    return remove


@contextlib.contextmanager
def quiet_in_this_process() -> Iterator[None]:
    """For a cluster whose worker runs in this process (no preload there): its task failures
    quieted and its warnings sent to the log file as a worker process's are
    (:func:`gpuscale.cluster.logs.threads_warnings_to_file`), for the block only."""
    remove = quiet_task_failures()
    try:
        with logs.threads_warnings_to_file():
            yield
    finally:
        remove()


def dask_teardown(worker=None) -> None:
    """The worker is closing on purpose: its exit loggers are quieted
    (:func:`gpuscale.errors.quiet_exit_logs`), before a heartbeat in flight logs a traceback."""
    quiet_exit_logs()


class QuietOnClose(SchedulerPlugin):
    """A scheduler plugin for the clusters `cluster up` serves: when its scheduler starts to
    close, the process's exit loggers are quieted at once
    (:func:`gpuscale.errors.quiet_exit_logs`), before the nannies' closes are cut short."""

    name = "gpuscale-quiet-on-close"
    idempotent = True

    async def before_close(self) -> None:
        quiet_exit_logs()
