"""Run a workload: memory check, generate, warm-up + timed repeats, validate.

:func:`execute` runs the steps (:class:`Runner`), each named once (:func:`gpuscale.errors.phase`)
and spanned (``distributed.span``), calling the observers (:mod:`gpuscale.runs.observe`) at each.
Before a repeat the previous result is released and the scheduler settles back to the data's
tasks: persisting keys still in memory would time nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import statistics
import time
import warnings
from typing import Any, Callable, ContextManager, Iterator, Sequence

import dask
from dask.core import flatten
from distributed import KilledWorker, futures_of, span, wait

from .. import _dask_compat, memory_measured
from .. import memory as _memory
from ..audit import Audit
from ..decision import Decision
from ..errors import phase as named_phase
from ..trace.intervals import length, minus, one_task_per_thread, union
from ..workloads import Context, Output, Validation, Workload
from . import progress as _progress
from . import repeats as _repeats
from . import watch as _watch
from .heap import hold_heap, release_heap
from .observe import COMPUTE, GENERATE, PREPARE, VALIDATE, WARMUP, Observer, Outcome, Progress, Run, Step

SETTLE_TIMEOUT_S = 30.0
GC_AFTER_S = 0.05


def _task_count(dask_scheduler=None) -> int:
    return len(dask_scheduler.tasks)


def _in_worker() -> bool:
    """Whether this runs in a worker's task (the runner in the cluster)."""
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


@contextlib.contextmanager
def collector_held(client=None) -> Iterator[Callable[[], ContextManager[None]]]:
    """For the timed repeats: :func:`~.heap.hold_heap` here and, from a client process, on
    ``client``'s workers, undone at the end. Yields ``paused``, a context without automatic
    collections that collects the youngest generation on its way out."""
    was = gc.isenabled()
    on_workers = None
    if client is not None and not _in_worker():
        with contextlib.suppress(Exception):  # a cluster that refuses client.run: its workers as they are
            on_workers = client.run(hold_heap)
    froze = hold_heap()

    @contextlib.contextmanager
    def paused() -> Iterator[None]:
        gc.disable()
        try:
            yield
        finally:
            if was:
                gc.enable()
            gc.collect(0)

    try:
        yield paused
    finally:
        release_heap(froze)
        if on_workers:
            with contextlib.suppress(Exception):  # a worker gone by now has nothing to restore
                client.run(release_heap, on_workers)


def task_count(client) -> int:
    """Tasks the scheduler holds now (the baseline that ``settle`` waits to return to)."""
    return client.run_on_scheduler(_task_count)


def settle(client, baseline: int) -> bool:
    """Wait until the scheduler holds no more tasks than ``baseline`` (the data alone), with one
    garbage collection past ``GC_AFTER_S``; False after :data:`SETTLE_TIMEOUT_S`."""
    start = time.monotonic()
    collected = False
    delay = 0.002
    while task_count(client) > baseline:
        now = time.monotonic()
        if now - start > SETTLE_TIMEOUT_S:
            return False
        if not collected and now - start > GC_AFTER_S:
            gc.collect()
            collected = True
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return True


def _persisted(c) -> bool:
    """True when every output key of a collection is already a future (nothing to submit); a
    DataFrame's answer is read off its expression (:func:`gpuscale._dask_compat.frame_persisted`)."""
    held = _dask_compat.frame_persisted(c)
    if held is not None:
        return held
    return {f.key for f in futures_of(c)} >= set(flatten(c.__dask_keys__()))


def persist(client, obj):
    """Persist a collection, or every collection in a dict (other values pass through), leaving
    those already persisted (:func:`gpuscale._dask_compat.submitted` for one-task frames)."""
    if not isinstance(obj, dict):
        return persist(client, {None: obj})[None]
    out = dict(obj)
    keys = []
    for k, v in obj.items():
        if not dask.is_dask_collection(v) or _persisted(v):
            continue
        done = _dask_compat.submitted(v, client)
        if done is None:
            keys.append(k)
        else:
            out[k] = done
    out.update(zip(keys, client.persist([obj[k] for k in keys]) if keys else []))
    return out


def _futures(obj) -> list:
    if isinstance(obj, dict):
        return [f for v in obj.values() if dask.is_dask_collection(v) for f in futures_of(v)]
    return futures_of(obj)


def timed(client, family, build, marks: dict | None = None):
    """Time ``build()`` (a collection or a dict of them) until every result is in memory and
    every device has finished (:meth:`Family.synchronized`): (seconds, persisted result).
    ``marks`` gets the wall clock (``time.time``) at each stage, ``start`` to ``synchronized``."""
    stamp = (lambda k: marks.__setitem__(k, time.time())) if marks is not None else (lambda k: None)
    t0 = time.perf_counter()
    stamp("start")
    built, whole = _synchronized(family, build())
    stamp("built")
    out = persist(client, built)
    futures = _futures(out)
    stamp("persisted")
    wait(futures)
    for f in futures:  # wait() returns on an erred task too: a run whose task failed is no timing
        if f.status == "error":
            f.result()
    stamp("in memory")
    if not whole:
        family.synchronize(client)
    stamp("synchronized")
    return time.perf_counter() - t0, out


def _synchronized(family, obj):
    """(obj with its collections' blocks synchronized in their tasks, whether all were)."""
    whole = True

    def one(c):
        nonlocal whole
        if not dask.is_dask_collection(c):
            return c
        wrapped = None if _persisted(c) else family.synchronized(c)
        whole = whole and wrapped is not None
        return c if wrapped is None else wrapped

    if isinstance(obj, dict):
        return {k: one(v) for k, v in obj.items()}, whole
    return one(obj), whole


def stream_index(client) -> int | None:
    """The scheduler's task-stream cursor (tasks recorded so far), or None where it has none."""
    try:
        return int(client.sync(client.scheduler.get_task_stream_index))
    except Exception:  # noqa: BLE001 - the split is extra: without a cursor the record says so
        return None


def time_split(client, cursors: list[int | None], end: int | None, elapsed: list[float]) -> dict[str, Any]:
    """How each timed repeat's time splits into ``compute_s``, ``transfer_s`` and ``other_s``,
    from the task stream between its cursors: medians over the repeats, and each repeat's own."""
    if end is None or any(c is None for c in cursors) or not cursors:
        return {
            "available": False,
            "why": "this distributed has no task-stream cursor (get_task_stream_index)",
        }
    try:
        records = client.sync(client.scheduler.get_task_stream, start_index=cursors[0])
    except Exception as e:  # noqa: BLE001
        return {"available": False, "why": f"the task stream could not be read: {type(e).__name__}"}
    bounds = [*cursors, end]
    per = []
    for i, t in enumerate(elapsed):
        recs = one_task_per_thread(records[bounds[i] - cursors[0] : bounds[i + 1] - cursors[0]])
        spans = [(s.get("action"), s["start"], s["stop"]) for r in recs for s in r["startstops"]]
        comp = [(a, b) for kind, a, b in spans if kind == "compute"]
        xfer = [(a, b) for kind, a, b in spans if kind == "transfer"]
        c = min(length(union(comp)), t)
        x = min(length(minus(union(xfer), union(comp))), t - c)
        per.append(
            {
                "elapsed_s": t,
                "compute_s": c,
                "transfer_s": x,
                "other_s": max(0.0, t - c - x),
                "tasks": len(recs),
                "busy_s": sum(b - a for a, b in comp),
            }
        )
    return {
        "available": True,
        **{k: statistics.median(r[k] for r in per) for k in per[0]},
        "repeats": per,
        "how": "the scheduler's task stream between each repeat's cursors: compute = wall time with a "
        "task computing on some worker; transfer = fetching with none computing; other = the rest "
        "(graph, scheduling, round trips, device synchronize)",
    }


AUDIT_SCOPE = (
    "generate (the data) and compute (warm-up + timed repeats); validation is not "
    "audited: it builds host references on purpose"
)


class PeakWatch(Observer):
    """The outcome's ``memory.measured`` (:class:`gpuscale.memory_measured.Watch`)."""

    def start(self, run: Run) -> None:
        self.watch = memory_measured.Watch(run.client, run.family, run.ctx.memory)

    def finish(self, run: Run, outcome: Outcome) -> None:
        measured = self.watch.read(run.memory)
        if measured:
            outcome.memory["measured"] = measured


class RunAudit(Observer):
    """The backend audit of a run (the record's ``audit``; :data:`AUDIT_SCOPE`)."""

    def start(self, run: Run) -> None:
        self.audit = Audit(run.client, run.family, scope=AUDIT_SCOPE).start()

    def after_step(self, step: Step, elapsed: float) -> None:
        if step.kind == GENERATE:
            self.audit.collect("generate")

    def after_repeats(self, run: Run, outcome: Outcome) -> None:
        runs = {"generate": 1, "compute": run.warmup + len(outcome.times_s)}
        outcome.audit = self.audit.finish("compute", runs=runs)

    def failed(self, run: Run, exc: BaseException) -> None:
        self.audit.stop()


class TimeSplit(Observer):
    """The record's ``info.time_split`` (:func:`time_split`)."""

    def start(self, run: Run) -> None:
        self.client = run.client
        self.cursors: list[int | None] = []

    def after_step(self, step: Step, elapsed: float) -> None:
        if step.kind == COMPUTE:
            self.cursors.append(step.cursor)

    def after_repeats(self, run: Run, outcome: Outcome) -> None:
        outcome.info["time_split"] = time_split(
            self.client, self.cursors, stream_index(self.client), outcome.times_s
        )


class TracePhases(Observer):
    """The phases of a trace (:meth:`gpuscale.trace.Capture.phase`), a repeat's with its index."""

    def __init__(self, tracer):
        self.tracer = tracer

    def measuring(self, step: Step) -> ContextManager[Any]:
        if step.repeat:
            return self.tracer.phase(step.kind, repeat=step.index)
        return self.tracer.phase(step.kind)


class Cancelled(Exception):
    """The run was called off between two steps (its ``cancelled()`` said so)."""


class Cancellation(Observer):
    """Asks ``cancelled()`` before each repeat and validation; True raises :class:`Cancelled`."""

    def __init__(self, cancelled: Callable[[], bool]):
        self.cancelled = cancelled

    def start(self, run: Run) -> None:
        self.total = run.total

    def before_step(self, step: Step) -> None:
        if step.repeat:
            before = f"run {step.number} of {self.total}"
        elif step.kind == VALIDATE:
            before = "validation"
        else:
            return
        if self.cancelled():
            raise Cancelled(f"the run was called off before {before}")


def default_observers(
    *,
    tracer=None,
    audit: bool = True,
    cancelled: Callable[[], bool] | None = None,
    progress: Progress | None = None,
) -> list[Observer]:
    """What a run records and shows, in the order the runner calls them: the time split,
    disturbances, peak memory, the backend audit (``audit``), ``progress``, ``cancelled``
    (:class:`Cancellation`) and the phases of ``tracer`` (a :class:`gpuscale.trace.Capture`)."""
    observers: list[Observer] = [TimeSplit(), _watch.Disturbances(), PeakWatch()]
    if audit:
        observers.append(RunAudit())
    observers.append(_progress.Repeats(progress))
    if cancelled is not None:
        observers.append(Cancellation(cancelled))
    if tracer is not None:
        observers.append(TracePhases(tracer))
    return observers


def execute(
    workload: Workload,
    p,
    ctx: Context,
    *,
    warmup: int,
    repeat: int | _repeats.Policy,
    memory_check: bool = True,
    observers: Sequence[Observer] | None = None,
) -> Outcome:
    """Run ``workload``: the memory check (unless ``memory_check`` is False), generate,
    ``warmup`` warm-ups, the timed repeats (a whole number or a :class:`~.repeats.Policy`),
    validation, calling ``observers`` (default: :func:`default_observers`) at each step."""
    policy = repeat if isinstance(repeat, _repeats.Policy) else _repeats.policy(repeat)
    chosen = default_observers() if observers is None else list(observers)
    with warnings.catch_warnings():
        # dask-expr DataFrames ignore span annotations (with a warning); arrays keep them
        warnings.filterwarnings("ignore", message="Dask annotations .* detected", category=UserWarning)
        return Runner(workload, p, ctx, warmup, policy, observers=chosen).execute(memory_check)


@dataclasses.dataclass
class Runner(Run):
    """A run's steps, :meth:`execute` calling ``observers`` at each."""

    observers: list[Observer] = dataclasses.field(default_factory=list)
    out: Output | None = None
    """The last repeat's result (None while a repeat runs, and once the outcome holds it)."""
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The workload's ``info`` as its last build said it."""
    baseline: int = 0
    """Tasks on the scheduler once the data is persisted (what a settle waits to return to)."""
    unsettled: int = 0
    """Repeats before which the scheduler did not settle."""

    def execute(self, memory_check: bool) -> Outcome:
        started: list[Observer] = []
        try:
            prepare = Step(PREPARE, "the memory check and the audit's set-up")
            with named_phase(prepare.name), self._measured(prepare):
                self._plan(memory_check)
                for o in self.observers:
                    o.start(self)
                    started.append(o)
            outcome = self._work()
        except BaseException as e:
            for o in started:
                o.failed(self, e)
            if self.memory and isinstance(e, MemoryError):
                raise _memory.ran_out(self.workload.name, self.memory, self.family, e) from None
            if self.memory and isinstance(e, KilledWorker):
                raise _memory.killed(self.workload.name, self.memory, e) from None
            raise
        finally:
            self.out = None  # the outcome holds the last result: a run an observer keeps holds none
        outcome.memory = dict(self.memory)
        for o in self.observers:
            o.finish(self, outcome)
        outcome.estimate_bytes = self.memory["estimate_bytes"]
        outcome.capacity_bytes = self.memory["capacity_bytes"]
        return outcome

    def _plan(self, memory_check: bool) -> None:
        ctx, fam = self.ctx, self.family
        ctx.memory = memory_measured.measure(self.client, fam, fam.worker_memory(self.client), ctx.spec)
        self.workload.plan(self.p, ctx)
        self.memory = _memory.check(self.workload, self.p, ctx, memory_check)
        if self.streamed:
            ctx.decide("data_residency", Decision("streamed", "rule", self.memory["streams"]))

    @property
    def streamed(self) -> bool:
        """The memory check's verdict is "streams": the data is made inside every pass."""
        return self.memory.get("verdict") == "streams"

    def _work(self) -> Outcome:
        """Generate, the warm-ups, the timed repeats, validation."""
        data, generate_s = self._generate()
        wl, p, ctx = self.workload, self.p, self.ctx

        def build():
            result = wl.compute(data, p, ctx)
            self.info.update(result.info)
            return result.collections

        warm = [self._repeat(self._warmup(i), build) for i in range(self.warmup)]
        times: list[float] = []
        with collector_held(self.client) as paused:
            t0 = time.perf_counter()
            while (stopped := self.policy.stop(times, time.perf_counter() - t0)) is None:
                times.append(self._repeat(self._timed(len(times)), build, paused))
        outcome = Outcome(
            times,
            warm,
            generate_s,
            self.out.info,
            self.unsettled,
            output=self.out,
            repeats=self.policy.describe(times, stopped),
        )
        for o in self.observers:
            o.after_repeats(self, outcome)
        self._validate(outcome, data)
        return outcome

    def _generate(self) -> tuple[Any, float]:
        """The data and the seconds it took; persisted unless the run streams."""
        wl, p, ctx = self.workload, self.p, self.ctx
        step = Step(GENERATE, "generate (loading the data)")
        with named_phase(step.name):
            self._before(step)
            with self._measured(step):
                if self.streamed:
                    t0 = time.perf_counter()
                    data = wl.load(p, ctx)
                    generate_s = time.perf_counter() - t0
                else:
                    generate_s, data = timed(self.client, self.family, lambda: wl.load(p, ctx))
                wl.check_loaded(data, p, ctx)
            self._after(step, generate_s)
        self.baseline = task_count(self.client)
        return data, generate_s

    def _warmup(self, index: int) -> Step:
        return Step(WARMUP, f"warm-up {index + 1} of {self.warmup}", index, index + 1)

    def _timed(self, index: int) -> Step:
        of = f"at most {self.policy.most}" if self.policy.auto else self.policy.most
        return Step(COMPUTE, f"timed repeat {index + 1} of {of}", index, self.warmup + index + 1)

    def _validate(self, outcome: Outcome, data) -> None:
        step = Step(VALIDATE, "validation")
        with named_phase(step.name):
            self._before(step)
            with self._measured(step):
                t0 = time.perf_counter()
                outcome.validation = (
                    Validation.off()
                    if self.ctx.validate == "off"
                    else self.workload.validate(outcome.output, data, self.p, self.ctx)
                )
                outcome.validate_s = time.perf_counter() - t0
            self._after(step, outcome.validate_s)

    def _repeat(self, step: Step, build, held=contextlib.nullcontext) -> float:
        """One repeat: the previous result released, the scheduler settled, the timed work."""
        with named_phase(step.name):
            self.out = None
            self._before(step)
            if not settle(self.client, self.baseline):
                self.unsettled += 1
            if step.kind == COMPUTE:
                step.cursor = stream_index(self.client)
            with held(), self._measured(step):  # the phase ends before held()'s collection
                elapsed, collections = timed(self.client, self.family, build)
            self.out = Output(collections, dict(self.info))
            collections = None
            self._after(step, elapsed)
        return elapsed

    @contextlib.contextmanager
    def _measured(self, step: Step) -> Iterator[None]:
        """Around what a step measures: its span (none for prepare), every observer's ``measuring``."""
        with contextlib.ExitStack() as stack:
            if step.kind != PREPARE:
                stack.enter_context(span("gpuscale", self.workload.name, step.kind))
            for o in self.observers:
                stack.enter_context(o.measuring(step))
            yield

    def _before(self, step: Step) -> None:
        for o in self.observers:
            o.before_step(step)

    def _after(self, step: Step, elapsed: float) -> None:
        for o in self.observers:
            o.after_step(step, elapsed)
