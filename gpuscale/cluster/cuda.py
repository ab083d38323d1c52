"""``dask_cuda.LocalCUDACluster``: the GPU family's cluster, one worker per GPU."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
import warnings

from dask.utils import format_bytes

from .. import machine
from ..errors import UserError
from ..plan.cluster import gpu_bytes
from ..plan.memory import rmm_pool
from ..wire import messages, protocols
from . import ClusterSpec, spec_for, worker_preloads
from .kind import Kind
from .local import start_here


def pool_bytes(pool, total_bytes: int) -> int | None:
    """What an RMM pool setting (a fraction, a size or bytes) asks of one GPU, in bytes; None: no pool."""
    if pool is None:
        return None
    if isinstance(pool, str):
        from dask.utils import parse_bytes

        pool = parse_bytes(pool)
    pool = float(pool)
    return int(pool * total_bytes) if pool <= 1 else int(pool)


EXIT_WAIT_S = 30.0
"""How long closing a GPU cluster waits for its worker processes to exit."""


def worker_pids(cluster) -> list[int]:
    """The process ids of a local cluster's worker processes (``Nanny.pid``: its child)."""
    pids = [getattr(w, "pid", None) for w in list(getattr(cluster, "workers", {}).values())]
    return [p for p in pids if isinstance(p, int) and p > 0]


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # gone (or no longer ours to see)
        return False


def wait_exited(pids: list[int], timeout: float = EXIT_WAIT_S) -> list[int]:
    """Wait until the processes ``pids`` have exited, at most ``timeout`` seconds; those still
    running. A GPU worker's device memory is free only once its process is gone."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _running(p)]
    return left


def close_and_wait(cluster, timeout: float = EXIT_WAIT_S) -> list[int]:
    """Close a local GPU cluster and wait for its worker processes to exit, also when the close
    fails; those still running after ``timeout`` are killed, and returned."""
    import psutil

    pids = worker_pids(cluster)
    try:
        cluster.close()
    finally:
        left = wait_exited(pids, timeout)
        for pid in left:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
    return left


_KEEPS_SENT_MEMORY: set[str] = set()
"""Protocols of the GPU clusters this process started that leave a worker's device memory mapped here."""


def check_free_memory(spec: ClusterSpec, gpus: list[dict]) -> None:
    """Refuse (UserError) a selected GPU with less free memory than the RMM pool asks."""
    if not spec.rmm:
        return

    for g in gpus:
        if g["index"] not in spec.gpus or g.get("free_bytes") is None:
            continue
        want = pool_bytes(spec.rmm["pool_size"], g["memory_bytes"])
        if want is not None and want > g["free_bytes"]:
            who, mine = held_by(machine.holders(g["index"]), os.getpid())
            raise UserError(
                f"GPU {g['index']} has {format_bytes(g['free_bytes'])} free of "
                f"{format_bytes(g['memory_bytes'])} "
                f"({who}), but the RMM pool asks {format_bytes(want)} "
                f"(pool size {spec.rmm['pool_size']!r}, {spec.rmm['source']})",
                _free_memory_fix(mine, sorted(_KEEPS_SENT_MEMORY)),
            )


def _free_memory_fix(mine: bool, kept_by: list[str]) -> str:
    """The fix of a refused GPU: what holds it decides what to do first."""
    if mine and kept_by:
        first = (
            f"a {'/'.join(p.upper() for p in kept_by)} cluster earlier in this process left its "
            "workers' device memory mapped here, until this process exits: start this cluster in a "
            "new Python process (or keep one cluster open for all the work); "
        )
    elif mine:
        first = "let go of what this process keeps on the GPU, or start a new Python process; "
    else:
        first = "free that GPU (nvidia-smi lists who holds it), "
    return (
        first + "pick others with --gpus, use the running cluster with --scheduler, or set a "
        "smaller pool with --rmm-pool-size"
    )


def held_by(holders: list[tuple[int, int]], own_pid: int) -> tuple[str, bool]:
    """Who holds a GPU's memory, in words, and whether this process (``own_pid``) holds the most."""
    if not holders:
        return "another process holds the rest", False
    top_pid, top = max(holders, key=lambda h: h[1])
    mine = top_pid == own_pid and top > 0
    parts = [
        f"{'this process' if pid == own_pid else f'process {pid}'} holds {format_bytes(b)}"
        for pid, b in sorted(holders, key=lambda h: -h[1])[:3]
        if b > 0
    ]
    return ("; ".join(parts) or "another process holds the rest"), mine


def _client_spills_like_workers(workers_spill: bool) -> None:
    """This process's cuDF spilling set as the workers': a cuDF frame pickles with its buffers'
    kind, and the other side rebuilds it only if it spills the same way."""
    if not workers_spill and "cudf" not in sys.modules:
        return
    import cudf
    from cudf.core.buffer import spill_manager

    if cudf.get_option("spill") != workers_spill:
        cudf.set_option("spill", workers_spill)
    have = spill_manager.get_global_manager() is not None
    if workers_spill and not have:  # cuDF made its manager (none) on first use
        spill_manager.set_global_manager(spill_manager.SpillManager())
    elif have and not workers_spill:
        with warnings.catch_warnings():  # "overwriting non-empty manager": frames keep theirs
            warnings.simplefilter("ignore")
            spill_manager.set_global_manager(None)


STARTED_WAIT_S = 10
"""A GPU worker that has not joined this long after LocalCUDACluster returned has failed."""


def _all_started(client, spec: ClusterSpec) -> None:
    """Refuse in one line a cluster missing a worker that failed to start (dask-cuda only logs it)."""
    if not spec.workers:
        return
    try:
        client.wait_for_workers(spec.workers, timeout=STARTED_WAIT_S)
    except TimeoutError:
        started = len(client.scheduler_info(n_workers=-1)["workers"])
        raise UserError(
            f"{spec.workers - started} of {spec.workers} GPU worker(s) failed to start (the "
            "workers' error is in the log: run again with --debug to see it)",
            "check the GPUs and the CUDA stack with `gpuscale info`, and the workers' "
            "settings with `gpuscale cluster show`",
        ) from None


class Cuda(Kind, name="cuda", cluster_class="dask_cuda.LocalCUDACluster"):
    """``dask_cuda.LocalCUDACluster``: one worker per selected GPU of this machine."""

    def spec(self, plan) -> ClusterSpec:
        resolved, family, proto = plan.resolved, plan.family, plan.transport
        c = resolved.settings.cluster
        gpus = list(plan.gpus.value)
        pool, rmm = rmm_pool(c, family)
        kwargs = {
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)) or None,
            "n_workers": plan.layout.workers.value or None,
            "threads_per_worker": plan.layout.threads.value,
            "memory_limit": c.memory_limit,
            "dashboard_address": plan.dashboard.value,
            **proto.transport_kwargs(c.ucx),
        }
        if pool is not None:
            kwargs["rmm_pool_size"] = pool
            if c.rmm.maximum_pool_size is not None:
                kwargs["rmm_maximum_pool_size"] = c.rmm.maximum_pool_size
        if rmm is not None and rmm["allocator"] == "async":
            kwargs["rmm_async"] = True
        if rmm is not None and c.rmm.external_libs:
            kwargs["rmm_allocator_external_lib_list"] = list(c.rmm.external_libs)
        knobs = plan.gpu_knobs
        kwargs.update(knobs.options)
        pre = list(family.knobs.pre_import.get(plan.collection or "session", ()))
        if pre:
            kwargs["pre_import"] = pre

        choices = self.choices(
            plan,
            plan.layout.workers,
            plan.memory_limit,
            where={"gpus": plan.gpus},
            transports=knobs.transports,
            rmm=rmm,
            gpu_bytes=gpu_bytes(plan.facts, plan.gpus),
            rest=knobs.choices,
        )
        return spec_for(
            self,
            plan,
            workers=len(gpus),
            memory_limit_bytes=plan.memory_limit.value,
            gpus=gpus,
            transports=knobs.transports or {"selection": proto.transport_label()},
            rmm=rmm,
            pre_import=pre,
            notes=list(plan.notes),
            kwargs=kwargs,
            dask_config=dict(knobs.dask_config),
            choices=choices,
        )

    def start(self, spec: ClusterSpec, security=None):
        if not spec.gpus:
            raise UserError("no GPU is visible to start a LocalCUDACluster", "use --backend cpu (or auto)")
        check_free_memory(spec, machine.gpus())
        from dask_cuda import LocalCUDACluster

        if protocols.get(spec.protocol).keeps_sent_device_memory():
            _KEEPS_SENT_MEMORY.add(spec.protocol)

        def ready(client):
            _all_started(client, spec)
            messages.apply_workers(client, spec.message_interval)
            _client_spills_like_workers(bool(spec.kwargs.get("enable_cudf_spill")))

        # dask-cuda gives its workers preload=[..., "dask_cuda.initialize"], which overrides
        # distributed.worker.preload: gpuscale's go in as the keyword, ahead of dask-cuda's
        given = {**spec.kwargs, "preload": [*worker_preloads(spec), *spec.kwargs.get("preload", [])]}
        if "pre_import" in given:  # dask-cuda's workers fail to start on a module they cannot import
            given["pre_import"] = [m for m in given["pre_import"] if _installed(m)]
        return start_here(spec.model_copy(update={"kwargs": given}), LocalCUDACluster, security, ready)

    def close(self, spec: ClusterSpec, cluster) -> None:
        close_and_wait(cluster)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module.partition(".")[0]) is not None
