"""Worker preload (``distributed.worker.preload``) for the clusters gpuscale starts: each
worker process leaves the terminal's process group as it starts, so a signal to the group
(Ctrl-C, ``timeout``) reaches only the gpuscale process, which closes its workers; a worker
still exits when the pipe to its parent closes. It also drops the worker's logs of failures
the client reports, of a scheduler closing under a heartbeat and of a peer closing while the
worker sends it data (:func:`gpuscale.cluster.logs.quiet_task_failures`),
sends its log lines below ERROR to the session's log file (:mod:`gpuscale.cluster.logs`), and
imports the libraries its work needs (:data:`PRE_IMPORT_KEY`) before it joins the cluster.
"""

from __future__ import annotations

import contextlib
import os

from distributed.diagnostics.plugin import SchedulerPlugin

from .. import memory_measured
from ..interrupts import quiet_exit_logs
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
    logs.quiet_task_failures()
    logs.in_worker()
    import dask

    memory_measured.pre_import(dask.config.get(PRE_IMPORT_KEY, None) or ())


def dask_teardown(worker=None) -> None:
    """The worker is closing on purpose: its exit loggers are quieted
    (:func:`gpuscale.interrupts.quiet_exit_logs`), before a heartbeat in flight logs a traceback."""
    quiet_exit_logs()


class QuietOnClose(SchedulerPlugin):
    """A scheduler plugin for the clusters `cluster up` serves: when its scheduler starts to
    close, the process's exit loggers are quieted at once
    (:func:`gpuscale.interrupts.quiet_exit_logs`), before the nannies' closes are cut short."""

    name = "gpuscale-quiet-on-close"
    idempotent = True

    async def before_close(self) -> None:
        quiet_exit_logs()
