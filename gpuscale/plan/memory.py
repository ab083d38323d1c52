"""The memory rules of a cluster's plan: each worker's memory limit, where and from what share
of it workers spill, the RMM pool of GPU workers and how they spill device memory."""

from __future__ import annotations

import tempfile
from typing import Any

import dask.config
from dask.utils import format_bytes

from .. import memory
from ..decision import Decision


def memory_choice(resolved, value: int | None, auto_rule: str, host: int) -> Decision:
    """The memory limit per worker as chosen: ``value`` bytes; ``auto_rule`` (formatted with
    ``host`` = the machine's memory and ``value``) says how ``auto`` came to it."""
    setting = resolved.settings.cluster.memory_limit
    source = resolved.sources.get("cluster.memory-limit", "default")
    extra = {"setting": setting}
    if setting == "auto":
        rule = auto_rule.format(host=format_bytes(host), value=format_bytes(value or 0))
        return Decision(value, source, rule, "memory.auto", {"host_bytes": host}, extra)
    if value is None:
        return Decision(value, source, None, "memory.none", extra=extra)
    return Decision(
        value, source, f"{setting!r} = {format_bytes(value)} per worker", "memory.set", extra=extra
    )


def remote_memory_choice(resolved, each: str) -> Decision:
    """The memory limit of workers started on other hosts, as set: ``auto`` is Dask's default
    on ``each`` of them (``"host"``, ``"node"``), which this machine cannot work out."""
    setting = resolved.settings.cluster.memory_limit
    auto = setting == "auto"
    return Decision(
        setting,
        resolved.sources.get("cluster.memory-limit", "default"),
        f"auto: Dask's default on each {each}" if auto else None,
        "memory.host-default" if auto else "memory.set",
    )


def spill_choices(family, limit: int | None, threads: int, worker_config: dict) -> dict:
    """Where the workers spill and from what share of their memory (the spill target's rule is
    :func:`gpuscale.memory.target_fraction`); a lowered target goes into ``worker_config``
    (the spec's ``dask_config``, in force while the workers start)."""
    if family.spill_to is None:
        return {
            "spill_to": Decision(
                None, "family", f"the {family.name} family does not spill: data must fit", "spill.none"
            )
        }
    target, why = memory.target_fraction(limit, threads, family)
    if target is not None:
        worker_config["distributed.worker.memory.target"] = target
    directory = dask.config.get("temporary-directory", None)
    return {
        "spill_to": Decision(
            family.spill_to,
            "family",
            "distributed's spilling: managed data over the target "
            "goes to the worker's local directory, read back when a task needs it",
            "spill.disk",
        ),
        "memory_target_fraction": Decision(
            target if target is not None else dask.config.get("distributed.worker.memory.target"),
            "rule" if target is not None else "dask config",
            why,
            "spill.target" if target is not None else "spill.target-dask",
            {"limit_bytes": limit, "threads": threads},
        ),
        "spill_directory": Decision(
            directory or tempfile.gettempdir(),
            "dask config" if directory else "default",
            "temporary-directory (dask config; default the system's temp folder): each "
            "worker's local directory, where it spills, is made there",
            "spill.directory",
        ),
    }


def spilling_choice(family) -> Decision:
    """Where CPU workers on other hosts spill: their local directory, above the fractions of
    their memory limit in this process's Dask config, which the deploy target hands to them."""
    if family.spill_to is None:
        return Decision(
            None, "family", f"the {family.name} family does not spill: data must fit", "spill.none"
        )
    fractions = {
        k: dask.config.get(f"distributed.worker.memory.{k}")
        for k in ("target", "spill", "pause", "terminate")
    }
    return Decision(
        fractions,
        "dask config",
        f"{family.spill_to}: each worker's local directory on its host, above target x its memory "
        "limit (distributed.worker.memory.*, this process's Dask config)",
        "spill.remote",
    )


def rmm_pool(c, family) -> tuple[Any, dict[str, Any] | None]:
    """(the RMM pool per GPU worker, the spec's ``rmm`` entry) from the cluster settings ``c``
    (``auto``: the family's knob), for every kind that starts GPU workers; ``(None, None)``: no
    pool."""
    pool = c.rmm.pool_size
    source = "set by you"
    if pool == "auto":
        pool, source = family.knobs.rmm_pool_size, f"{family.name} family default (fraction of device memory)"
    if pool is None and c.rmm.allocator == "pool":
        return None, None
    return pool, {
        "pool_size": pool,
        "maximum_pool_size": c.rmm.maximum_pool_size,
        "external_libs": list(c.rmm.external_libs),
        "allocator": c.rmm.allocator,
        "source": source,
    }


def rmm_rule(rmm: dict[str, Any] | None, gpu_bytes: list[int] = ()) -> str | None:
    """How the RMM pool of the spec's ``rmm`` entry came about: its source, the size per GPU
    where it is a share of GPUs of known memory (``gpu_bytes``), and CUDA's async allocator
    where that is set; None without an entry."""
    if rmm is None:
        return None
    pool, rule = rmm["pool_size"], rmm["source"]
    if isinstance(pool, float) and pool <= 1 and gpu_bytes:
        smallest = min(gpu_bytes)
        rule += f": {pool:g} x {format_bytes(smallest)} = {format_bytes(int(pool * smallest))} per GPU"
    if rmm["allocator"] == "async":
        first = rule if pool is not None else "no initial pool"
        rule = f"{first}; CUDA's async allocator (cluster.rmm.allocator: async)"
    return rule


def rmm_choice(resolved, family, pool: Any = None, rule: str | None = None) -> Decision:
    """The RMM pool choice: ``pool`` as the cluster kind set it (None: no pool) and the rule
    it gave, else why there is none."""
    setting = resolved.settings.cluster.rmm.pool_size
    source = resolved.sources.get("cluster.rmm.pool-size", "default")
    if pool is not None:
        return Decision(pool, "family" if setting == "auto" else source, rule, "rmm.pool")
    if setting == "auto":
        return Decision(None, "family", f"the {family.name} family uses no RMM pool", "rmm.family-none")
    if setting is None:
        return Decision(None, source, "no pool (set by you)", "rmm.none")
    return Decision(
        None,
        source,
        f"{setting!r} was set, but the {family.name} family's cluster has no RMM pool",
        "rmm.unused",
    )


def device_limit_choice(resolved, gpu_bytes: list[int]) -> Decision:
    """Where GPU workers start spilling device -> host (dask-cuda's ``device_memory_limit``);
    ``gpu_bytes``: the memory of the workers' GPUs where known here, else []."""
    c = resolved.settings.cluster
    src = resolved.sources.get("cluster.device-memory-limit", "default")
    device = min(gpu_bytes) if gpu_bytes else None
    f = memory.device_spill_fraction(c.device_memory_limit, device)
    if f is None:
        return Decision(
            c.device_memory_limit, src, "no spilling: the data must fit the device", "device-limit.off"
        )
    at = f" = {format_bytes(int(f * device))} per GPU" if device else ""
    if src == "default":
        return Decision(
            "default",
            src,
            f"dask-cuda's default: task outputs spill device -> host above "
            f"{f:g} of the device{at} (then to disk past the host memory limit)",
            "device-limit.dask-cuda",
        )
    if device is None:
        return Decision(
            c.device_memory_limit,
            src,
            f"task outputs spill device -> host above {c.device_memory_limit}",
            "device-limit.set",
        )
    return Decision(
        c.device_memory_limit,
        src,
        f"task outputs spill device -> host above {f:.3g} of the device{at}",
        "device-limit.set",
    )


SPILL_WAYS = {
    "dask-cuda": "dask-cuda moves whole task outputs device -> host over the device memory limit",
    "cudf": "cuDF spills single device buffers, also inside a running task, over the device memory "
    "limit (enable_cudf_spill), on top of dask-cuda's whole task outputs; CuPy arrays are not "
    "cuDF's buffers",
}


def device_spill_choice(resolved, family, collection, gpu_bytes: list[int]) -> Decision:
    """How GPU workers spill (``cluster.device-spill``; auto: the family's knob for the work's
    collection), or that they do not (``--device-memory-limit 0``)."""
    c = resolved.settings.cluster
    src = resolved.sources.get("cluster.device-spill", "default")
    if memory.device_spill_fraction(c.device_memory_limit, min(gpu_bytes) if gpu_bytes else None) is None:
        return Decision("off", "rule", "--device-memory-limit 0: nothing spills", "device-spill.off")
    if c.device_spill != "auto":
        return Decision(c.device_spill, src, SPILL_WAYS[c.device_spill], "device-spill.set")
    key = collection or "session"
    way = family.knobs.device_spill.get(key, "dask-cuda")
    why = family.knobs.device_spill_reason if key != "array" else ""  # cuDF spills frames, not CuPy arrays
    return Decision(
        way,
        "family",
        f"{family.name} family for {key} work: {SPILL_WAYS[way]}" + (f" (measured: {why})" if why else ""),
        "device-spill.family",
    )
