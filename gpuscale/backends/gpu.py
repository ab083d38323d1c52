"""The GPU family: CuPy arrays and cuDF frames on a ``dask_cuda.LocalCUDACluster``. Nothing
here imports a GPU library at module level. The measurements behind its knobs are in
docs/decisions.md, under the rule ids cited beside them.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading

from .. import _dask_compat, machine
from .convert import finished_by_type, to_host
from .family import Family, Knobs, LossyWriter

GiB = 2**30
GPU_INSTALL = "pip install 'gpuscale[gpu]'  (CuPy, cuDF, dask-cuda for CUDA 13)"


def _device_synchronize() -> None:
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def _synced(block):
    """The block, once its device has finished every queued kernel (runs inside the task that
    returns it)."""
    import cupy

    cupy.cuda.runtime.deviceSynchronize()
    return block


def _device_total_memory() -> int:
    import cupy

    return int(cupy.cuda.runtime.memGetInfo()[1])


def _device_watch(start: bool, dask_worker=None) -> dict:
    """On a GPU worker (``client.run``): start (``start=True``) or read what its device memory
    does in a run: the allocator's peak beyond what the worker held at the start, the bytes
    dask-cuda's buffers moved device -> host and host -> disk, and cuDF's spill totals. Never
    raises: a part that cannot be read is absent."""
    import sys

    state = dask_worker.__dict__.setdefault("_gpuscale_device_watch", {"moved": {}, "pushed": 0})
    out: dict = {}
    try:
        import rmm.mr

        stats = _statistics_adaptor()
        if start:
            if stats is None:  # none yet, or the device's resource was made again since
                rmm.mr.set_current_device_resource(
                    rmm.mr.StatisticsResourceAdaptor(rmm.mr.get_current_device_resource())
                )
                stats = _statistics_adaptor()
                state["pushed"] = 0
            while state["pushed"]:  # left by a run that ended in an error
                state["pushed"] -= 1
                with contextlib.suppress(IndexError):  # not on this adaptor: nothing to drop
                    stats.pop_counters()
            stats.push_counters()
            state["pushed"] += 1
        elif state["pushed"] and stats is not None:
            popped = stats.pop_counters()
            state["pushed"] -= 1
            out["peak_bytes"] = int(popped.peak_bytes)
            out["allocated_bytes"] = int(popped.total_bytes)
    except Exception as e:  # noqa: BLE001 - no RMM, or a resource that cannot take the adaptor
        out["allocator"] = f"not measured: {type(e).__name__}: {e}"[:200]
    moved = state["moved"]
    data = getattr(dask_worker, "data", None)
    for attr, label in (("device_buffer", "device_to_host_bytes"), ("host_buffer", "host_to_disk_bytes")):
        buf = getattr(data, attr, None)
        callbacks = getattr(buf, "fast_to_slow_callbacks", None)
        if callbacks is None:
            continue
        if label not in moved:
            moved[label] = 0
            weight = buf.weight

            def count(key, value, label=label, weight=weight):
                moved[label] += int(weight(key, value))

            callbacks.append(count)
        out[label] = moved[label]
    cudf = sys.modules.get("cudf")
    if cudf is not None:
        try:
            from cudf.core.buffer.spill_manager import get_global_manager

            mgr = get_global_manager()
            if mgr is not None:
                nbytes, secs = mgr.statistics.spill_totals.get(("gpu", "cpu"), (0, 0.0))
                out["cudf_device_to_host_bytes"], out["cudf_spill_s"] = int(nbytes), float(secs)
        except Exception:  # noqa: BLE001 - another cuDF: its spilling is not read
            pass
    return out


def _statistics_adaptor():
    """RMM's statistics adaptor anywhere in the worker's resource chain, or None."""
    import rmm.mr

    mr = rmm.mr.get_current_device_resource()
    for _ in range(16):
        if isinstance(mr, rmm.mr.StatisticsResourceAdaptor):
            return mr
        up = getattr(mr, "get_upstream", None)
        if up is None:
            return None
        mr = up()
    return None


class GpuFamily(Family):
    def probe(self) -> tuple[bool, str]:
        miss = self.missing()
        if miss:
            return False, f"{miss[0]} is not installed"

        n = len(machine.gpus())
        if n == 0:
            return False, "no CUDA GPU is visible (NVML reports none)"
        return True, f"{n} CUDA GPU(s) visible and CuPy + dask-cuda installed"

    def synchronize(self, client) -> None:
        client.run(_device_synchronize)

    def synchronized(self, collection):
        # the wait runs inside each output task (fused); other frames: None (rule ``gpu.synchronized``)
        import dask.array as da

        if isinstance(collection, da.Array):
            return collection.map_blocks(_synced, dtype=collection.dtype, meta=collection._meta)
        return _dask_compat.finished_by(collection, _synced)

    def worker_memory(self, client) -> dict[str, int]:
        return client.run(_device_total_memory)

    def device_watch(self, client, start: bool) -> dict[str, dict]:
        return client.run(_device_watch, start)

    def warm_workers(self, client, collection: str | None) -> None:
        # rule ``gpu.frame-kernels``: where the work's frames are cuDF's
        if self.frames_for(collection):
            client.run(_first_frames_in_thread)

    def first_here(self) -> None:
        super().first_here()
        first_frames()  # rule ``gpu.frame-kernels``


DIVIDED = ("float64", "float32", "int64", "int32", "uint8")
"""The column types whose divisions :func:`first_frames` runs."""


def first_frames() -> None:
    """cuDF's first uses that a query would otherwise pay (rule ``gpu.frame-kernels``): a small
    Parquet file read, then divisions. cuDF's division checks its divisors and results with
    CuPy kernels, which CuPy compiles on a machine's first use of each and keeps in its kernel
    cache (``CUPY_CACHE_DIR``); later processes load them. So the columns of the file (three
    rows, and none) are divided by one another and by a number, for each pair of
    :data:`DIVIDED` types, and a column of 65,536 flags is reduced by ``all`` and ``any`` (the
    two-pass reductions of columns over 1,024 rows). Errors are left to the query that meets
    them."""
    with contextlib.suppress(Exception):
        import cudf
        import cupy
        import pandas as pd

        with tempfile.TemporaryDirectory(prefix="gpuscale-") as folder:
            pd.DataFrame({d: pd.Series([1, 2, 3], dtype=d) for d in DIVIDED}).to_parquet(
                f"{folder}/0.parquet"
            )
            frame = cudf.read_parquet(f"{folder}/0.parquet")
        for part in (frame, frame.iloc[:0]):
            for a in DIVIDED:
                for b in DIVIDED:
                    part[a] / part[b]
                    part[a] // part[b]
                part[a] / 7.0
        flags = cupy.ones(1 << 16, dtype=bool)
        cupy.all(flags), cupy.any(flags)
        del flags
        cupy.get_default_memory_pool().free_all_blocks()


def _first_frames_in_thread() -> None:
    """Runs on each GPU worker as a session opens, and returns at once: :func:`first_frames` in
    a thread, which no task waits for."""
    threading.Thread(target=first_frames, name="gpuscale-warm", daemon=True).start()


FAMILY = GpuFamily(
    name="gpu",
    description="CuPy arrays + cuDF DataFrames on dask_cuda.LocalCUDACluster, one worker per GPU",
    names=("gpu", "cupy", "cudf"),
    array_backend="cupy",
    dataframe_backend="cudf",
    array_module="cupy",
    dataframe_module="cudf",
    cluster_kind="cuda",
    requires={"cupy": GPU_INSTALL, "dask_cuda": GPU_INSTALL, "pynvml": GPU_INSTALL},
    requires_dataframe={"cudf": GPU_INSTALL, "dask_cudf": GPU_INSTALL},
    knobs=Knobs(
        threads_per_worker={"array": 1, "dataframe": 1, "session": 1},
        # one task at a time per GPU: big blocks amortize the kernel launches
        chunk_bytes=1 * GiB,
        partition_bytes=1 * GiB,
        shuffle_method="tasks",  # rule ``shuffle.family``
        split_out_budget_bytes=8 * GiB,  # rule ``gpu.split-out-budget``
        split_every=None,
        groupby_concat_min_fraction=0.0,  # rule ``gpu.per-worker-groupby``
        rmm_pool_size=0.8,
        protocol=None,  # rule ``protocol.tcp``
        worker_environ={"ucx": {"DASK_DISTRIBUTED__COMM__OFFLOAD": "False"}},  # rule ``gpu.comm-offload``
        # rule ``gpu.device-spill``
        device_spill={"array": "dask-cuda", "dataframe": "dask-cuda", "session": "dask-cuda"},
        device_spill_reason=(
            "cuDF's spilling moved a 1.4 GB Parquet groupby at a 1 GB cap 2.9 x faster "
            "(0.80 s vs 2.31 s), but it is on for every run of the cluster, and a 100 M-row "
            "groupby that fits took 3.0-3.5 s with it against 0.043-0.059 s without"
        ),
        # rule ``gpu.session-pre-import``: a session's workers and client import cuDF as they start
        pre_import={
            "array": ("cupy",),
            "dataframe": ("cupy", "cudf", "dask_cudf"),
            "session": ("cupy", "cudf", "dask_cudf"),
        },
        fft_work_copies=3.0,  # rule ``memory.fft-work-copies``
        worker_growth_bytes=512 * 2**20,  # rule ``memory.worker-growth``
        read_keywords={"read_parquet": {"aggregate_files": True}},  # rule ``reads.family``
    ),
    auto_priority=10,
    nvtx_phases=True,
    memory="device",
    spill_to="host",  # dask-cuda: device -> host over cluster.device-memory-limit, then disk
    stream_first=(  # rule ``gpu.stream-first``
        "on an H200 at 3 x a capped device, spilling through dask-cuda took 48 x (svd) and 17 x "
        "(groupby) the in-memory time per byte, making the blocks again 0.75 x and 2.15 x"
    ),
    lossy_writers={
        "to_csv": LossyWriter(
            "cuDF's CSV writer keeps 9 significant digits of float64 values (rapidsai/cudf#6418)",
            ("float64",),
        )
    },
)


@finished_by_type.register_lazy("cupy")
@to_host.register_lazy("cupy")
def _register_cupy():
    import cupy

    @to_host.register(cupy.ndarray)
    def _cupy_to_host(x):
        return cupy.asnumpy(x)

    @finished_by_type.register(cupy.ndarray)
    def _cupy_finished(x):
        return _synced(x)


@to_host.register_lazy("cudf")
def _register_cudf():
    import cudf

    @to_host.register((cudf.DataFrame, cudf.Series, cudf.Index))
    def _cudf_to_host(x):
        return x.to_pandas()
