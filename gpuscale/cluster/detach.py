"""Worker preload (``distributed.worker.preload``) for the clusters gpuscale starts: each
worker process leaves the terminal's process group as it starts, so a signal to the group
(Ctrl-C, ``timeout``) reaches only the gpuscale process, which closes its workers. It also
quiets the worker's logs (:mod:`gpuscale.cluster.logs`) and imports the libraries its work
needs (:data:`PRE_IMPORT_KEY`) before it joins the cluster.
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
``pre_import`` for the work's collection), as dask-cuda's ``pre_import`` does. Not in a thread
beside the worker: a task unpickled meanwhile could meet a package half-initialized."""


def leave_terminal_group() -> None:
    """This process leaves the terminal's process group (a signal to the group no longer reaches it)."""
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
    """The worker is closing on purpose: its exit loggers are quieted."""
    quiet_exit_logs()


class QuietOnClose(SchedulerPlugin):
    """A scheduler plugin that quiets the exit loggers as a served cluster's scheduler closes."""

    name = "gpuscale-quiet-on-close"
    idempotent = True

    async def before_close(self) -> None:
        quiet_exit_logs()
