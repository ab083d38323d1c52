"""Cluster building: a printable spec first (:func:`build_spec`: the plan as one
:class:`.kind.Kind`'s class arguments, starting nothing), then a thin start over it
(:func:`connect`).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import logging
import pathlib
import sys
import warnings
from typing import Any, Iterator

import dask.config
from pydantic import BaseModel, ConfigDict, Field

from .. import _dask_compat, machine
from ..errors import UserError
from ..plan import cluster as cluster_plan  # a module: it imports this package, either loads first
from ..wire import gather, liveness, messages, protocols  # noqa: F401
from . import security  # noqa: F401
from .kind import Kind

SLOW_SCRATCH = "Creating scratch directories is taking a surprisingly long time"
"""distributed's warning as a worker's scratch folder takes over a second to make, ignored while
a cluster starts here and in its workers (:mod:`.detach`): it would break the one-line output."""

KINDS = {
    "local": "gpuscale.cluster.local:Local",
    "cuda": "gpuscale.cluster.cuda:Cuda",
    "existing": "gpuscale.cluster.existing:Existing",
    "ssh": "gpuscale.cluster.ssh:Ssh",
    "slurm": "gpuscale.cluster.slurm:Slurm",
    "srun": "gpuscale.cluster.srun:Srun",
}
"""Each cluster kind's :class:`~gpuscale.cluster.kind.Kind`, as ``module:Class``."""
identity, size, workers = _dask_compat.identity, _dask_compat.size, _dask_compat.workers
"""What the scheduler reports of the cluster behind a client."""
DETACH = f"{__name__}.detach"
"""The worker preload of every cluster gpuscale starts (:mod:`.detach`), by its module name."""


class ClusterSpec(BaseModel):
    """Everything needed to start the cluster, resolved to concrete values."""

    model_config = ConfigDict(frozen=True)

    kind: str
    cls: str
    family: str
    protocol: str
    scheduler: str | None = None
    workers: int | None = None
    threads_per_worker: int | None = None
    memory_limit: Any = None
    memory_limit_bytes: int | None = None
    gpus: list[int] | None = None
    transports: dict[str, Any] = Field(default_factory=dict)
    rmm: dict[str, Any] | None = None
    pre_import: list[str] = Field(default_factory=list)
    dashboard_address: str | None = None
    connect_timeout: float | None = None
    security: str = "off"
    """``tls`` or ``off`` (:mod:`gpuscale.cluster.security` decides)."""
    credentials: str | None = None
    """A running TLS scheduler's client credentials file (None: none, or made at start)."""
    message_interval: float | None = None
    """Seconds between sends on Dask's batched control streams; None: distributed's own."""
    worker_ttl: float | None = None
    """Seconds without a heartbeat after which the scheduler removes a worker; None: Dask's own."""
    gather: str = "dask"
    """How the client fetches results: ``direct``, ``scheduler`` or ``dask``."""
    notes: list[str] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """The exact keyword arguments given to the cluster class."""
    dask_config: dict[str, Any] = Field(default_factory=dict)
    """Dask settings in force while the cluster starts (its worker processes take them)."""
    per_host: dict[str, dict[str, Any]] | None = Field(None, exclude=True)
    """A deploy target on other hosts: per host, what runs there and what its workers get."""
    commands: list[str] = Field(default_factory=list, exclude=True)
    """What a deploy target runs on other hosts, for ``cluster show``."""
    choices: dict[str, Any] = Field(default_factory=dict, exclude=True)
    """Each cluster knob as the kind chose it (a :class:`gpuscale.plan.Decision`)."""

    @property
    def in_this_process(self) -> bool:
        """Its workers run in the process that starts it (``processes=False``)."""
        return self.kwargs.get("processes") is False


def kind(name: str) -> Kind:
    """The cluster kind of this name."""
    module, _, cls = KINDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


def check_addresses(host: str | None, dashboard: str | None) -> None:
    """Refuse, before anything starts, a ``--host`` this machine cannot listen on and a
    ``--dashboard-address`` that is not ``[HOST]:PORT`` with such a host."""
    if host:
        _check_bindable(host, f"--host {host}")
    if not dashboard:
        return
    text = str(dashboard)
    name, colon, port = text.rpartition(":")
    if not colon:
        name, port = "", text
    if not port.isdigit() or int(port) > 65535:
        raise UserError(
            f"--dashboard-address {text!r} is not [HOST]:PORT",
            "e.g. --dashboard-address 127.0.0.1:8787 (port 0: any free port)",
        )
    if name:
        _check_bindable(name.strip("[]"), f"--dashboard-address {text}")


def _check_bindable(host: str, what: str) -> None:
    """A socket can listen on ``host`` here (port 0), or a UserError naming ``what``."""
    import socket

    fix = "give an address of this machine (127.0.0.1, a local interface's address, or 0.0.0.0 for all)"
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(f"{what}: the name {host!r} does not resolve ({e})", fix) from None
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.bind(addr)
    except OSError as e:
        raise UserError(f"{what}: this machine cannot listen on {host} ({e.strerror or e})", fix) from None


def build_spec(
    resolved,
    family,
    collection: str | None = None,
    *,
    served: bool = False,
    gpus=None,
    estimate_bytes: int | None = None,
) -> ClusterSpec:
    """The cluster ``resolved`` describes for ``family``, with the decisions behind it; starts nothing."""
    plan = cluster_plan.plan_cluster(
        resolved, family, collection, served=served, gpus=gpus, estimate_bytes=estimate_bytes
    )
    k = kind(plan.kind)
    spec = k.spec(plan)
    first = {} if plan.kind == "existing" else {"protocol": plan.protocol}
    spec = spec.model_copy(
        update={
            "message_interval": plan.message_interval.value,
            "worker_ttl": plan.worker_ttl.value,
            "gather": plan.gather.value,
            "choices": {
                **first,
                **spec.choices,
                "message_interval": plan.message_interval,
                "worker_ttl": plan.worker_ttl,
                "gather": plan.gather,
            },
        }
    )
    host = resolved.settings.cluster.host
    if plan.kind in ("local", "cuda"):
        check_addresses(host, resolved.settings.cluster.dashboard_address)
    if plan.kind in ("local", "cuda") and host:
        spec = spec.model_copy(update={"kwargs": {**spec.kwargs, "host": host}})
    spec = security.apply(spec, resolved, plan.transport, served=served)
    commands = k.commands(spec)
    if commands is not None:
        spec = spec.model_copy(update={"commands": commands})
    per_host = k.per_host(spec)  # after security.apply: it shows TLS
    if per_host is not None:
        spec = spec.model_copy(update={"per_host": per_host})
    return spec


def spec_for(k: Kind, plan, **fields: Any) -> ClusterSpec:
    """The spec of kind ``k`` for ``plan``: what every kind that starts workers has, then ``fields``."""
    c = plan.resolved.settings.cluster
    return ClusterSpec(
        **{
            "kind": k.name,
            "cls": k.cluster_class,
            "family": plan.family.name,
            "protocol": plan.transport.name,
            "threads_per_worker": plan.layout.threads.value,
            "memory_limit": c.memory_limit,
            "dashboard_address": plan.dashboard.value if plan.dashboard else c.dashboard_address,
            **fields,
        }
    )


def per_host_entry(
    spec: "ClusterSpec", worker_class: str, workers: Any, threads: Any, memory: Any = None
) -> dict[str, Any]:
    """What one host's workers get: the worker class, count and threads as the kind words
    them, and the spec's choices (``memory``: instead of its memory limit)."""
    ch = spec.choices

    def shown(name: str) -> Any:
        c = ch.get(name) or {}
        return (
            c.get("rule") if c.get("value") in (None, "auto", "default") and c.get("rule") else c.get("value")
        )

    spill = "device_memory_limit" if "device_memory_limit" in ch else "spilling"
    return {
        "worker_class": worker_class,
        "workers": workers,
        "threads_per_worker": threads,
        "memory_limit": shown("memory_limit") if memory is None else memory,
        "rmm_pool_size": (spec.rmm or {}).get("pool_size"),
        spill: shown(spill),
        "transports": shown("transports"),
        "tls": spec.security == "tls",
    }


@contextlib.contextmanager
def connect(spec: ClusterSpec, security: Any = None) -> Iterator[tuple[Any, Any]]:
    """Start (or join) the cluster and yield ``(client, cluster)``; what was started is closed after."""
    quiet = contextlib.ExitStack()
    if spec.in_this_process:  # its worker has no preload (worker_preloads)
        from .logs import quiet_in_this_process

        quiet.enter_context(quiet_in_this_process())
    with quiet:
        k = kind(spec.kind)
        cluster = client = None
        try:
            cluster, client = k.start(spec, security)
            messages.apply_client(client, spec.message_interval)
            gather.apply_client(client, spec.gather)
            yield client, cluster
        finally:
            # a scheduler gone (stopped from outside, or lost on another host): close without
            # waiting the connect timeout at each step
            status = getattr(getattr(cluster, "scheduler", None), "status", None)
            gone = getattr(status, "name", None) in ("closing", "closed", "failed")
            gone = gone or (
                cluster is not None
                and client is not None
                and str(getattr(client, "status", "running")) not in ("running", "newly-created")
            )
            with contextlib.ExitStack() as quick:
                if gone:
                    quick.enter_context(dask.config.set({"distributed.comm.timeouts.connect": "1s"}))
                    quick.enter_context(_quiet("distributed.client"))  # its cancelled reconnect
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.close()
                if cluster is not None:
                    with contextlib.suppress(Exception):
                        k.close(spec, cluster)


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def start_error(spec: ClusterSpec, exc: BaseException) -> UserError:
    other = "" if spec.family == "cpu" else ", or use --backend cpu"
    return UserError(
        f"could not start {spec.cls} ({type(exc).__name__}: {exc})",
        f"check `gpuscale cluster show` and `gpuscale info`{other}",
    )


MAIN_GUARD = 'if __name__ == "__main__":'


def unguarded_main_call() -> str | None:
    """``file:line`` of the user's script where it is starting a cluster outside
    ``if __name__ == "__main__":``, when spawned worker processes will import that script
    again; else None."""
    method = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if method == "fork" or path is None:
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None  # multiprocessing does not re-run a package's __main__
    frame, line = sys._getframe(), None
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
        frame = frame.f_back
    if line is None:
        return None
    try:
        tree = ast.parse(pathlib.Path(path).read_text(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and _is_main_guard(node.test)
            and node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno)
        ):
            return None
    return f"{path}:{line}"


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(a, ast.Name) and a.id == "__name__" for a in sides) and any(
        isinstance(a, ast.Constant) and a.value == "__main__" for a in sides
    )


def check_main_guard() -> None:
    """Refuse a script that starts a cluster outside the ``__main__`` guard."""
    where = unguarded_main_call()
    if where:
        raise UserError(
            f"{where} starts a cluster outside `{MAIN_GUARD}`, so every worker process would "
            "run this script again as it starts",
            f"put the code that starts it under `{MAIN_GUARD}` (or run it in a notebook)",
        )


def worker_preloads(spec: ClusterSpec) -> list[str]:
    """The worker preloads of a cluster gpuscale starts: :data:`DETACH` first (worker processes
    only), then those the message interval needs and any the user's Dask config names."""
    config = messages.construct_config(spec.message_interval)
    preload = list(
        config.get("distributed.worker.preload") or dask.config.get("distributed.worker.preload", None) or []
    )
    if spec.in_this_process:  # it keeps its process group and log handlers
        return [p for p in preload if p != DETACH]
    return preload if DETACH in preload else [DETACH, *preload]


def construct(spec: ClusterSpec, factory):
    """``factory()`` (a cluster class called with the spec's kwargs), safe to interrupt: a
    half-built cluster is closed and marked closed; an ordinary exception becomes the one-line
    :func:`start_error`."""
    check_main_guard()
    config = messages.construct_config(spec.message_interval) | liveness.config(spec.worker_ttl)
    config["distributed.worker.preload"] = worker_preloads(spec)
    try:
        # the nannies keep this config for their workers, restarts included
        with _dask_compat.closing_half_built(), dask.config.set(config), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)  # said below
            warnings.filterwarnings("ignore", SLOW_SCRATCH)
            cluster = factory()
    except Exception as e:
        raise start_error(spec, e) from None
    _dashboard_moved(spec, cluster)
    return cluster


def _dashboard_moved(spec: ClusterSpec, cluster) -> None:
    """One line on stderr where the dashboard's port was taken and distributed served it on another."""
    from urllib.parse import urlsplit

    port = str((spec.kwargs or {}).get("dashboard_address") or "").rpartition(":")[2]
    link = getattr(cluster, "dashboard_link", None) or ""
    try:
        got = urlsplit(link).port
    except ValueError:
        got = None
    if port.isdigit() and int(port) and got is not None and got != int(port):
        sys.stderr.write(
            f"gpuscale: warning: dashboard port {port} is in use (another cluster, program or user); "
            f"the dashboard is at {link} instead\n"
        )


def planned_worker_memory(spec: ClusterSpec) -> list[int]:
    """Memory per planned worker that holds the chunks, as ``Family.worker_memory`` would; [] when unknown."""
    if spec.scheduler is not None:
        return []
    if spec.gpus is not None:
        sizes = {g["index"]: g["memory_bytes"] for g in machine.gpus()}
        return [sizes[g] for g in spec.gpus if g in sizes]
    if spec.memory_limit_bytes and spec.workers:
        return [int(spec.memory_limit_bytes)] * int(spec.workers)
    return []
