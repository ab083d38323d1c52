"""Transports, found by name in a registry (never in if-chains).

``tcp`` ships with distributed. ``ucx`` comes from the ``distributed-ucxx`` package, which
registers the "ucx" comm backend with distributed; with plain ``protocol="ucx"`` UCX picks
its transports itself (NVLink, InfiniBand, shared memory), and the explicit switches are
passed only where the user asked for them.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from ..errors import UserError, missing_module

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


@dataclass(frozen=True)
class UcxProtocol(Protocol):
    switches_transports: bool = True

    def transport_label(self) -> str:
        return "automatic (UCX chooses)"

    def transport_kwargs(self, ucx) -> dict:
        kw = {"protocol": self.name}
        # Only what was asked for: None lets UCX choose (the fast default on NVLink machines).
        for key in ("nvlink", "infiniband", "rdmacm"):
            value = getattr(ucx, key)
            if value is not None:
                kw[f"enable_{key}"] = value
        return kw


_PROTOCOLS: dict[str, Protocol] = {}


def register(p: Protocol) -> Protocol:
    _PROTOCOLS[p.name] = p
    return p


register(Protocol("tcp", "TCP sockets (distributed's default)", bind_host="127.0.0.1"))
register(UcxProtocol("ucx", "UCX through distributed-ucxx: NVLink / InfiniBand / shared memory",
                     module="distributed_ucxx", install=UCX_INSTALL))


def names() -> list[str]:
    return list(_PROTOCOLS)


def get(name: str) -> Protocol:
    try:
        return _PROTOCOLS[name]
    except KeyError:
        raise UserError(f"unknown protocol '{name}'", f"use one of: {', '.join(names())}") from None
