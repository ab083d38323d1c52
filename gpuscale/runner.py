"""Run a workload: memory check, generate, warm-up + timed repeats, validate.

Each repeat builds the graph afresh, persists it, waits, and synchronizes the devices before
the clock stops. Before a repeat starts, the previous result is released and the runner waits
until the scheduler has forgotten it (its task count is back to the data's), because
persisting a graph whose keys are still in memory returns the old result at once and would
time nothing. Phases run inside ``distributed.span`` so the dashboard groups their tasks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import time
import warnings
from typing import Any

import dask
from dask.utils import format_bytes
from distributed import futures_of, span, wait

from .errors import UserError
from .workloads import Context, Output, Validation, Workload

SETTLE_TIMEOUT_S = 30.0

# dask-expr DataFrames ignore span annotations (with a warning); arrays keep them.
warnings.filterwarnings("ignore", message="Dask annotations .* detected", category=UserWarning)
MEMORY_HEADROOM = 0.9


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


def _task_count(dask_scheduler=None) -> int:
    return len(dask_scheduler.tasks)


def _settle(client, baseline: int) -> bool:
    """Wait until the scheduler holds no more tasks than it did with only the data in memory."""
    gc.collect()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    delay = 0.002
    while client.run_on_scheduler(_task_count) > baseline:
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return True


def _persist(client, obj):
    if isinstance(obj, dict):
        keys = [k for k, v in obj.items() if dask.is_dask_collection(v)]
        done = client.persist([obj[k] for k in keys])
        return {**obj, **dict(zip(keys, done))}
    return client.persist(obj)


def _futures(obj) -> list:
    if isinstance(obj, dict):
        return [f for v in obj.values() if dask.is_dask_collection(v) for f in futures_of(v)]
    return futures_of(obj)


def check_memory(workload: Workload, p, ctx: Context) -> tuple[int, int]:
    """Refuse sizes that cannot fit: (estimate, capacity) in bytes."""
    estimate = int(workload.estimate_bytes(p, ctx))
    per_worker = ctx.family.worker_memory(ctx.client)
    capacity = int(sum(per_worker.values()))
    return estimate, capacity


def _progress(total: int, label: str):
    """A rich progress bar on stderr for interactive terminals; silent otherwise."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True)


def execute(workload: Workload, p, ctx: Context, *, warmup: int, repeat: int,
            memory_check: bool = True) -> Outcome:
    client = ctx.client
    fam = ctx.family
    workload.plan(p, ctx)
    estimate, capacity = check_memory(workload, p, ctx)
    if memory_check and capacity and estimate > capacity * MEMORY_HEADROOM:
        raise UserError(f"{workload.name} at these sizes needs about {format_bytes(estimate)}, but the "
                        f"cluster's {len(fam.worker_memory(client))} worker(s) hold "
                        f"{format_bytes(capacity)} ({int(MEMORY_HEADROOM * 100)}% usable)",
                        "use smaller sizes, more memory (--memory-limit, --workers, --gpus), "
                        "or --no-memory-check to try anyway")

    with span("gpuscale", workload.name, "generate"):
        t0 = time.perf_counter()
        data = _persist(client, workload.generate(p, ctx))
        wait(_futures(data))
        fam.synchronize(client)
        generate_s = time.perf_counter() - t0
    baseline = client.run_on_scheduler(_task_count)

    times: list[float] = []
    warm: list[float] = []
    out: Output | None = None
    unsettled = 0
    with _progress(warmup + repeat, workload.name) as bar:
        task = bar.add_task(f"{workload.name} ({fam.name})", total=warmup + repeat) if bar else None
        result = collections = None
        for i in range(warmup + repeat):
            # release every reference to the previous result before timing the next one
            out = result = collections = None
            if not _settle(client, baseline):
                unsettled += 1
            phase = "warmup" if i < warmup else "compute"
            with span("gpuscale", workload.name, phase):
                t0 = time.perf_counter()
                result = workload.compute(data, p, ctx)
                collections = _persist(client, result.collections)
                wait(_futures(collections))
                fam.synchronize(client)
                elapsed = time.perf_counter() - t0
            out = Output(collections, result.info)
            (warm if i < warmup else times).append(elapsed)
            if bar:
                bar.advance(task)

    with span("gpuscale", workload.name, "validate"):
        t0 = time.perf_counter()
        validation = workload.validate(out, data, p, ctx)
        validate_s = time.perf_counter() - t0
    return Outcome(times, warm, generate_s, validate_s, validation, out.info, estimate, capacity,
                   unsettled)
