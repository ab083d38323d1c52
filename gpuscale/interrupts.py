"""How a gpuscale process ends when it is interrupted: SIGTERM, SIGHUP and Ctrl-C raise in the
main thread (:func:`sigterm_raises`), each with its exit code and one line; a block that does
not end is escalated to a hard end; and the logs of work cut off are quieted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from typing import Iterator

from .errors import EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM, OPEN_PHASES

TEMP_PATHS: set[str] = set()
"""Temporary files and folders being filled now (a trace's folder), removed by a hard exit."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as a KeyboardInterrupt (cleaned up as Ctrl-C is)."""


class HungUp(Terminated):
    """SIGHUP (the terminal closed, the ssh session dropped), handled like SIGTERM."""


def signal_name(exc: BaseException) -> str:
    return "SIGHUP" if isinstance(exc, HungUp) else "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


def interrupt_exit_code(exc: BaseException) -> int:
    return {"SIGHUP": EXIT_SIGHUP, "SIGTERM": EXIT_SIGTERM, "SIGINT": EXIT_SIGINT}[signal_name(exc)]


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """For the block, in the main thread: SIGTERM raises :class:`Terminated`, SIGHUP
    :class:`HungUp` (unless ignored), Ctrl-C KeyboardInterrupt; the first signal to arrive
    decides (:class:`_Arrivals`), and a block that does not end escalates
    (:func:`_escalate_later`). In another thread: a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ways: dict[int, tuple[type[BaseException], int]] = {signal.SIGTERM: (Terminated, EXIT_SIGTERM)}
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # not under nohup
        ways[signal.SIGHUP] = (HungUp, EXIT_SIGHUP)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        ways[signal.SIGINT] = (KeyboardInterrupt, EXIT_SIGINT)
    arrivals = _Arrivals(ways)
    first: list[int] = []  # the signal that decides
    again: list[int] = []  # that signal, sent again after Python dropped its exception

    def handler(signum, frame):
        if again and signum == first[0]:
            again.clear()
        elif first:
            return  # the first decides; its escalation still ends a block that hangs
        else:
            first.append(arrivals.first(signum))
            quiet_exit_logs()
            _escalate_later(first[0], ways[first[0]][1])
        _raise_or_defer(ways[first[0]][0]())

    def _on_unraisable(unraisable):
        """A signal whose exception Python printed and dropped (raised in a ``__del__`` or a
        callback): send it again 50 ms later."""
        if first and isinstance(unraisable.exc_value, (Terminated, KeyboardInterrupt)):
            again[:] = first
            threading.Timer(0.05, os.kill, (os.getpid(), first[0])).start()
            return
        hook_before(unraisable)

    global _stand_down
    outer, _stand_down = _stand_down, threading.Event()
    hook_before, sys.unraisablehook = sys.unraisablehook, _on_unraisable
    previous = {sig: signal.signal(sig, handler) for sig in ways}
    try:
        yield
    finally:
        _stand_down.set()
        _stand_down = outer
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        sys.unraisablehook = hook_before
        arrivals.close()


class _Arrivals:
    """The order signals arrived in. Python runs the handlers of signals pending together in
    the order of their numbers (SIGHUP before SIGTERM), so the handler that runs first reads
    the numbers the C-level handler wrote to a wakeup pipe as each arrived. Where the process
    has a wakeup fd already (an asyncio loop in the main thread), the order is the handlers'."""

    def __init__(self, ways):
        self.ways = ways
        self.pipe: tuple[int, int] | None = os.pipe()
        for fd in self.pipe:
            os.set_blocking(fd, False)
        self.before = signal.set_wakeup_fd(self.pipe[1], warn_on_full_buffer=False)
        if self.before != -1:  # someone else's: theirs stays
            signal.set_wakeup_fd(self.before)
            self.close()

    def first(self, signum: int) -> int:
        """The first of this block's signals to arrive (``signum``, the handler's, if unknown)."""
        with contextlib.suppress(OSError):
            for n in os.read(self.pipe[0], 256) if self.pipe else b"":
                if n in self.ways:
                    return n
        return signum

    def close(self) -> None:
        if self.pipe is None:
            return
        if self.before == -1:
            signal.set_wakeup_fd(-1)
        for fd in self.pipe:
            os.close(fd)
        self.pipe = None


ESCALATE_AFTER_S = 15.0
"""An interrupted process still running this long after the signal gets it again; one more
period later it ends hard (see docs/decisions.md, rule ``interrupt.escalate``)."""
_stand_down: threading.Event | None = None
"""Set as the current :func:`sigterm_raises` block ends: its escalation (if any) stands down."""


def _escalate_later(sig: int, code: int) -> None:
    """Once per :func:`sigterm_raises` block: a daemon thread that repeats the signal after
    :data:`ESCALATE_AFTER_S` if the block has not ended, and after twice that ends the process
    hard with ``code``, its temporary files and worker processes removed."""
    if _stand_down is None or getattr(_stand_down, "escalating", False):
        return
    done = _stand_down
    done.escalating = True

    def run():
        if done.wait(ESCALATE_AFTER_S):
            return
        os.kill(os.getpid(), sig)
        if done.wait(ESCALATE_AFTER_S):
            return
        name = signal.Signals(sig).name
        where = f" during {OPEN_PHASES[-1]}" if OPEN_PHASES else ""
        for path in list(TEMP_PATHS):
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(path)
        end_child_processes()
        release_semaphores()
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"gpuscale: error: interrupted ({name}){where}; it did not stop within "
                f"{2 * ESCALATE_AFTER_S:g} s, so it was ended with its worker processes; "
                "nothing was written\n"
            )
            sys.stderr.flush()
        os._exit(code)

    threading.Thread(target=run, name="gpuscale-escalate", daemon=True).start()


def end_child_processes(only_starting: bool = False) -> None:
    """Kill (SIGKILL) this process's child processes, except multiprocessing's resource tracker.
    ``only_starting``: only worker processes multiprocessing spawned (``spawn_main``; see
    docs/decisions.md, rule ``interrupt.children``). Never raises."""
    with contextlib.suppress(Exception):  # ending regardless
        import psutil

        tracker = _tracker_pid()
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(Exception):
                if child.pid == tracker:
                    continue
                if not only_starting or "spawn_main" in " ".join(child.cmdline()):
                    child.kill()


def _tracker_pid() -> int | None:
    """The pid of multiprocessing's resource tracker this process started (None: none)."""
    mp_tracker = sys.modules.get("multiprocessing.resource_tracker")
    return getattr(getattr(mp_tracker, "_resource_tracker", None), "_pid", None)


def release_semaphores() -> None:
    """Before a hard exit: run the finalizers of the named semaphores this process made."""
    util = sys.modules.get("multiprocessing.util")
    synchronize = sys.modules.get("multiprocessing.synchronize")
    if util is None or synchronize is None:
        return
    cleanup = synchronize.SemLock._cleanup
    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):
        with contextlib.suppress(Exception):
            if getattr(finalizer, "_callback", None) is cleanup:
                finalizer()


_deferring = 0
_pending: list[BaseException] = []


def _raise_or_defer(exc: BaseException) -> None:
    if _deferring:
        _pending.append(exc)
        return
    raise exc


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold back the interruption :func:`sigterm_raises` would raise in the block and raise it
    as the block ends: for statements that must not be cut in two."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending:
            exc = _pending[0]
            _pending.clear()
            raise exc


NOISY_ON_EXIT = ("asyncio", "distributed", "tornado", "bokeh")


def quiet_exit_logs() -> None:
    """Quiet the loggers of :data:`NOISY_ON_EXIT` (and their children) for a process ending on purpose."""
    import logging

    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in NOISY_ON_EXIT]
    for name in {*NOISY_ON_EXIT, *names}:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


class _DropCancelledTraceback:
    """A logging filter that drops records of a CancelledError (a cluster closed on purpose)."""

    def filter(self, record) -> bool:
        import asyncio

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, asyncio.CancelledError)


CLOSING_LOGGERS = (
    "distributed.nanny",
    "distributed.core",
    "distributed.utils",
    "distributed.worker",
    "distributed.scheduler",
    "distributed.deploy.spec",
    "distributed.client",
)
"""The modules whose coroutines ``log_errors`` wraps on a cluster's way down."""

RESOURCE_TRACKER_WARNINGS = "ignore:resource_tracker:UserWarning"
"""A ``-W`` option that silences the resource tracker's exit-time warning about leaked
semaphores, in place before the first worker starts (the tracker takes ``-W`` then)."""


def quiet_shutdown_noise(tracker: bool = True) -> None:
    """For the CLI process, before anything starts: filter the cancelled-close tracebacks of
    :data:`CLOSING_LOGGERS` and, with ``tracker``, the resource tracker's leak warnings."""
    import logging

    for name in CLOSING_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropCancelledTraceback) for f in log.filters):
            log.addFilter(_DropCancelledTraceback())
    if tracker and RESOURCE_TRACKER_WARNINGS not in sys.warnoptions:
        sys.warnoptions.append(RESOURCE_TRACKER_WARNINGS)
