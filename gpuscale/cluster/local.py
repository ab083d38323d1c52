"""``distributed.LocalCluster``: the CPU family's cluster."""

from __future__ import annotations

from ..plan.memory import memory_setting, spill_choices
from . import ClusterSpec, construct, spec_for
from . import security as tls
from .detach import PRE_IMPORT_KEY
from .kind import Kind


class Local(Kind, name="local", cluster_class="distributed.LocalCluster"):
    """``distributed.LocalCluster``: the CPU family's processes on this machine, laid out by the plan."""

    def spec(self, plan) -> ClusterSpec:
        resolved, family, proto = plan.resolved, plan.family, plan.transport
        layout = plan.layout
        workers, threads = layout.workers.value, layout.threads.value
        c = resolved.settings.cluster
        notes = [f"layout: {layout.why}", *plan.notes]
        in_process = layout.processes is not None and not layout.processes.value
        kwargs = {
            "n_workers": workers,
            "threads_per_worker": threads,
            "processes": not in_process,
            "memory_limit": memory_setting(c.memory_limit),
            "protocol": proto.name,
            "dashboard_address": plan.dashboard.value,
        }
        if proto.bind_host:
            kwargs["host"] = proto.bind_host
        limit = plan.memory_limit.value
        worker_config: dict = {}
        pre = list(family.knobs.pre_import.get(plan.collection or "session", ()))
        if pre:
            worker_config[PRE_IMPORT_KEY] = pre
        choices = self.choices(
            plan,
            layout.workers,
            plan.memory_limit,
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
    """``(cluster, client)``: ``cluster_class(**spec.kwargs)`` started on this machine under the
    spec's ``dask_config`` (TLS with ``security``, default temporary credentials, where the spec
    says so), and a client of it; ``ready(client)`` runs before it returns."""
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
