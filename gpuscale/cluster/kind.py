"""A cluster kind: the small class that turns a cluster's plan into its cluster class's
arguments, and starts that class over them."""

from __future__ import annotations

from typing import Any, ClassVar


class Kind:
    """One kind of cluster: :meth:`spec` turns a :class:`gpuscale.plan.cluster.ClusterPlan`
    into a :class:`gpuscale.cluster.ClusterSpec`, deciding nothing the plan decided;
    :meth:`start` starts (or joins) the cluster a spec describes."""

    name: ClassVar[str]

    def spec(self, plan) -> Any:
        raise NotImplementedError

    def start(self, spec, security: Any = None) -> tuple[Any, Any]:
        """``(cluster, client)``; ``cluster`` is None when nothing was started here."""
        raise NotImplementedError

    def commands(self, spec) -> list[str] | None:
        """What runs on other hosts (None: nothing, the cluster is on this machine or running)."""
        return None

    def per_host(self, spec) -> dict[str, dict[str, Any]] | None:
        """Per host, what runs there and what its workers get (None: this machine only)."""
        return None
