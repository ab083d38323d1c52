"""The plan of one cluster: which kind, over which transport, laid out how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..decision import Decision
from ..wire import gather, liveness, messages, protocols
from .layout import Facts, Layout, layout, processes_choice


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """What the rules decided for one cluster before its kind turns it into arguments
    (:class:`gpuscale.cluster.kind.Kind`): the kind, the transport, the worker layout and the
    message interval and how results reach the client, with the settings and facts they came from."""

    kind: str
    """``local``, ``cuda``, ``existing``, ``ssh``, ``slurm`` or ``srun``."""
    resolved: Any
    """The settings and their sources (``config.Resolved``)."""
    family: Any
    collection: str | None
    facts: Facts
    transport: Any
    """The :class:`gpuscale.wire.protocols.Protocol` chosen (``protocol``'s value names it)."""
    protocol: Decision
    message_interval: Decision
    worker_ttl: Decision
    gather: Decision
    """How the client fetches results (:mod:`gpuscale.wire.gather`)."""
    layout: Layout | None
    """None for a running cluster (``existing``): it has its own."""
    tls: bool
    """The cluster is to speak TLS (asked for, or kept up for other processes)."""
    served: bool
    gpu_workers: bool
    """The workers are the family's GPU workers (one per GPU, dask-cuda's), wherever they run."""
    gpus: Decision | None = None
    """The GPUs a rule of the work picked for a cluster started here (None: every visible GPU
    or the ones you set)."""
    dashboard_set: bool = False
    """You set the dashboard's address (a small run in this process then keeps its dashboard,
    served over TCP on the loopback)."""


def kind_of(resolved, family) -> str:
    """The cluster kind the settings ask for: a running scheduler's, the deploy target on other
    hosts, else the family's kind on this machine."""
    settings = resolved.settings
    if settings.scheduler or settings.scheduler_file:
        return "existing"
    deploy = settings.cluster.deploy
    return family.cluster_kind if deploy == "local" else deploy


def plan_cluster(
    resolved,
    family,
    collection: str | None = None,
    *,
    served: bool = False,
    facts: Facts | None = None,
    gpus: Decision | None = None,
    estimate_bytes: int | None = None,
) -> ClusterPlan:
    """The plan of the cluster the resolved settings describe for ``family``'s ``collection``
    work on a machine of ``facts`` (None: this one). ``served``: a cluster kept up for other
    processes (``cluster up``); ``gpus``: the GPUs a rule of the work picked
    (:func:`gpuscale.runs.session.gpus_for_work`); ``estimate_bytes``: the planned memory of
    the one run the cluster starts for (:func:`gpuscale.runs.session.processes_for_work`)."""
    settings = resolved.settings
    kind = kind_of(resolved, family)
    facts = facts or Facts.here()
    tls = settings.cluster.security == "tls" or served
    transport, protocol = protocols.choose(
        settings.protocol, resolved.sources.get("protocol", "default"), family, kind, tls
    )
    processes = processes_choice(resolved, kind, family, served=served, estimate_bytes=estimate_bytes)
    dashboard_set = resolved.sources.get("cluster.dashboard-address", "default") != "default"
    protocol = protocols.in_process(protocol, processes, tls, dashboard_set)
    if protocol.value != transport.name:
        transport = protocols.get(protocol.value)
    return ClusterPlan(
        kind=kind,
        resolved=resolved,
        family=family,
        collection=collection,
        facts=facts,
        transport=transport,
        protocol=protocol,
        message_interval=messages.choose(resolved, kind),
        worker_ttl=liveness.choose(resolved, kind),
        gather=gather.choose(resolved, kind),
        layout=None if kind == "existing" else layout(resolved, family, collection, kind, facts, processes),
        tls=tls,
        served=served,
        gpu_workers=family.cluster_kind == "cuda",
        gpus=gpus,
        dashboard_set=dashboard_set,
    )
