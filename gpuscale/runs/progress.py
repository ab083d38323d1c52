"""What a run is doing now, on stderr: the phase, the runs done of those planned, the elapsed
time and what is left before validation (docs/reference/cli.md shows the lines).

One :class:`Tracker` is active per CLI run (:func:`shown`); the runner tells it the plan
(:func:`planned`) and its repeats; the phase is :func:`gpuscale.errors.phase`'s. On a terminal
one line is redrawn in place; elsewhere one comes every :data:`EVERY_ENV` seconds.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from typing import Any, Callable, Iterator

from dask.utils import format_bytes

from .. import errors
from .observe import GENERATE, Observer, Outcome, Run, Step

EVERY_ENV = "GPUSCALE_PROGRESS_EVERY"
DEFAULT_EVERY_S = 60.0
"""Seconds between progress lines where stderr is not a terminal."""
LARGE_ENV = "GPUSCALE_PROGRESS_LARGE"
DEFAULT_LARGE_BYTES = 8 * 2**30
"""Planned data (bytes, per pass) from which a run says its size and estimate before the work."""
TASKS_EVERY_S = 2.0
"""Seconds between two asks of the scheduler for a pass's tasks."""
NO_TASKS_AGAIN_S = 0.2
"""Seconds before the scheduler is asked again when a pass had no tasks yet (a run asked as it
starts, before its graph is submitted, shows its share from its next line on)."""
UNFINISHED = ("waiting", "queued", "processing", "no-worker")
"""Task states of a task not finished yet."""
OUTER = "the run"
"""The CLI's outer phase: shown as "starting" before the runs, "finishing" after them."""

_current: "Tracker | None" = None


BOUNDS = {EVERY_ENV: (0.1, 86_400.0), LARGE_ENV: (0.0, 2.0**60)}
"""What each environment variable may be: a value outside is brought to the nearest bound, one
that is no number (NaN, text) is the default."""


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    if value != value:  # NaN
        return default
    lo, hi = BOUNDS.get(name, (float("-inf"), float("inf")))
    return min(max(value, lo), hi)


def duration(s: float) -> str:
    """``42 s``, ``3m05s``, ``2h07m``."""
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    return f"{m}m{sec:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


class Tracker:
    """See the module's docstring. ``write``: where lines go (one line each)."""

    def __init__(self, write: Callable[[str], None], large_bytes: float):
        self.write, self.large_bytes = write, large_bytes
        self.t0 = time.monotonic()
        self.label: str | None = None
        self.done, self.total = 0, None
        self.pass_s: list[float] = []
        self.pass_t0: float | None = None
        self.client = None
        self.large = False
        self._tasks: tuple[float, str | None] = (0.0, None)
        self._cursor: int | None = None

    @contextlib.contextmanager
    def __call__(self, label: str, total: int) -> Iterator[Callable[[], None]]:
        self.label, self.total = label, total
        self._start_pass()
        yield self._advance

    def _start_pass(self) -> None:
        """A run starts: its time, and the task-stream cursor :meth:`in_pass` counts from."""
        self.pass_t0 = time.monotonic()
        self._cursor, self._tasks = None, (0.0, None)
        if self.client is not None and (self.total is None or self.done < self.total):
            with contextlib.suppress(Exception):  # no cursor: no share shown
                self._cursor = self.client.run_on_scheduler(_tasks_now)[0]

    def _advance(self) -> None:
        self.pass_s.append(time.monotonic() - (self.pass_t0 or self.t0))
        self.done += 1
        self._start_pass()
        if self.large and self.done == 1:
            self.write(
                f"gpuscale: estimate: the first run took {duration(self.pass_s[0])}; the "
                f"{self.total - self.done} left take about {duration(self.left_s() or 0)}, then validation"
            )

    def planned(self, client, name: str, memory: dict[str, Any], runs: int, validate: bool) -> None:
        """Before the data is made: the client to ask, and for large work a line with its size."""
        self.client = client
        self._start_pass()
        data = int(memory.get("estimate_bytes") or 0)
        self.large = data >= self.large_bytes
        if not self.large:
            return
        where = {"spills": ", spilling to disk", "streams": ", made again block by block in each"}.get(
            memory.get("verdict"), ""
        )
        self.write(
            f"gpuscale: estimate: {name} makes about {format_bytes(data)} of data{where}, in each of "
            f"{runs} run(s){' and validation' if validate else ''}; its time is unknown until the "
            f"first run ends; progress every {duration(_env_float(EVERY_ENV, DEFAULT_EVERY_S))} on "
            "stderr where it is not a terminal"
        )

    def phase(self) -> str | None:
        phases = list(errors.OPEN_PHASES)
        if not phases:
            return None
        if phases[-1] != OUTER:
            return phases[-1]
        if self.total is None:
            return "starting"
        return "between runs" if self.done < self.total else "finishing (the record, closing the cluster)"

    def in_pass(self) -> str | None:
        """``1,234 of 5,000 tasks`` of the run going on now (None: none, or not known)."""
        share = self._share()
        return None if share is None else f"{share[0]:,} of {share[1]:,} tasks"

    def _share(self) -> tuple[int, int] | None:
        """(finished, all) tasks of the run going on now, asked at most every :data:`TASKS_EVERY_S`."""
        if (
            self.client is None
            or self._cursor is None
            or (self.total is not None and self.done >= self.total)
        ):
            return None
        at, said = self._tasks
        if time.monotonic() - at < TASKS_EVERY_S:
            return said
        if getattr(self.client, "status", "running") != "running":  # closing: not asked
            return None
        again = TASKS_EVERY_S
        try:
            index, waiting = self.client.run_on_scheduler(_tasks_now)
            finished = index - self._cursor
            said = (finished, finished + waiting) if index is not None and finished + waiting else None
            again = TASKS_EVERY_S if said else NO_TASKS_AGAIN_S
        except Exception:  # noqa: BLE001 - a scheduler that cannot be asked: no share shown
            said = None
        self._tasks = (time.monotonic() - TASKS_EVERY_S + again, said)
        return said

    def left_s(self) -> float | None:
        """Seconds left before validation, from the runs measured or the current run's share of
        finished tasks; None: nothing measured yet."""
        if self.total is None or self.done >= self.total:
            return None if self.total is None else 0.0
        now = time.monotonic() - (self.pass_t0 or self.t0)
        if self.pass_s:
            per = statistics.median(self.pass_s)
        else:
            share = self._share()
            if not share or not share[0]:
                return None
            per = now * share[1] / share[0]
        return max(0.0, per * (self.total - self.done) - now)

    def line(self) -> str | None:
        phase = self.phase()
        if phase is None:
            return None
        parts = [phase]
        if self.total is not None:
            parts.append(f"{self.done}/{self.total} runs")
        tasks = self.in_pass()
        if tasks:
            parts.append(tasks + (" of this run" if self.total is not None else ""))
        parts.append(f"{duration(time.monotonic() - self.t0)} elapsed")
        left = self.left_s()
        if left is None:
            parts.append("left unknown")
        elif self.done < (self.total or 0):
            parts.append(f"about {duration(left)} left before validation")
        return "gpuscale: progress: " + ", ".join(p for p in parts if p)


def _tasks_now(dask_scheduler=None) -> tuple[int | None, int]:
    """On the scheduler: its task stream's cursor and the tasks not finished yet."""
    try:
        index = int(dask_scheduler.get_task_stream_index())
    except Exception:  # noqa: BLE001 - a distributed without the cursor
        index = None
    groups = getattr(dask_scheduler, "task_groups", {}).values()  # counts per group: no walk over tasks
    return index, sum(tg.states.get(s, 0) for tg in groups for s in UNFINISHED)


@contextlib.contextmanager
def _silent(description: str, total: int) -> Iterator[Callable[[], None]]:
    yield lambda: None


class Repeats(Observer):
    """Progress for a run: its plan told to the active tracker, ``progress`` around the repeats."""

    def __init__(self, progress=None):
        self.progress = progress or _silent
        self._open: contextlib.ExitStack | None = None

    def start(self, run: Run) -> None:
        self.label, self.most = run.label, run.most  # not the run: its data goes with it
        planned(run.client, run.workload.name, run.memory, run.most, run.ctx.validate != "off")

    def after_step(self, step: Step, elapsed: float) -> None:
        if step.kind == GENERATE:
            self._open = contextlib.ExitStack()
            self._advance = self._open.enter_context(self.progress(self.label, self.most))
        elif step.repeat:
            self._advance()

    def after_repeats(self, run: Run, outcome: Outcome) -> None:
        self._close()

    def failed(self, run: Run, exc: BaseException) -> None:
        self._close(exc)

    def _close(self, exc: BaseException | None = None) -> None:
        held, self._open = self._open, None
        if held is not None and exc is None:
            held.close()
        elif held is not None:
            held.__exit__(type(exc), exc, exc.__traceback__)


def planned(client, name: str, memory: dict[str, Any], runs: int, validate: bool) -> None:
    """The runner's plan, for the active tracker (none: nothing to do)."""
    if _current is not None:
        _current.planned(client, name, memory, runs, validate)


@contextlib.contextmanager
def shown(stream=None) -> Iterator[Tracker]:
    """A tracker for the block, shown on ``stream`` (stderr); yields it (the runner's ``progress``)."""
    global _current
    stream = stream or sys.stderr
    large = _env_float(LARGE_ENV, DEFAULT_LARGE_BYTES)
    show = _on_terminal(stream, large) if stream.isatty() else _in_lines(stream, large)
    outer = _current
    with show as tracker:
        _current = tracker
        try:
            yield tracker
        finally:
            _current = outer


def _write_to(stream) -> Callable[[str], None]:
    def write(text: str) -> None:
        with contextlib.suppress(Exception):
            stream.write(text + "\n")
            stream.flush()

    return write


@contextlib.contextmanager
def _ticking(every: float, tick: Callable[[threading.Event], None]) -> Iterator[None]:
    """Call ``tick(stop)`` every ``every`` seconds in a daemon thread until the block ends."""
    stop = threading.Event()

    def loop():
        while not stop.wait(every):
            with contextlib.suppress(Exception):
                tick(stop)

    thread = threading.Thread(target=loop, name="gpuscale-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@contextlib.contextmanager
def _in_lines(stream, large: float) -> Iterator[Tracker]:
    tracker = Tracker(_write_to(stream), large)
    every = _env_float(EVERY_ENV, DEFAULT_EVERY_S)

    def tick(stop):
        text = tracker.line()
        if text and not stop.is_set():
            tracker.write(text)

    with _ticking(every, tick):
        yield tracker


@contextlib.contextmanager
def _on_terminal(stream, large: float) -> Iterator[Tracker]:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=stream)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        tracker = Tracker(lambda text: bar.console.print(escape(text), soft_wrap=True), large)
        task = bar.add_task("starting", total=None, count="")
        with _ticking(0.2, lambda stop: _redraw(bar, task, tracker)):
            yield tracker


def _redraw(bar, task, tracker: Tracker) -> None:
    phase = tracker.phase() or "starting"
    what = f"{tracker.label}: {phase}" if tracker.label else phase
    count = f"{tracker.done}/{tracker.total}" if tracker.total is not None else ""
    tasks = tracker.in_pass()
    bar.update(
        task,
        description=what + (f" ({tasks})" if tasks else ""),
        total=tracker.total,
        completed=tracker.done,
        count=count,
    )
