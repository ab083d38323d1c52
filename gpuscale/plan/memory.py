"""The memory rules of a cluster's plan: memory limits, spilling, and GPU workers' RMM pools."""

from __future__ import annotations

import logging
import tempfile
from typing import Any

import dask.config
from dask.utils import format_bytes, parse_bytes

from .. import _dask_compat, machine, memory
from ..decision import Decision
from ..errors import UserError


def memory_choice(resolved, value: int | None, auto_rule: str, host: int) -> Decision:
    """The memory limit per worker as chosen: ``value`` bytes; ``auto_rule`` says how ``auto`` came to it."""
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
    """The memory limit of workers started on other hosts, as set (``auto``: Dask's default on ``each``)."""
    setting = resolved.settings.cluster.memory_limit
    auto = setting == "auto"
    return Decision(
        setting,
        resolved.sources.get("cluster.memory-limit", "default"),
        f"auto: Dask's default on each {each}" if auto else None,
        "memory.host-default" if auto else "memory.set",
    )


def spill_choices(family, limit: int | None, threads: int, worker_config: dict) -> dict:
    """Where the workers spill and from what share of their memory; a lowered spill target
    (:func:`gpuscale.memory.target_fraction`) goes into ``worker_config``."""
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
    """Where CPU workers on other hosts spill, above the fractions in this process's Dask config."""
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
    (``auto``: the family's knob); ``(None, None)``: no pool."""
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
    """How the RMM pool of the spec's ``rmm`` entry came about (``gpu_bytes``: for its size per
    GPU); None without an entry."""
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
    """The RMM pool choice: ``pool`` as the cluster kind set it and its ``rule``, else why there is none."""
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
    """Where GPU workers start spilling device -> host (``gpu_bytes``: their GPUs' memory, if known)."""
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
    above = c.device_memory_limit if device is None else f"{f:.3g} of the device{at}"
    return Decision(
        c.device_memory_limit, src, f"task outputs spill device -> host above {above}", "device-limit.set"
    )


SPILL_WAYS = {
    "dask-cuda": "dask-cuda moves whole task outputs device -> host over the device memory limit",
    "cudf": "cuDF spills single device buffers, also inside a running task, over the device memory "
    "limit (enable_cudf_spill), on top of dask-cuda's whole task outputs; CuPy arrays are not "
    "cuDF's buffers",
}


def device_spill_choice(resolved, family, collection, gpu_bytes: list[int]) -> Decision:
    """How GPU workers spill (``cluster.device-spill``; auto: the family's knob), or that they do not."""
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


MIN_WORKER_BYTES = 256 * 2**20
"""A worker's memory limit below this is refused (distributed would pause / restart it at once)."""
MAX_WORKERS_PER_CORE = 4
MAX_THREADS_PER_WORKER = 64
MAX_THREADS_PER_CORE = 16
MEMORY_LIMIT_FORMS = (
    "use auto, a size with a unit like '8GB', a whole number of bytes, or a fraction "
    "0 < f <= 1 of this machine's memory like 0.5"
)


def memory_setting(limit):
    """The memory-limit setting in the form distributed reads, or a UserError: a number is a
    fraction of this machine's memory when 0 < f <= 1, a byte count when whole and > 1 (0: no
    limit); other numbers, negative sizes and sizes over the machine's memory are refused."""
    if limit is None or (isinstance(limit, str) and limit.strip().lower() == "auto"):
        return limit
    if isinstance(limit, bool):
        raise UserError(f"invalid memory limit {limit!r}", MEMORY_LIMIT_FORMS)
    number = limit
    if isinstance(limit, str):
        try:
            number = float(limit)
        except ValueError:
            number = None
    if isinstance(number, (int, float)):
        if number < 0 or number != number:
            raise UserError(f"memory limit {limit!r} is negative", MEMORY_LIMIT_FORMS)
        if number == 0:  # distributed's "no limit"
            return 0
        if number <= 1:
            return float(number)
        if not float(number).is_integer():
            raise UserError(
                f"memory limit {limit!r} is neither a fraction (0 < f <= 1) nor a whole number of bytes",
                MEMORY_LIMIT_FORMS,
            )
        return int(number)
    try:
        n = parse_bytes(limit)
    except (ValueError, TypeError):
        raise UserError(f"invalid memory limit {limit!r}", MEMORY_LIMIT_FORMS) from None
    if n < 0:
        raise UserError(f"memory limit {limit!r} is negative", MEMORY_LIMIT_FORMS)
    host = machine.cpu()["memory_bytes"]
    if n > host:
        raise UserError(
            f"memory limit {limit!r} is more than this machine's {format_bytes(host)}", MEMORY_LIMIT_FORMS
        )
    return limit


def memory_bytes(limit, threads: int, cores: int) -> int | None:
    """Per-worker bytes of a memory-limit setting, as distributed reads it; refused when it is
    not one of :data:`MEMORY_LIMIT_FORMS`, below :data:`MIN_WORKER_BYTES` or over the machine's."""
    setting = memory_setting(limit)
    try:
        value = _dask_compat.memory_limit_bytes(setting, threads, cores, logging.getLogger(__name__))
    except (ValueError, TypeError):
        raise UserError(f"invalid memory limit {limit!r}", MEMORY_LIMIT_FORMS) from None
    if value is None:
        return None
    host = machine.cpu()["memory_bytes"]
    if value < MIN_WORKER_BYTES:
        raise UserError(
            f"memory limit {limit!r} gives each worker {format_bytes(value)}, less than the "
            f"{format_bytes(MIN_WORKER_BYTES)} a worker needs",
            MEMORY_LIMIT_FORMS,
        )
    if value > host:
        raise UserError(
            f"memory limit {limit!r} gives each worker {format_bytes(value)}, more than this "
            f"machine's {format_bytes(host)}",
            MEMORY_LIMIT_FORMS,
        )
    return value


def check_layout(workers: int, threads: int, cores: int, host: int) -> None:
    """Refuse, before anything starts, a layout a machine of ``cores`` usable cores and
    ``host`` bytes of memory cannot hold (the limits ``MAX_*`` and :data:`MIN_WORKER_BYTES`)."""
    most = max(1, min(MAX_WORKERS_PER_CORE * cores, host // MIN_WORKER_BYTES))
    if workers > most:
        raise UserError(
            f"--workers {workers} is more than this machine holds ({cores} usable core(s), "
            f"{format_bytes(host)}: at most {most} worker processes)",
            f"use --workers {most} or fewer, or leave it unset",
        )
    if threads > MAX_THREADS_PER_WORKER:
        raise UserError(
            f"--threads-per-worker {threads} is more than a worker can use (at most "
            f"{MAX_THREADS_PER_WORKER})",
            f"use --threads-per-worker {min(MAX_THREADS_PER_WORKER, cores)} or fewer, or leave it unset",
        )
    if workers * threads > MAX_THREADS_PER_CORE * cores:
        raise UserError(
            f"{workers} worker(s) x {threads} thread(s) is more than this machine holds "
            f"({cores} usable core(s): at most {MAX_THREADS_PER_CORE * cores} threads in all)",
            "use fewer --workers or --threads-per-worker, or leave them unset",
        )


def check_total(workers: int, limit: int | None, host: int) -> None:
    """Refuse (UserError) worker limits that add up to more than ``host`` bytes of memory."""
    if limit and workers * limit > host:
        raise UserError(
            f"{workers} worker(s) x {format_bytes(limit)} (--memory-limit) is "
            f"{format_bytes(workers * limit)}, more than this machine's {format_bytes(host)}",
            f"use --memory-limit {format_bytes(host // workers)} or less, fewer --workers, or "
            "--memory-limit auto",
        )


def memory_limit_choice(resolved, kind: str, layout, facts, gpus: Decision | None) -> Decision | None:
    """The memory limit of each worker of a ``local`` or ``cuda`` cluster, after refusing a
    layout or limits the machine cannot hold; None for other kinds."""
    c, host = resolved.settings.cluster, facts.memory_bytes
    if kind == "local":
        workers, threads, cores = layout.workers.value, layout.threads.value, layout.cores
        check_layout(workers, threads, cores, host)
        limit = memory_bytes(c.memory_limit, threads, cores)
        if c.memory_limit != "auto":
            check_total(workers, limit, host)
        why = (
            f"auto: this machine's {{host}} x min(1, {threads} thread(s) / {cores} core(s)) = "
            "{value} per worker (distributed's rule)"
        )
        return memory_choice(resolved, limit, why, host)
    if kind == "cuda":
        n = max(1, len(gpus.value))
        limit = memory_bytes(c.memory_limit, 1, n)
        why = f"auto: this machine's {{host}} of host memory split over {n} worker(s) = {{value}} each"
        return memory_choice(resolved, limit, why, host)
    return None
