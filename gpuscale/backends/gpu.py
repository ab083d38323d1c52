"""The GPU family: CuPy arrays and cuDF frames on a ``dask_cuda.LocalCUDACluster``.

Nothing here imports a GPU library at module level; the functions that run on workers
import CuPy when they run.
"""

from __future__ import annotations

from .. import _dask_compat
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
    """On a GPU worker (``client.run``): start or read what its device memory does in a run.

    * the allocator's peak: RMM's statistics adaptor (``rmm.statistics``, enabled on the
      worker's current device resource the first time; a counter pushed at the start, popped at
      the read, so its peak is the most the run had allocated at once beyond what the worker
      held before it; CuPy allocates through RMM on gpuscale's workers);
    * dask-cuda's spilling: bytes its device buffer moved device -> host and its host buffer
      host -> disk (counted by callbacks zict's ``Buffer`` calls for every key it moves);
    * cuDF's spilling (``--device-spill cudf``): its spill manager's totals (bytes, seconds).
    Nothing here raises: a part that cannot be read is absent."""
    import sys

    state = dask_worker.__dict__.setdefault("_gpuscale_device_watch", {"moved": {}, "pushed": 0})
    out: dict = {}
    try:
        import rmm.mr

        stats = _statistics_adaptor()
        if start:
            if stats is None:
                rmm.mr.set_current_device_resource(
                    rmm.mr.StatisticsResourceAdaptor(rmm.mr.get_current_device_resource())
                )
                stats = _statistics_adaptor()
            while state["pushed"]:  # a run that ended in an error never read its counter
                stats.pop_counters()
                state["pushed"] -= 1
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
    """RMM's statistics adaptor in the worker's resource chain (cuDF's spilling may have put
    its own adaptor above it since), or None."""
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
        from .. import machine

        n = len(machine.gpus())
        if n == 0:
            return False, "no CUDA GPU is visible (NVML reports none)"
        return True, f"{n} CUDA GPU(s) visible and CuPy + dask-cuda installed"

    def synchronize(self, client) -> None:
        client.run(_device_synchronize)

    def synchronized(self, collection):
        # Arrays: one more function in each output block's task, fused into it by Dask's
        # blockwise fusion, so the timed wait ends with the device's work and synchronize()'s
        # round trip is saved. Frames that can put a function inside their output tasks (the
        # one-task routes, :func:`gpuscale._dask_compat.finished_by`): the same. Other frames:
        # not done, measured slower on an H200 (shape_grid.py, same machine: groupby at 10 M
        # rows 0.027-0.029 s with a wrapper task against 0.020-0.022 s with the round trip)
        import dask.array as da

        if isinstance(collection, da.Array):
            return collection.map_blocks(_synced, dtype=collection.dtype, meta=collection._meta)
        return _dask_compat.finished_by(collection, _synced)

    def worker_memory(self, client) -> dict[str, int]:
        return client.run(_device_total_memory)

    def device_watch(self, client, start: bool) -> dict[str, dict]:
        return client.run(_device_watch, start)


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
        # Big blocks: a GPU runs one task at a time, and large GEMMs / groupbys amortize launches.
        chunk_bytes=1 * GiB,
        partition_bytes=1 * GiB,
        # The task-based shuffle keeps cuDF partitions on the device; P2P goes through host memory.
        shuffle_method="tasks",
        # One GPU runs one task at a time, so splitting a groupby result gives no parallelism:
        # on an H200 (workflows/shape_grid.py), 100 M rows / 50 M keys took 0.33 s split over 3
        # partitions by the task shuffle and 0.15 s in one (plain Dask, repartition(1)); 400 M
        # rows / 200 M keys (a 6.4 GB result) 0.99 s against 0.51 s. Results up to 8 GiB stay in
        # one partition.
        split_out_budget_bytes=8 * GiB,
        split_every=None,  # one combine step: partials are few and the device is fast
        # Dask's tree reduction costs ~65 ms more than the aggregation at 10 M rows on an H200
        # (1 partition: 0.071 s; cuDF alone 0.005 s), per-worker's one task 0.026 s; at 100 M rows
        # / 10 keys tree 0.09-0.11 s, cuDF alone 0.029 s (workflows/shape_grid.py --explore).
        groupby_concat_min_fraction=0.0,
        rmm_pool_size=0.8,
        # TCP under `protocol: auto`; why not UCX yet: rule protocol.tcp in docs/decisions.md
        protocol=None,
        # workflows/p2p_wire.py on 2 x H200 (NVLink): a worker's receive of a 1 GiB CuPy block
        # over ucx took 5.2 ms with distributed's comm offload (deserializing in a thread) and
        # 3.9 ms without it, 64 MiB 2.5 ms and 1.3 ms (UCX alone: 2.8 ms and 0.23 ms)
        worker_environ={"ucx": {"DASK_DISTRIBUTED__COMM__OFFLOAD": "False"}},
        # dask-cuda's everywhere (cuDF spills frames only, and costs every run: the reason below)
        device_spill={"array": "dask-cuda", "dataframe": "dask-cuda", "session": "dask-cuda"},
        # measured on an H200 (workflows/spill_gpu.py, shape_grid.py; docs/bench-h200/device-spill)
        device_spill_reason=(
            "cuDF's spilling moved a 1.4 GB Parquet groupby at a 1 GB cap 2.9 x faster "
            "(0.80 s vs 2.31 s), but it is on for every run of the cluster, and a 100 M-row "
            "groupby that fits took 3.0-3.5 s with it against 0.043-0.059 s without"
        ),
        pre_import={"array": ("cupy",), "dataframe": ("cupy", "cudf", "dask_cudf"), "session": ("cupy",)},
        # CuPy's FFT of a real block first makes a complex copy (2 x the block), and cuFFT's
        # work area is as large again as the output: the device allocator's peak on an H200 was
        # 7 x the real input of a one-chunk 4096 x 4096 and 8192 x 4096 transform, against the
        # 4 x counted without them (workflows/memory_estimate.py --backend gpu --scale 4)
        fft_work_copies=3.0,
        # device memory a worker holds beyond its chunks: the CUDA context, cuBLAS / cuDF
        # workspaces (assumed: the device's baseline is not measured yet)
        worker_growth_bytes=512 * 2**20,
    ),
    auto_priority=10,
    nvtx_phases=True,
    memory="device",
    # dask-cuda spills task outputs device -> host above cluster.device-memory-limit (its
    # default 0.8 of the device), and host -> disk past the host memory limit
    spill_to="host",
    # workflows/spill_gpu.py on an H200: capped at 8 GB, svd at 3 x the cap spilled through
    # dask-cuda at 48 x the in-memory time per byte (~2.5 GB/s device <-> host), groupby 17 x;
    # capped at 2 GB and streamed, 0.75 x and 2.15 x (docs/benchmarks/larger-than-memory.md)
    stream_first=(
        "on an H200 at 3 x a capped device, spilling through dask-cuda took 48 x (svd) and 17 x "
        "(groupby) the in-memory time per byte, making the blocks again 0.75 x and 2.15 x"
    ),
    # cuDF writes float64 in CSV with 9 significant digits (rapidsai/cudf#6418, open since 2020):
    # read back, the data is not the data. pandas writes the shortest text that reads back exact.
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
