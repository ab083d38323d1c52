"""``distributed.LocalCluster``: the CPU family's cluster."""
from __future__ import annotations

import logging

from dask.utils import format_bytes

from .. import machine
from ..choices import choice
from ..errors import UserError
from . import ClusterSpec, construct, rmm_choice

logger = logging.getLogger(__name__)


def memory_bytes(limit, threads: int, cores: int) -> int | None:
    """Per-worker bytes of a memory-limit setting, as distributed reads it."""
    from distributed.worker_memory import parse_memory_limit
    try:
        return parse_memory_limit(limit, threads, cores, logger=logger)
    except (ValueError, TypeError):
        raise UserError(f"invalid memory limit {limit!r}",
                        "use auto, a byte count, a size like '8GB', or a fraction like 0.5") from None


def memory_choice(resolved, value: int | None, auto_rule: str) -> dict:
    """The memory limit per worker as chosen: ``value`` bytes; ``auto_rule`` (formatted with
    ``host`` = this machine's memory and ``value``) says how ``auto`` came to it."""
    setting = resolved.settings.cluster.memory_limit
    source = resolved.sources.get("cluster.memory-limit", "default")
    if setting == "auto":
        rule = auto_rule.format(host=format_bytes(machine.cpu()["memory_bytes"]), value=format_bytes(value or 0))
        return choice(value, source, rule, setting=setting)
    return choice(value, source, None if value is None else f"{setting!r} = {format_bytes(value)} per worker",
                  setting=setting)


def layout(settings, family, collection, cores: int) -> tuple[int, int, str]:
    """(workers, threads per worker, why) on ``cores`` cores: the family's rule
    (:meth:`gpuscale.backends.family.Family.worker_layout`) with what the user set."""
    c = settings.cluster
    return family.worker_layout(collection, cores, 0, workers=c.workers, threads=c.threads_per_worker)


def spec(resolved, family, collection, proto) -> ClusterSpec:
    settings, src = resolved.settings, resolved.sources
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
    limit = memory_bytes(c.memory_limit, threads, cores)
    family_threads = family.knobs.threads_per_worker.get(collection or "session")
    choices = {
        "protocol": choice(proto.name, src.get("protocol", "default")),
        "transports": proto.transports_choice(c.ucx, {}, src),
        "workers": choice(workers, src.get("cluster.workers", "flag"), None) if c.workers is not None
        else choice(workers, "rule", why),
        "threads_per_worker": choice(threads, src.get("cluster.threads-per-worker", "flag"), None)
        if c.threads_per_worker is not None else choice(threads, "family" if family_threads is not None
                                                        else "rule", why),
        "memory_limit": memory_choice(resolved, limit, "auto: this machine's {host} x min(1, "
                                      f"{threads} thread(s) / {cores} core(s)) = {{value}} per worker "
                                      "(distributed's rule)"),
        "rmm_pool_size": rmm_choice(resolved, family),
    }
    return ClusterSpec(
        kind="local", cls="distributed.LocalCluster", family=family.name, protocol=proto.name,
        workers=workers, threads_per_worker=threads, memory_limit=c.memory_limit,
        memory_limit_bytes=limit, dashboard_address=c.dashboard_address, notes=notes, kwargs=kwargs,
        choices=choices)


def start(spec: ClusterSpec, security=None):
    from distributed import Client, LocalCluster
    from . import security as tls
    kwargs = dict(spec.kwargs)
    if spec.security == "tls":
        kwargs["security"] = security or tls.temporary()
    cluster = construct(spec, lambda: LocalCluster(**kwargs))
    try:
        return cluster, Client(cluster)
    except BaseException:
        cluster.close()
        raise
