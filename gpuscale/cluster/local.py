"""``distributed.LocalCluster``: the CPU family's cluster."""
from __future__ import annotations

import logging

from distributed.deploy.utils import nprocesses_nthreads

from .. import machine
from ..errors import UserError
from . import ClusterSpec, construct

logger = logging.getLogger(__name__)


def memory_bytes(limit, threads: int, cores: int) -> int | None:
    """Per-worker bytes of a memory-limit setting, as distributed reads it."""
    from distributed.worker_memory import parse_memory_limit
    try:
        return parse_memory_limit(limit, threads, cores, logger=logger)
    except (ValueError, TypeError):
        raise UserError(f"invalid memory limit {limit!r}",
                        "use auto, a byte count, a size like '8GB', or a fraction like 0.5") from None


def layout(settings, family, collection, cores: int) -> tuple[int, int, str]:
    """(workers, threads per worker, why) on ``cores`` cores."""
    c = settings.cluster
    if c.workers and c.threads_per_worker:
        return c.workers, c.threads_per_worker, "set by you"
    if c.workers:
        return c.workers, max(1, cores // c.workers), "workers set by you, threads fill the cores"
    if c.threads_per_worker:
        return max(1, cores // c.threads_per_worker), c.threads_per_worker, \
            "threads set by you, workers fill the cores"
    workers, threads = family.worker_layout(collection, cores, 0)
    if not workers:
        workers, threads = nprocesses_nthreads(cores)
        return workers, threads, f"distributed's default split of {cores} cores"
    return workers, threads, (f"{family.name} family for {collection or 'session'} work: "
                              f"{threads} thread(s) per worker on {cores} cores")


def plan(settings, family, collection, proto) -> ClusterSpec:
    cores = machine.usable_cores()
    workers, threads, why = layout(settings, family, collection, cores)
    c = settings.cluster
    notes = [f"layout: {why}"]
    if any(v is not None for v in (c.ucx.nvlink, c.ucx.infiniband, c.ucx.rdmacm)):
        notes.append("UCX transport switches apply to GPU clusters only; ignored here")
    kwargs = {"n_workers": workers, "threads_per_worker": threads, "processes": True,
              "memory_limit": c.memory_limit, "protocol": proto.name,
              "dashboard_address": c.dashboard_address}
    if proto.bind_host:
        kwargs["host"] = proto.bind_host
    return ClusterSpec(
        kind="local", cls="distributed.LocalCluster", family=family.name, protocol=proto.name,
        workers=workers, threads_per_worker=threads, memory_limit=c.memory_limit,
        memory_limit_bytes=memory_bytes(c.memory_limit, threads, cores),
        dashboard_address=c.dashboard_address, notes=notes, kwargs=kwargs)


def start(spec: ClusterSpec):
    from distributed import Client, LocalCluster
    cluster = construct(spec, lambda: LocalCluster(**spec.kwargs))
    try:
        return cluster, Client(cluster)
    except BaseException:
        cluster.close()
        raise
