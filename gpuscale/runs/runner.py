"""Run a workload: memory check, generate, warm-up + timed repeats, validate.

Each repeat builds the graph afresh, persists it, waits, and synchronizes the devices before
the clock stops. Before a repeat starts, the previous result is released and the runner waits
until the scheduler has forgotten it (its task count is back to the data's), because
persisting a graph whose keys are still in memory returns the old result at once and would
time nothing. Phases run inside ``distributed.span`` so the dashboard groups their tasks.

Python's cyclic garbage collector stays out of the timed repeats (:func:`collector_held`): a
collection triggered by an allocation count lands on the same repeat run after run, and a full
one traverses the whole heap of this process, which holds the client and, for a cluster it
started, the scheduler (tens of milliseconds: one repeat of a 20 ms run took 5 x the others).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import statistics
import time
import warnings
from typing import Any, Callable, ContextManager, Iterator

import dask
from dask.core import flatten
from distributed import KilledWorker, futures_of, span, wait

from .. import _dask_compat
from .. import memory as _memory
from ..audit import Audit
from ..errors import phase as named_phase
from ..trace.intervals import length, minus, one_task_per_thread, union
from ..workloads import Context, Output, Validation, Workload
from . import progress as _progress
from . import repeats as _repeats
from . import watch as _watch

SETTLE_TIMEOUT_S = 30.0
GC_AFTER_S = 0.05

# dask-expr DataFrames ignore span annotations (with a warning); arrays keep them.
warnings.filterwarnings("ignore", message="Dask annotations .* detected", category=UserWarning)


class Cancelled(Exception):
    """The run was called off between two steps (``execute``'s ``cancelled()`` said so)."""


@dataclasses.dataclass
class Outcome:
    times_s: list[float]
    warmup_s: list[float]
    generate_s: float
    validate_s: float
    validation: Validation
    info: dict[str, Any]
    estimate_bytes: int
    capacity_bytes: int
    settle_warnings: int
    audit: dict[str, Any] | None = None
    """The backend audit of generate + warm-up + timed repeats (:mod:`gpuscale.audit`)."""
    memory: dict[str, Any] | None = None
    """The memory check (:func:`gpuscale.memory.check`), and under ``measured`` what the
    workers held at their peak and spilled (:class:`gpuscale.memory.Watch`)."""
    output: Output | None = None
    """The last repeat's result, persisted (what ``--output`` writes)."""
    repeats: dict[str, Any] | None = None
    """How many timed repeats were taken and why they stopped (:meth:`repeats.Policy.describe`)."""
    disturbed: dict[int, str] = dataclasses.field(default_factory=dict)
    """Timed repeats (index into ``times_s``) that were disturbed, and how: workers lost or
    joined (:func:`_changed`), tasks of the run recomputed or retried, other clients' tasks
    on the cluster (:mod:`gpuscale.runs.watch`); left out of the median by the record."""


def _task_count(dask_scheduler=None) -> int:
    return len(dask_scheduler.tasks)


def _workers(dask_scheduler=None) -> list[str]:
    return sorted(dask_scheduler.workers)


def worker_set(client) -> frozenset[str]:
    """The workers the scheduler has now: a repeat during which this changed (a worker lost
    and restarted by its nanny, or one joining) was disturbed."""
    return frozenset(client.run_on_scheduler(_workers))


def _changed(before: frozenset[str], after: frozenset[str]) -> str:
    lost, joined = len(before - after), len(after - before)
    return ", ".join(
        x
        for x in (f"{lost} worker(s) lost" if lost else "", f"{joined} worker(s) joined" if joined else "")
        if x
    )


def _in_worker() -> bool:
    """Whether this runner runs in a worker's task (the runner in the cluster): it holds its
    own worker's collector, and leaves the others as they are."""
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def _freeze_collected() -> None:
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def collector_held(client=None) -> Iterator[Callable[[], ContextManager[None]]]:
    """For the timed repeats: one full collection, then everything alive is frozen
    (``gc.freeze``: later collections do not traverse it), here and, from a client process, on
    every worker of ``client``; yields ``paused``, a context in which this process's automatic
    collections do not run (each timed repeat), collecting the youngest generation on its way
    out. A worker keeps collecting, but its full collections no longer walk every object its
    imports made. The collector's state is restored at the end."""
    was = gc.isenabled()
    frozen = False
    if client is not None and not _in_worker():
        with contextlib.suppress(Exception):  # a cluster that refuses client.run: its workers as they are
            client.run(_freeze_collected)
            frozen = True
    gc.collect()
    gc.freeze()

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
        gc.unfreeze()
        if frozen:
            with contextlib.suppress(Exception):  # a worker gone by now has nothing to restore
                client.run(gc.unfreeze)


def task_count(client) -> int:
    """Tasks the scheduler holds now (the baseline that ``settle`` waits to return to)."""
    return client.run_on_scheduler(_task_count)


def settle(client, baseline: int) -> bool:
    """Wait until the scheduler holds no more tasks than ``baseline`` (the data alone). A
    result held only by a reference cycle is freed by a garbage collection, run once the
    scheduler has not settled within ``GC_AFTER_S`` (a full collection takes 0.1-0.2 s in a
    busy process: the first repeat, with nothing to release, does not pay it)."""
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
    """True when every output key of a collection is already a future (nothing to submit).
    A DataFrame (dask-expr) is one only as a ``FromGraph`` of futures, which is read off its
    expression: asking any other expression for its graph or keys lowers and optimizes it
    whole, which took 10-20 ms of a 100 000-row groupby's 100 ms run, twice per repeat."""
    held = _dask_compat.frame_persisted(c)
    if held is not None:
        return held
    return {f.key for f in futures_of(c)} >= set(flatten(c.__dask_keys__()))


def persist(client, obj):
    """Persist a collection, or every collection in a dict (other values pass through).
    Collections that a route already persisted are not submitted again; a frame of one task
    over futures (the one-task routes, :func:`gpuscale._dask_compat.submitted`)
    goes through ``client.submit``."""
    if not isinstance(obj, dict):
        return persist(client, {None: obj})[None]
    out = dict(obj)
    keys = []
    for k, v in obj.items():
        if not dask.is_dask_collection(v) or _persisted(v):
            continue
        done = _submitted(client, v)
        if done is None:
            keys.append(k)
        else:
            out[k] = done
    out.update(zip(keys, client.persist([obj[k] for k in keys]) if keys else []))
    return out


def _submitted(client, collection):
    """A one-task route's frame persisted through ``client.submit``, or None for any other
    collection (:func:`gpuscale._dask_compat.submitted`)."""
    return _dask_compat.submitted(collection, client)


def _futures(obj) -> list:
    if isinstance(obj, dict):
        return [f for v in obj.values() if dask.is_dask_collection(v) for f in futures_of(v)]
    return futures_of(obj)


def timed(client, family, build, marks: dict | None = None):
    """Time ``build()`` (returns a collection or a dict of them) until every result is in
    memory and every device has finished: (seconds, persisted result). Each output block's
    task waits for its device (:meth:`Family.synchronized`); only when some output cannot
    (a route's already persisted result, a collection the family cannot wrap) is every
    worker's device synchronized after the wait, one more round trip. ``marks``, when given,
    gets the wall clock (``time.time``, the clock of the task stream) at the start and after
    each step: ``start``, ``built``, ``persisted`` (the graph is sent), ``in memory``,
    ``synchronized`` (``workflows/run_timeline.py`` lays them out with the run's tasks)."""
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
            f.result()  # raises the task's exception here
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
        if wrapped is None:
            whole = False
            return c
        return wrapped

    if isinstance(obj, dict):
        return {k: one(v) for k, v in obj.items()}, whole
    return one(obj), whole


# ---------------------------------------------------------------------------------------
# Where a repeat's time went: compute on the workers, transfers, the rest
# ---------------------------------------------------------------------------------------
def stream_index(client) -> int | None:
    """The scheduler's task-stream cursor (tasks recorded so far), or None where distributed
    has none (older than 2026.7) or the scheduler cannot be asked."""
    try:
        return int(client.sync(client.scheduler.get_task_stream_index))
    except Exception:  # noqa: BLE001 - the split is extra: without a cursor the record says so
        return None


def time_split(client, cursors: list[int | None], end: int | None, elapsed: list[float]) -> dict[str, Any]:
    """How each timed repeat's time splits, from the scheduler's task stream between the
    repeat's cursors: ``compute_s`` (wall time in which some worker was computing one of its
    tasks), ``transfer_s`` (in which some worker was fetching data and none computing), and
    ``other_s``, the rest of the repeat: building and sending the graph, scheduling, round
    trips, the device synchronize. Medians over the repeats, and each repeat's own."""
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
        comp = [
            (s["start"], s["stop"]) for r in recs for s in r["startstops"] if s.get("action") == "compute"
        ]
        xfer = [
            (s["start"], s["stop"]) for r in recs for s in r["startstops"] if s.get("action") == "transfer"
        ]
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
    med = {
        k: statistics.median(r[k] for r in per)
        for k in ("elapsed_s", "compute_s", "transfer_s", "other_s", "tasks", "busy_s")
    }
    return {
        "available": True,
        **med,
        "repeats": per,
        "how": "the scheduler's task stream between each repeat's cursors: compute = wall time with a "
        "task computing on some worker; transfer = fetching with none computing; other = the rest "
        "(graph, scheduling, round trips, device synchronize)",
    }


Progress = Callable[[str, int], ContextManager[Callable[[], None]]]
"""How a caller watches the repeats: ``progress(description, total)`` is a context manager
around them that yields the function called after each one (the CLI hands in
:class:`gpuscale.runs.progress.Tracker`, which shows every phase of the run; None shows
nothing)."""


@contextlib.contextmanager
def _silent(description: str, total: int) -> Iterator[Callable[[], None]]:
    yield lambda: None


@contextlib.contextmanager
def _no_phase(name: str, **args):
    yield


def execute(
    workload: Workload,
    p,
    ctx: Context,
    *,
    warmup: int,
    repeat: int | _repeats.Policy,
    memory_check: bool = True,
    tracer=None,
    audit: bool = True,
    cancelled: Callable[[], bool] | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """``tracer``: a :class:`gpuscale.trace.Capture` whose ``phase`` marks prepare (the memory
    check, the audit's set-up: gpuscale's own cost before the data exists) / generate / warmup /
    compute / validate (besides the ``span`` that groups their tasks on the dashboard).

    ``cancelled``: asked before each repeat and before validation; when it answers True the
    run stops there with :class:`Cancelled` (a runner in the cluster whose client has gone).

    ``audit``: run the backend audit (:mod:`gpuscale.audit`) over generate and over the
    warm-up + timed repeats (phase ``compute``); validation is not audited (it builds host
    references on purpose).

    ``progress``: see :data:`Progress`.

    ``repeat``: a whole number, or a :class:`gpuscale.runs.repeats.Policy` (``auto``: repeat
    until the median's relative error reaches its target, capped)."""
    client = ctx.client
    phase = tracer.phase if tracer is not None else _no_phase
    fam = ctx.family
    with named_phase("the memory check and the audit's set-up"), phase("prepare"):
        ctx.memory = _memory.measure(client, fam, fam.worker_memory(client), ctx.spec)
        workload.plan(p, ctx)
        memory = _memory.check(workload, p, ctx, memory_check)
        stream = memory.get("verdict") == "streams"
        if stream:
            ctx.decide("data_residency", "streamed", "rule", memory["streams"])
        watch = _memory.Watch(client, fam, ctx.memory)
        auditor = Audit(client, fam, scope=AUDIT_SCOPE).start() if audit else None
    runs = warmup + (repeat if isinstance(repeat, _repeats.Policy) else _repeats.policy(repeat)).most
    _progress.planned(client, workload.name, memory, runs, ctx.validate != "off")
    try:
        outcome = _run(
            workload, p, ctx, warmup, repeat, phase, auditor, cancelled or _never, progress or _silent, stream
        )
    except BaseException as e:
        if auditor is not None:
            auditor.stop()
        if isinstance(e, MemoryError):  # a worker's allocation failed (CuPy, RMM, cuDF, NumPy)
            raise _memory.ran_out(workload.name, memory, fam, e) from None
        if isinstance(e, KilledWorker):  # its workers died under a task, again and again
            raise _memory.killed(workload.name, memory, e) from None
        raise
    measured = watch.read(memory)
    outcome.memory = {**memory, **({"measured": measured} if measured else {})}
    outcome.estimate_bytes, outcome.capacity_bytes = memory["estimate_bytes"], memory["capacity_bytes"]
    return outcome


AUDIT_SCOPE = (
    "generate (the data) and compute (warm-up + timed repeats); validation is not "
    "audited: it builds host references on purpose"
)


def _never() -> bool:
    return False


def _go_on(cancelled: Callable[[], bool], before: str) -> None:
    if cancelled():
        raise Cancelled(f"the run was called off before {before}")


def _run(
    workload: Workload,
    p,
    ctx: Context,
    warmup: int,
    repeat: int | _repeats.Policy,
    phase,
    auditor,
    cancelled: Callable[[], bool],
    progress: Progress,
    stream: bool = False,
) -> Outcome:
    policy = repeat if isinstance(repeat, _repeats.Policy) else _repeats.policy(repeat)
    client = ctx.client
    watching = _watch.start(client)  # before generate: the data's keys are the run's too
    try:
        return _watched(
            workload, p, ctx, warmup, policy, phase, auditor, cancelled, progress, watching, stream
        )
    except BaseException:
        _watch.stop(client, watching, failed=True)  # off a shared scheduler, where it is still there
        raise


def _watched(
    workload: Workload,
    p,
    ctx: Context,
    warmup: int,
    policy: _repeats.Policy,
    phase,
    auditor,
    cancelled: Callable[[], bool],
    progress: Progress,
    watching: str | None,
    stream: bool = False,
) -> Outcome:
    client = ctx.client
    fam = ctx.family
    with (
        named_phase("generate (loading the data)"),
        span("gpuscale", workload.name, "generate"),
        phase("generate"),
    ):
        if stream:  # made block by block inside every pass: nothing is held (the memory check)
            t0 = time.perf_counter()
            data = workload.load(p, ctx)
            generate_s = time.perf_counter() - t0
        else:
            generate_s, data = timed(client, fam, lambda: workload.load(p, ctx))  # generated or the user's
        workload.check_loaded(data, p, ctx)
    if auditor is not None:
        auditor.collect("generate")
    baseline = task_count(client)
    workers_now = worker_set(client)
    disturbed: dict[int, str] = {}

    times: list[float] = []
    warm: list[float] = []
    cursors: list[int | None] = []
    windows: list[tuple[int | None, int | None]] = []  # task-stream cursors before / after each repeat
    running: list[int] = []  # other clients' tasks processing as each repeat ended
    out: Output | None = None
    unsettled = 0
    info: dict[str, Any] = {}

    def build():
        result = workload.compute(data, p, ctx)
        info.update(result.info)
        return result.collections

    def one(i: int, name: str, index: int, total: str, advance, held=contextlib.nullcontext) -> float:
        """One repeat, its progress step included: an interruption anywhere in it names it."""
        nonlocal out, unsettled, workers_now
        step = (
            f"warm-up {index + 1} of {warmup}"
            if name == "warmup"
            else f"timed repeat {index + 1} of {timed_total}"
        )
        with named_phase(step):
            out = None  # release the previous result before timing the next one
            _go_on(cancelled, f"run {i + 1} of {total}")
            if not settle(client, baseline):
                unsettled += 1
            if name == "compute":
                cursors.append(stream_index(client))
            with held(), span("gpuscale", workload.name, name), phase(name, repeat=index):
                elapsed, collections = timed(client, fam, build)  # the phase ends before held()'s collection
            out = Output(collections, dict(info))
            collections = None
            workers_before = workers_now
            workers_now, after, still = _watch.after_repeat(client, watching)
            if name == "compute":
                windows.append((cursors[-1], after))
                running.append(still)
                if workers_now != workers_before:
                    disturbed[index] = _changed(workers_before, workers_now)
            advance()
        return elapsed

    most = warmup + policy.most
    total = f"{most}" if not policy.auto else f"at most {most}"
    timed_total = f"{policy.most}" if not policy.auto else f"at most {policy.most}"
    label = f"{workload.name} ({fam.name}{', repeat auto' if policy.auto else ''})"
    with progress(label, most) as advance:
        for i in range(warmup):
            warm.append(one(i, "warmup", i, total, advance))
        with collector_held(client) as paused:
            t0 = time.perf_counter()
            while (stopped := policy.stop(times, time.perf_counter() - t0)) is None:
                times.append(one(warmup + len(times), "compute", len(times), total, advance, paused))
    out.info["time_split"] = time_split(client, cursors, stream_index(client), times)
    notes = _watch.stop(client, watching)
    disturbed = _watch.merge(disturbed, _watch.by_repeat(notes, windows, running))
    out.info["disturbance_checks"] = _watch.checks(notes is not None)
    audit = (
        auditor.finish("compute", runs={"generate": 1, "compute": warmup + len(times)})
        if auditor is not None
        else None
    )

    _go_on(cancelled, "validation")
    with named_phase("validation"), span("gpuscale", workload.name, "validate"), phase("validate"):
        t0 = time.perf_counter()
        validation = Validation.off() if ctx.validate == "off" else workload.validate(out, data, p, ctx)
        validate_s = time.perf_counter() - t0
    return Outcome(
        times,
        warm,
        generate_s,
        validate_s,
        validation,
        out.info,
        0,
        0,
        unsettled,
        audit=audit,
        output=out,
        repeats=policy.describe(times, stopped),
        disturbed=disturbed,
    )
