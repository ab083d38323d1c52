"""Where translated plans run: Polars' streaming engine in this process (:func:`on_cpu`),
cudf-polars in a task on the session's GPU worker (:func:`on_gpu_worker`), or cudf-polars'
``DaskEngine`` over the session's GPU workers (:class:`GpuWorkers`). Each returns Dask's
answers (:func:`gpuscale.engines.answer.build`), in the library of the collection's metadata."""

from __future__ import annotations

import contextlib
from typing import Any

import polars as pl

from . import answer


def on_cpu(plans: list[answer.Plan]) -> list[Any]:
    """The plans collected together (a sub-plan they share runs once) on Polars' streaming
    engine, on all of this process's cores."""
    results = pl.collect_all([p.lf for p in plans], engine="streaming")
    return [answer.build(r, p) for r, p in zip(results, plans)]


_GPU_ENGINE: list = []
"""The GPU engine of this worker process, made by its first plan."""


def on_gpu_worker(plans: list[answer.Plan]) -> list[Any]:
    """Runs in a task on a GPU worker: the plans collected by cudf-polars (raising where it
    cannot run one) in the worker's RMM memory; the answers in the metadata's library (cuDF)."""
    engine = _gpu_engine()
    return [answer.build(p.lf.collect(engine=engine), p) for p in plans]


def warm_gpu_worker() -> None:
    """Runs in a task on a GPU worker when the session opens: cudf-polars imported and one
    small plan run, so that the user's first query does not pay for them."""
    pl.LazyFrame({"a": [1, 2]}).group_by("a").agg(pl.len()).collect(engine=_gpu_engine())


def _gpu_engine():
    if not _GPU_ENGINE:
        options: dict[str, Any] = {"raise_on_fail": True}
        with contextlib.suppress(ImportError):
            import rmm

            options["memory_resource"] = rmm.mr.get_current_device_resource()
        _GPU_ENGINE.append(pl.GPUEngine(**options))
    return _GPU_ENGINE[0]


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
                },
            )
        return [answer.build(p.lf.collect(engine=self.engine), p) for p in plans]

    def close(self) -> None:
        if self.engine is not None:
            with contextlib.suppress(Exception):
                self.engine.shutdown()
            self.engine = None
