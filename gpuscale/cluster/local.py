"""``distributed.LocalCluster``: the CPU family's cluster."""

from __future__ import annotations

import logging

from dask.utils import format_bytes

from .. import _dask_compat, machine
from ..errors import UserError
from ..plan.memory import memory_choice, spill_choices
from . import ClusterSpec, construct, spec_for
from . import security as tls
from .detach import PRE_IMPORT_KEY
from .kind import Kind

logger = logging.getLogger(__name__)


MIN_WORKER_BYTES = 256 * 2**20
"""A worker's memory limit below this is refused (distributed would pause / restart it at once)."""
MAX_WORKERS_PER_CORE = 4
MAX_THREADS_PER_WORKER = 64
MAX_THREADS_PER_CORE = 16
MEMORY_LIMIT_FORMS = (
    "use auto, a size with a unit like '8GB', a whole number of bytes, or a fraction "
    "0 < f <= 1 of this machine's memory like 0.5"
)


def _memory_setting(limit):
    """The memory-limit setting in the form distributed reads, or a UserError: a number is a
    fraction of this machine's memory when 0 < f <= 1, a byte count when whole and > 1 (0: no
    limit); other numbers, negative sizes and sizes over the machine's memory are refused."""
    from dask.utils import parse_bytes

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
    """Per-worker bytes of a memory-limit setting, as distributed reads it; refused (before
    anything starts) when it is not one of :data:`MEMORY_LIMIT_FORMS`, below
    :data:`MIN_WORKER_BYTES` or above this machine's memory."""
    setting = _memory_setting(limit)
    try:
        value = _dask_compat.memory_limit_bytes(setting, threads, cores, logger)
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
    ``host`` bytes of memory cannot hold: more than :data:`MAX_WORKERS_PER_CORE` worker
    processes per core or fewer than :data:`MIN_WORKER_BYTES` of its memory each, more than
    :data:`MAX_THREADS_PER_WORKER` threads per worker or :data:`MAX_THREADS_PER_CORE` threads
    per core in all."""
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


class Local(Kind, name="local", cluster_class="distributed.LocalCluster"):
    """``distributed.LocalCluster``: the CPU family's processes on this machine, laid out by the plan."""

    def spec(self, plan) -> ClusterSpec:
        resolved, family, proto = plan.resolved, plan.family, plan.transport
        layout = plan.layout
        cores = layout.cores
        workers, threads = layout.workers.value, layout.threads.value
        host = plan.facts.memory_bytes
        check_layout(workers, threads, cores, host)
        c = resolved.settings.cluster
        notes = [f"layout: {layout.why}"]
        if any(v is not None for v in (c.ucx.nvlink, c.ucx.infiniband, c.ucx.rdmacm)):
            notes.append("UCX transport switches apply to GPU clusters only; ignored here")
        in_process = layout.processes is not None and not layout.processes.value
        kwargs = {
            "n_workers": workers,
            "threads_per_worker": threads,
            "processes": not in_process,
            "memory_limit": _memory_setting(c.memory_limit),
            "protocol": proto.name,
            "dashboard_address": plan.dashboard.value,
        }
        if proto.bind_host:
            kwargs["host"] = proto.bind_host
        limit = memory_bytes(c.memory_limit, threads, cores)
        if c.memory_limit != "auto":
            check_total(workers, limit, host)
        worker_config: dict = {}
        pre = list(family.knobs.pre_import.get(plan.collection or "session", ()))
        if pre:
            worker_config[PRE_IMPORT_KEY] = pre
        choices = self.choices(
            plan,
            layout.workers,
            memory_choice(
                resolved,
                limit,
                "auto: this machine's {host} x min(1, "
                f"{threads} thread(s) / {cores} core(s)) = {{value}} per worker "
                "(distributed's rule)",
                host,
            ),
            where={"processes": layout.processes} if layout.processes is not None else None,
            rest=spill_choices(family, limit, threads, worker_config),
        )
        return spec_for(
            self,
            plan,
            workers=workers,
            memory_limit_bytes=limit,
            pre_import=pre,
            notes=notes,
            kwargs=kwargs,
            dask_config=worker_config,
            choices=choices,
        )

    def start(self, spec: ClusterSpec, security=None):
        from distributed import LocalCluster

        return start_here(spec, LocalCluster, security)


def start_here(spec: ClusterSpec, cluster_class, security=None, ready=None):
    """``(cluster, client)``: ``cluster_class(**spec.kwargs)`` started on this machine
    (:func:`gpuscale.cluster.construct`) under the spec's ``dask_config``, speaking TLS with
    ``security`` (default: temporary credentials) when the spec does, and a client of it.
    ``ready(client)`` runs before it returns; when it or the client fails, the cluster is
    closed."""
    import dask
    from distributed import Client

    kwargs = dict(spec.kwargs)
    if spec.security == "tls":
        kwargs["security"] = security or tls.temporary()

    def make():
        with dask.config.set(spec.dask_config):
            return cluster_class(**kwargs)

    cluster = construct(spec, make)
    try:
        client = Client(cluster)
        if ready is not None:
            ready(client)
        return cluster, client
    except BaseException:
        cluster.close()
        raise
