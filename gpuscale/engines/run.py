"""Where translated plans run: Polars' streaming engine in this process (:func:`on_cpu`),
cudf-polars in a task on the session's GPU worker (:func:`on_gpu_worker`), or cudf-polars'
``DaskEngine`` over the session's GPU workers (:class:`GpuWorkers`). Each returns Dask's
answers (:func:`gpuscale.engines.answer.build`), in the library of the collection's metadata."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import polars as pl

from . import answer


def on_cpu(plans: list[answer.Plan]) -> list[Any]:
    """The plans collected together (a sub-plan they share runs once) on Polars' streaming
    engine, on all of this process's cores."""
    results = pl.collect_all([p.lf for p in plans], engine="streaming")
    return [answer.build(r, p) for r, p in zip(results, plans)]


_GPU_ENGINES: dict[str, Any] = {}
"""This worker process's GPU engines, by executor, each made by the first plan that needs it."""
_ENGINES_LOCK = threading.Lock()
_WARMING: dict[str, threading.Thread] = {}
"""The executors whose first plan runs in a thread of this worker (:func:`warm_gpu_worker`)."""


def on_gpu_worker(plans: list[answer.Plan], executor: str = "streaming") -> list[Any]:
    """Runs in a task on a GPU worker: the plans collected by cudf-polars' ``executor``
    (``in-memory`` or ``streaming``; raising where it cannot run one) in the worker's RMM
    memory; the answers in the metadata's library (cuDF)."""
    engine = _gpu_engine(executor)
    warming = _WARMING.get(executor)
    if warming is not None:  # its first plan runs once at a time
        warming.join()
    return [answer.build(p.lf.collect(engine=engine), p) for p in plans]


def warm_gpu_worker() -> None:
    """Runs in a task on a GPU worker when the session opens: cudf-polars imported and one
    small plan run in memory (the executor of a plan the GPU holds, rule ``engine.in-memory``),
    so that the user's first query does not pay for them; the streaming executor's first plan,
    which takes longer, then runs in a thread that no task waits for."""
    _first_plan("in-memory")
    _WARMING["streaming"] = t = threading.Thread(
        target=_first_plan, args=("streaming",), name="gpuscale-warm", daemon=True
    )
    t.start()


def _first_plan(executor: str) -> None:
    """One small plan on ``executor``; an error is left to the query that meets it."""
    with contextlib.suppress(Exception):
        pl.LazyFrame({"a": [1, 2]}).group_by("a").agg(pl.len()).collect(engine=_gpu_engine(executor))


def _gpu_engine(executor: str):
    with _ENGINES_LOCK:
        if executor not in _GPU_ENGINES:
            options: dict[str, Any] = {"raise_on_fail": True, "executor": executor}
            with contextlib.suppress(ImportError):
                import rmm

                options["memory_resource"] = rmm.mr.get_current_device_resource()
            _GPU_ENGINES[executor] = pl.GPUEngine(**options)
        return _GPU_ENGINES[executor]


class GpuWorkers:
    """cudf-polars' ``DaskEngine`` on the session's own client (its GPU workers keep the
    binding dask-cuda gave them), made by the first plan and shut down with the session."""

    def __init__(self, client):
        self.client = client
        self.engine = None

    def collect(self, plans: list[answer.Plan]) -> list[Any]:
        if self.engine is None:
            from cudf_polars.engine.dask import DaskEngine
            from cudf_polars.engine.hardware_binding import HardwareBindingPolicy

            self.engine = DaskEngine(
                dask_client=self.client,
                engine_options={
                    "raise_on_fail": True,
                    "hardware_binding": HardwareBindingPolicy(enabled=False),
                    # the cluster's layout is its owner's: where workers share a GPU, Dask's
                    # own work shares it too
                    "allow_gpu_sharing": True,
                },
            )
        return [answer.build(p.lf.collect(engine=self.engine), p) for p in plans]

    def close(self) -> None:
        if self.engine is not None:
            with contextlib.suppress(Exception):
                self.engine.shutdown()
            self.engine = None
