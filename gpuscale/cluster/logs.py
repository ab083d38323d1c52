"""Dask's own log lines below ERROR go to a log file instead of stderr, in this process and
in the worker processes of the clusters a session starts (:func:`in_worker`).
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import sys
from typing import Callable, Iterator

LOGGERS = ("distributed", "dask", "bokeh", "tornado", "asyncio")
CONFIG_KEY = "gpuscale-dask-log"
"""The dask config key that carries the log file's path to the worker processes."""
FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"


class _ErrorsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


class _LazyFile(logging.FileHandler):
    """A file handler that makes the file's folder and opens the file at the first line, as
    this user's own (:mod:`gpuscale.atomic`); where it cannot, one line on stderr says why."""

    def __init__(self, path: pathlib.Path):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.setLevel(logging.WARNING)
        self.setFormatter(logging.Formatter(FORMAT))
        self.refused: str | None = None

    def _open(self):
        import os

        from .. import atomic

        path = pathlib.Path(self.baseFilename)
        atomic.own_folder(path.parent, "log folder")
        fd = atomic.own_file(path, "log file", append=True)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", encoding="utf-8")

    def emit(self, record: logging.LogRecord) -> None:
        if self.refused is not None:
            return
        try:
            if self.stream is None:
                self.stream = self._open()
        except (OSError, ValueError) as e:  # a link or another user's file or folder: no lines kept
            self.refused = " ".join(str(e).split())
            sys.stderr.write(f"gpuscale: Dask's log lines are not kept: {self.refused}\n")
            return
        logging.StreamHandler.emit(self, record)


def _stderr_handlers(log: logging.Logger) -> list[logging.Handler]:
    return [
        h
        for h in log.handlers
        if isinstance(h, logging.StreamHandler)
        and not isinstance(h, logging.FileHandler)
        and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__)
    ]


def to_file(path: str | pathlib.Path, loggers: tuple[str, ...] = LOGGERS) -> Callable[[], None]:
    """Send the log lines below ERROR of ``loggers`` to ``path`` instead of stderr; returns the undo."""
    handler = _LazyFile(pathlib.Path(path))
    undo: list[Callable[[], None]] = []
    for name in loggers:
        log = logging.getLogger(name)
        for h in _stderr_handlers(log):
            f = _ErrorsOnly()
            h.addFilter(f)
            undo.append(lambda h=h, f=f: h.removeFilter(f))
        log.addHandler(handler)
        undo.append(lambda log=log: log.removeHandler(handler))

    def restore() -> None:
        for step in reversed(undo):
            step()
        handler.close()

    return restore


@contextlib.contextmanager
def kept_off_stderr(path: str | pathlib.Path | None) -> Iterator[None]:
    """:func:`to_file` for the block, with :data:`CONFIG_KEY` set for the clusters started in it."""
    if path is None:
        yield
        return
    import dask

    restore = to_file(path)
    try:
        with dask.config.set({CONFIG_KEY: str(path)}):
            yield
    finally:
        restore()


@contextlib.contextmanager
def threads_warnings_to_file() -> Iterator[None]:
    """For a cluster whose worker runs in this process (:data:`CONFIG_KEY` set): the warnings
    raised off the main thread go to the log file, as a worker process's do, for the block."""
    import threading
    import warnings

    import dask

    path = dask.config.get(CONFIG_KEY, None)
    if path is None:
        yield
        return
    log = logging.getLogger("py.warnings")
    restore = to_file(path, ("py.warnings",))
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if threading.current_thread() is threading.main_thread():
                return shown(message, category, filename, lineno, file, line)
            log.warning("%s", warnings.formatwarning(message, category, filename, lineno, line).rstrip())

        warnings.showwarning = show
        try:
            yield
        finally:
            restore()


def path_under(results_dir: str | pathlib.Path) -> pathlib.Path:
    """The log file of a session opened now: ``RESULTS_DIR/logs/<UTC time>-<pid>.log``; refused
    where its folder is another user's (:func:`gpuscale.atomic.own_folder`)."""
    import datetime
    import os

    from .. import atomic

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    atomic.own_folder(results_dir, "results dir", create=False, flag="--results-dir")
    folder = atomic.own_folder(pathlib.Path(results_dir) / "logs", "log folder", create=False)
    return folder / f"{stamp}-{os.getpid()}.log"


def written(path: pathlib.Path | None) -> str | None:
    """``path`` as a string once it holds a line, else None."""
    return str(path) if path is not None and path.exists() else None


def in_worker() -> None:
    """In a worker process: :func:`to_file` to the file :data:`CONFIG_KEY` names, warnings included."""
    import dask

    path = dask.config.get(CONFIG_KEY, None)
    if path:
        logging.captureWarnings(True)
        to_file(path, (*LOGGERS, "py.warnings"))


def _comm_closed(record) -> bool:
    from distributed.comm import CommClosedError

    return isinstance(record.exc_info[1] if record.exc_info else None, CommClosedError)


DROPPED = (
    # the client reports the failure
    ("distributed.worker", "Compute Failed", None),
    # a heartbeat whose connection the scheduler closed: it is closing (its close reaches the
    # worker next) or gone; a scheduler that stops answering still shows, as a failure to connect
    ("distributed.worker", "Failed to communicate with scheduler during heartbeat", _comm_closed),
    # a peer (the client fetching a result, or another worker) closed the connection while the
    # worker sent it data: the peer reports its own failure; other errors of the send still show
    ("distributed.worker", "failed during get data with", _comm_closed),
    # the CancelledError of a task its client released while it ran
    (
        "distributed.worker.state_machine",
        "Async instruction for",
        lambda r: "CancelledError" in r.getMessage(),
    ),
)
"""The worker's log lines :func:`quiet_task_failures` drops: (logger, start of the message, a
further test of the record or None)."""


class _Drop:
    """A logging filter that drops the records whose message starts with ``start`` (and pass ``also``)."""

    def __init__(self, start: str, also=None):
        self.start, self.also = start, also

    def filter(self, record) -> bool:
        return not (str(record.msg).startswith(self.start) and (self.also is None or self.also(record)))


def quiet_task_failures() -> Callable[[], None]:
    """The filters of :data:`DROPPED` on their loggers; returns the function that removes those it added."""
    added = []
    for name, start, also in DROPPED:
        log = logging.getLogger(name)
        if not any(isinstance(f, _Drop) and f.start == start for f in log.filters):
            f = _Drop(start, also)
            log.addFilter(f)
            added.append((log, f))

    def remove() -> None:
        for log, f in added:
            log.removeFilter(f)

    return remove


@contextlib.contextmanager
def quiet_in_this_process() -> Iterator[None]:
    """For a cluster whose worker runs in this process: its task failures and warnings quieted."""
    remove = quiet_task_failures()
    try:
        with threads_warnings_to_file():
            yield
    finally:
        remove()
