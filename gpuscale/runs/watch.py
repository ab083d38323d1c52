"""What disturbed a timed repeat besides the workers: tasks recomputed, other clients' tasks.

A scheduler plugin (:class:`Watch`) notes for one run, at each transition the task stream
records and with the stream's position: ``recomputed`` (a key of the run that finished again
after reaching memory, not forgotten since), ``retried`` (one that erred and went back to
waiting) and ``foreign`` (another client's task). The run's keys are what its client holds at
the start, their dependencies, and every graph it submits. :func:`by_repeat` gives each note to
the repeat whose task-stream cursors hold it.
"""

from __future__ import annotations

import uuid
from typing import Any

from .observe import COMPUTE, GENERATE, Observer, Outcome, Run, Step

try:
    from distributed.diagnostics.plugin import SchedulerPlugin
except ImportError:  # pragma: no cover - distributed is a dependency
    SchedulerPlugin = object  # type: ignore[assignment,misc]

ERRED_STIMULUS = "task-erred"
"""The stimulus of a worker's 'task erred' message: processing -> released under it is a retry."""


def _stream_index(scheduler) -> int:
    return int(scheduler.get_task_stream_index())


class Watch(SchedulerPlugin):
    """See the module's docstring. Runs on the scheduler's event loop: no locking needed."""

    def __init__(self, scheduler, client_id: str):
        self.client = client_id
        self.index = _stream_index(scheduler)
        self.ours: set = set()
        self.done: set = set()
        self.theirs: dict = {}  # key -> the other client that submitted it (while watched)
        self.running: set = set()  # other clients' keys processing now
        self.notes: list[tuple[int, str, str]] = []  # (stream index, kind, client or key)
        held = scheduler.clients.get(client_id)
        stack = list(held.wants_what) if held is not None else []
        while stack:  # what this client holds already, and what it depends on
            ts = stack.pop()
            if ts.key not in self.ours:
                self.ours.add(ts.key)
                if ts.state == "memory":
                    self.done.add(ts.key)
                stack.extend(ts.dependencies)

    def update_graph(self, scheduler, *, client=None, tasks=(), **kwargs) -> None:
        if client == self.client:
            self.ours.update(tasks)
        else:
            self.theirs.update((k, client) for k in tasks if k not in self.ours)

    def transition(self, key, start, finish, *args, stimulus_id: str | None = None, **kwargs) -> None:
        ours = key in self.ours
        if start == "processing" and finish in ("memory", "erred"):  # what the task stream records
            i = self.index
            self.index += 1
            if ours:
                if key in self.done:
                    self.notes.append((i, "recomputed", str(key)))
                if finish == "memory":
                    self.done.add(key)
            else:
                self.running.discard(key)
                self.notes.append((i, "foreign", str(self.theirs.get(key))))
        elif finish == "processing" and not ours:
            self.running.add(key)
        elif start == "processing":
            self.running.discard(key)
            if ours and finish == "released" and str(stimulus_id or "").startswith(ERRED_STIMULUS):
                self.notes.append((self.index, "retried", str(key)))
        if finish == "forgotten":
            self.ours.discard(key)
            self.done.discard(key)
            self.theirs.pop(key, None)
            self.running.discard(key)


def _start(name: str, client_id: str, dask_scheduler=None) -> None:
    dask_scheduler.add_plugin(Watch(dask_scheduler, client_id), name=name)


def _stop(name: str, dask_scheduler=None) -> list[tuple[int, str, str]] | None:
    plugin = dask_scheduler.plugins.get(name)
    if plugin is None:
        return None
    dask_scheduler.remove_plugin(name=name)
    return plugin.notes


def _after_repeat(name: str | None, dask_scheduler=None) -> tuple[list[str], int | None, int]:
    plugin = dask_scheduler.plugins.get(name) if name else None
    try:
        index = _stream_index(dask_scheduler)
    except Exception:  # noqa: BLE001 - no cursor in this distributed: nothing to place notes by
        index = None
    return sorted(dask_scheduler.workers), index, len(plugin.running) if plugin is not None else 0


def _changed(before: frozenset[str], after: frozenset[str]) -> str:
    lost, joined = len(before - after), len(after - before)
    return ", ".join(
        x
        for x in (f"{lost} worker(s) lost" if lost else "", f"{joined} worker(s) joined" if joined else "")
        if x
    )


def start(client) -> str | None:
    """Put a :class:`Watch` for ``client`` on its scheduler; its name, or None where it cannot."""
    name = f"gpuscale-watch-{uuid.uuid4().hex[:12]}"
    try:
        client.run_on_scheduler(_start, name, client.id)
    except Exception:  # noqa: BLE001 - the check is extra: a run without it says so
        return None
    return name


def after_repeat(client, name: str | None) -> tuple[frozenset[str], int | None, int]:
    """The scheduler's workers, its task-stream cursor (None: none) and how many other clients'
    tasks are processing (0 when not watched)."""
    workers, index, running = client.run_on_scheduler(_after_repeat, name)
    return frozenset(workers), index, running


STOP_AFTER_FAILURE_S = 5.0


def stop(client, name: str | None, *, failed: bool = False) -> list[tuple[int, str, str]] | None:
    """Take the watch off the scheduler and return its notes (None: nothing was watched);
    ``failed``: a scheduler gone or silent for :data:`STOP_AFTER_FAILURE_S` is left."""
    if name is None or (failed and getattr(client, "status", "running") != "running"):
        return None
    kw = {"callback_timeout": STOP_AFTER_FAILURE_S} if failed else {}
    try:
        return client.run_on_scheduler(_stop, name, **kw)
    except Exception:  # noqa: BLE001 - the cluster may be gone (a failing run cleans up here too)
        return None


def by_repeat(
    notes: list[tuple[int, str, str]] | None, windows: list[tuple[int | None, int | None]], running: list[int]
) -> dict[int, str]:
    """``{repeat: why}`` for the repeats whose window (task-stream cursors before and after)
    holds notes, or that ended with other clients' tasks processing (``running``)."""
    out: dict[int, str] = {}
    for i, (a, b) in enumerate(windows):
        kinds: dict[str, list[str]] = {"recomputed": [], "retried": [], "foreign": []}
        if notes is not None and a is not None and b is not None:
            for at, kind, what in notes:
                if a <= at < b:
                    kinds[kind].append(what)
        still = running[i] if i < len(running) else 0
        parts = [
            f"{len(kinds[kind])} task(s) {did}{_prefixes(kinds[kind])}"
            for kind, did in (("recomputed", "recomputed"), ("retried", "erred and retried"))
            if kinds[kind]
        ]
        if kinds["foreign"]:
            clients = {c for c in kinds["foreign"] if c != "None"}
            of = f"{len(clients)} other client(s)" if clients else "other clients"
            parts.append(f"{len(kinds['foreign'])} task(s) of {of} ran")
        if still:
            parts.append(f"{still} task(s) of other clients still running at its end")
        if parts:
            out[i] = ", ".join(parts)
    return out


def _prefixes(keys: list[str], most: int = 3) -> str:
    """`` (a, b, ...)``: the first few of the tasks' names without their tokens."""
    from dask.utils import key_split

    names = sorted({key_split(k) for k in keys})
    return f" ({', '.join(names[:most])}{', ...' if len(names) > most else ''})" if names else ""


def checks(watched: bool) -> dict[str, Any]:
    """The record's ``info.disturbance_checks``: what could flag a timed repeat in this run."""
    return {
        "workers": True,
        "tasks": watched,
        "how": "workers lost or joined (the scheduler's workers after each repeat)"
        + (
            "; this run's tasks recomputed or retried, and other clients' tasks, from a scheduler "
            "plugin placed by task-stream cursors (gpuscale.runs.watch)"
            if watched
            else "; tasks were not watched: the scheduler could not take gpuscale's plugin"
        ),
    }


def merge(*found: dict[int, str]) -> dict[int, str]:
    """One ``{repeat: why}`` from several, the reasons of a repeat joined."""
    out: dict[int, list[str]] = {}
    for d in found:
        for i, why in d.items():
            if why:
                out.setdefault(i, []).append(why)
    return {i: ", ".join(w) for i, w in sorted(out.items())}


class Disturbances(Observer):
    """What disturbed each timed repeat (the outcome's ``disturbed``): the workers lost or
    joined, and the notes of a :class:`Watch` placed from before generate to the last repeat."""

    def start(self, run: Run) -> None:
        self.client = run.client
        self.name = start(self.client)
        self.workers: frozenset[str] = frozenset()
        self.windows: list[tuple[int | None, int | None]] = []
        self.running: list[int] = []
        self.disturbed: dict[int, str] = {}

    def after_step(self, step: Step, elapsed: float) -> None:
        if step.kind == GENERATE:
            self.workers = after_repeat(self.client, None)[0]
        elif step.repeat:
            before = self.workers
            self.workers, after, still = after_repeat(self.client, self.name)
            if step.kind == COMPUTE:
                self.windows.append((step.cursor, after))
                self.running.append(still)
                if self.workers != before:
                    self.disturbed[step.index] = _changed(before, self.workers)

    def after_repeats(self, run: Run, outcome: Outcome) -> None:
        notes = stop(self.client, self.name)
        self.name = None
        outcome.disturbed = merge(self.disturbed, by_repeat(notes, self.windows, self.running))
        outcome.info["disturbance_checks"] = checks(notes is not None)

    def failed(self, run: Run, exc: BaseException) -> None:
        stop(self.client, self.name, failed=True)  # off a shared scheduler, where it is still there
