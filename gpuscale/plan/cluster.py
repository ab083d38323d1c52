"""The plan of one cluster: which kind, over which transport, laid out how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import machine
from ..decision import Decision
from ..errors import UserError
from ..wire import gather, liveness, messages, protocols
from .layout import Facts, Layout, choose_gpus, layout, processes_choice
from .memory import memory_limit_choice
from .workers import WorkerKnobs, worker_knobs


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """What the rules decided for one cluster before its kind turns it into arguments
    (:class:`gpuscale.cluster.kind.Kind`), with the settings and facts they came from."""

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
    gpu_workers: bool
    """The workers are the family's GPU workers (one per GPU, dask-cuda's), wherever they run."""
    gpus: Decision | None = None
    """The GPUs a GPU cluster started here takes, one worker each; None for other kinds."""
    dashboard: Decision | None = None
    """The dashboard's address for a cluster started here (value None: no dashboard)."""
    memory_limit: Decision | None = None
    """Each worker's memory limit in bytes, for a cluster started here (None: other kinds)."""
    notes: tuple[str, ...] = ()
    """What the plan warns of: settings it ignores, GPUs that cannot carry what was asked."""
    gpu_knobs: WorkerKnobs | None = None
    """What each GPU worker gets beyond its layout and pool (None: no GPU workers started)."""


def gpu_bytes(facts: Facts, gpus: Decision | None) -> list[int]:
    """The memory of each GPU the cluster takes, where this machine's facts know it."""
    sizes = dict(facts.gpus)
    return [sizes[g] for g in gpus.value if g in sizes] if gpus is not None else []


def kind_of(resolved, family) -> str:
    """The cluster kind the settings ask for: a running scheduler's, the deploy target on other
    hosts, else the family's kind on this machine."""
    settings = resolved.settings
    if settings.scheduler or settings.scheduler_file:
        return "existing"
    deploy = settings.cluster.deploy
    return family.cluster_kind if deploy == "local" else deploy


def dashboard_choice(resolved, processes: Decision | None) -> Decision:
    """The dashboard's address as you set it (or Dask's default); none for a run that rule
    ``processes.small-work`` puts in this process, where you set none."""
    source = resolved.sources.get("cluster.dashboard-address", "default")
    small = processes is not None and processes.rule_id == "processes.small-work" and not processes.value
    if small and source == "default":
        why = "no dashboard for a run in this process: it would close before anyone opened it"
        return Decision(None, "rule", why, "processes.small-work")
    return Decision(resolved.settings.cluster.dashboard_address, source)


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
    processes; ``gpus``: the GPUs a rule of the work picked; ``estimate_bytes``: the planned
    memory of the one run the cluster starts for."""
    settings = resolved.settings
    kind = kind_of(resolved, family)
    facts = facts or Facts.here(gpus=kind == "cuda")
    gpus = choose_gpus(resolved, facts, gpus) if kind == "cuda" else None
    tls = settings.cluster.security == "tls" or served
    transport, protocol = protocols.choose(
        settings.protocol, resolved.sources.get("protocol", "default"), family, kind, tls
    )
    processes = processes_choice(resolved, kind, family, served=served, estimate_bytes=estimate_bytes)
    dashboard = dashboard_choice(resolved, processes)
    protocol = protocols.in_process(protocol, processes, tls, dashboard.source not in ("default", "rule"))
    if protocol.value != transport.name:
        transport = protocols.get(protocol.value)
    laid = None if kind == "existing" else layout(resolved, family, collection, kind, facts, processes, gpus)
    gpu_workers = family.cluster_kind == "cuda"
    knobs = None
    if gpu_workers and kind != "existing":
        knobs = worker_knobs(resolved, family, collection, transport, gpu_bytes(facts, gpus))
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
        layout=laid,
        gpu_workers=gpu_workers,
        gpus=gpus,
        dashboard=dashboard,
        memory_limit=memory_limit_choice(resolved, kind, laid, facts, gpus),
        gpu_knobs=knobs,
        notes=_notes(resolved, kind, transport, gpus),
    )


def _notes(resolved, kind: str, transport, gpus: Decision | None) -> tuple[str, ...]:
    """Warnings of a cluster started here: UCX switches a CPU cluster ignores; for a GPU
    cluster, no visible GPU, or NVLink that cannot carry anything."""
    ucx = resolved.settings.cluster.ucx
    if kind == "local" and any(v is not None for v in (ucx.nvlink, ucx.infiniband, ucx.rdmacm)):
        return ("UCX transport switches apply to GPU clusters only; ignored here",)
    if kind != "cuda":
        return ()
    chosen = list(gpus.value)
    out = [] if chosen else ["no GPU is visible here: this spec cannot start on this machine"]
    if ucx.nvlink:
        if not transport.switches_transports:
            name = transport.name.upper()
            raise UserError(f"NVLink was requested over {name}", "use --protocol ucx with NVLink")
        if len(chosen) < 2:
            out.append("warning: NVLink requested but only one GPU is used; it carries nothing here")
        elif not machine.nvlink_connected(chosen):
            out.append(f"warning: NVLink requested but GPUs {chosen} are not all NVLink-connected")
    return tuple(out)
