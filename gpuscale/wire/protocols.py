"""Transports, found by name in a registry: ``tcp`` (distributed's) and ``ucx``
(``distributed-ucxx``; UCX picks its transports unless switches are set), and the
:class:`Protocol` instances the ``gpuscale.protocols`` entry points name.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import Any

from ..decision import Decision
from ..errors import UserError, missing_module

SWITCHES = ("nvlink", "infiniband", "rdmacm")
"""The UCX transport switches of ``cluster.ucx`` (None: UCX chooses)."""

UCX_INSTALL = "pip install 'gpuscale[ucx]'  (distributed-ucxx-cu13)"


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str
    module: str | None = None
    install: str = ""
    bind_host: str | None = None
    """Host a local cluster binds to (None: the transport's own choice)."""
    switches_transports: bool = False
    """Whether NVLink / InfiniBand switches mean anything over this protocol."""
    in_process: bool = False
    """Only between a client and workers of one process: chosen by a rule, never a setting."""

    def keeps_sent_device_memory(self) -> bool:
        """Whether a process that received GPU buffers over this protocol, as installed here, keeps
        the sender's device allocation mapped until it exits."""
        return False

    def transport_label(self) -> str:
        """How the transports are chosen, for the cluster spec."""
        return self.name

    def check(self) -> None:
        if self.module and importlib.util.find_spec(self.module) is None:
            raise missing_module(self.module, f"protocol '{self.name}'", self.install)

    def available(self) -> bool:
        return self.module is None or importlib.util.find_spec(self.module) is not None

    def transport_kwargs(self, ucx) -> dict:
        """Keyword arguments for LocalCUDACluster that pick this protocol's transports."""
        return {"protocol": self.name}

    def transports_choice(self, ucx, transports: dict[str, Any], sources: dict[str, str]) -> Decision:
        """The spec's transports (empty: this protocol's own selection) as a recorded choice:
        the switches the user set where this protocol honours them, else its selection."""
        switches = set_switches(ucx)
        if switches and self.switches_transports:
            return Decision(
                transports or switches,
                sources.get(f"cluster.ucx.{next(iter(switches))}", "flag"),
                "switches you set: " + ", ".join(f"{k}={v}" for k, v in switches.items()),
                "transports.switches",
            )
        label = self.transport_label()
        return Decision(
            transports or {"selection": label},
            "rule",
            f"{self.description}: transports {label}"
            + ("; UCX switches apply to GPU clusters only (ignored)" if switches else ""),
            "transports.protocol",
        )


def set_switches(ucx) -> dict[str, bool]:
    """The UCX switches set (True / False) in the ``cluster.ucx`` settings, in their order."""
    return {k: getattr(ucx, k) for k in SWITCHES if getattr(ucx, k) is not None}


UCX_RELEASES_SENT_MEMORY = (1, 22)
"""The first UCX release whose CUDA IPC transport closes the memory handles of what it received
("UCX before 1.22 keeps the workers' pools mapped" in docs/decisions.md)."""


def ucx_keeps_sent_memory(version: tuple[int, ...]) -> bool:
    """Whether UCX of this ``(major, minor, ...)`` version keeps received device memory mapped."""
    return tuple(version[:2]) < UCX_RELEASES_SENT_MEMORY


@dataclass(frozen=True)
class UcxProtocol(Protocol):
    switches_transports: bool = True

    def keeps_sent_device_memory(self) -> bool:
        import ucxx  # loaded by distributed-ucxx when the cluster starts

        return ucx_keeps_sent_memory(ucxx.get_ucx_version())

    def transport_label(self) -> str:
        return "automatic (UCX chooses)"

    def transport_kwargs(self, ucx) -> dict:
        return {"protocol": self.name, **{f"enable_{k}": v for k, v in set_switches(ucx).items()}}


_PROTOCOLS: dict[str, Protocol] = {}
_LOADED = False


def register(p: Protocol) -> Protocol:
    _PROTOCOLS[p.name] = p
    return p


register(Protocol("tcp", "TCP sockets (distributed's default)", bind_host="127.0.0.1"))
INPROC = register(
    Protocol("inproc", "in memory: the workers run in this process (distributed's own)", in_process=True)
)
register(
    UcxProtocol(
        "ucx",
        "UCX through distributed-ucxx: NVLink / InfiniBand / shared memory",
        module="distributed_ucxx",
        install=UCX_INSTALL,
    )
)


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for ep in importlib.metadata.entry_points(group="gpuscale.protocols"):
        obj = ep.load()
        if not isinstance(obj, Protocol):
            raise TypeError(
                f"gpuscale.protocols entry point '{ep.name}' ({ep.value}) names a "
                f"{type(obj).__name__}, not a gpuscale Protocol"
            )
        register(obj)


def names() -> list[str]:
    """The protocols a setting may name."""
    _load()
    return [n for n, p in _PROTOCOLS.items() if not p.in_process]


AUTO = "auto"
HERE = ("local", "cuda")
"""Cluster kinds started on this machine: ``auto`` may pick the family's transport for them."""


def choose(setting: str, source: str, family, kind: str, tls: bool) -> tuple[Protocol, Decision]:
    """The transport of a cluster of ``kind`` for ``family`` and its recorded choice, from the
    ``protocol`` setting. ``auto``: the family's transport for a cluster started on this
    machine without TLS when it is installed, else TCP (docs/decisions.md, rules
    ``protocol.*``)."""
    if setting != AUTO:
        return get(setting), Decision(
            setting, source, f"{setting}, set by you", "protocol.setting", documented=True
        )
    wanted = family.knobs.protocol
    tcp = get("tcp")
    if wanted is None or wanted == "tcp":
        return tcp, _auto(
            tcp, "protocol.tcp", f"the {family.name} family's clusters talk TCP (distributed's default)"
        )
    if kind not in HERE:
        return tcp, _auto(tcp, "protocol.remote", f"a cluster on other hosts: TCP (TLS), not {wanted}")
    if tls:
        return tcp, _auto(tcp, "protocol.tls", f"TLS is asked for: TCP, as {wanted} has no TLS")
    p = get(wanted)
    if not p.available():
        return tcp, _auto(
            tcp,
            "protocol.not-installed",
            f"{wanted} is the {family.name} family's transport but is not installed ({p.install}): TCP",
        )
    return p, _auto(
        p,
        "protocol.family",
        f"the {family.name} family's transport: {p.description}; "
        "results reach the client without a copy through host memory",
    )


def in_process(protocol: Decision, processes: Decision | None, tls: bool, dashboard: bool) -> Decision:
    """``protocol``, or in memory where the protocol is ``auto``, neither TLS nor a dashboard
    (``dashboard``: its address set) is asked for and rule ``processes.small-work`` runs the
    one worker in this process (rule ``protocol.in-process``)."""
    if protocol.source != "rule" or tls or dashboard or processes is None or processes.value:
        return protocol
    if processes.rule_id != "processes.small-work":
        return protocol
    return _auto(
        INPROC,
        "protocol.in-process",
        "the one worker runs in this process (rule processes.small-work): client and worker "
        "speak in memory, as distributed's own in-process clusters do",
    )


def _auto(p: Protocol, rule_id: str, why: str) -> Decision:
    return Decision(p.name, "rule", f"auto: {why}", rule_id, extra={"setting": AUTO}, documented=True)


def get(name: str) -> Protocol:
    _load()
    try:
        return _PROTOCOLS[name]
    except KeyError:
        raise UserError(f"unknown protocol '{name}'", f"use one of: {', '.join(names())}") from None


def of_address(address: str) -> Protocol:
    """The protocol of a running scheduler's address (a bare :class:`Protocol` if not registered)."""
    scheme = address.split("://", 1)[0]
    _load()
    return _PROTOCOLS.get(scheme) or Protocol(scheme, scheme)
