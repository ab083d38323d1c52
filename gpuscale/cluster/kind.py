"""A cluster kind: the class that turns a cluster's plan into arguments and starts the cluster."""

from __future__ import annotations

from typing import Any, ClassVar

from ..plan.memory import rmm_choice, rmm_rule


class Kind:
    """One kind of cluster: :meth:`spec` turns a plan into a :class:`gpuscale.cluster.ClusterSpec`;
    :meth:`start` starts (or joins) the cluster a spec describes."""

    name: ClassVar[str]
    cluster_class: ClassVar[str]
    """The class the spec names (its ``cls``)."""

    def __init_subclass__(cls, name: str, cluster_class: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name, cls.cluster_class = name, cluster_class

    def spec(self, plan) -> Any:
        raise NotImplementedError

    def choices(
        self,
        plan,
        workers,
        memory_limit,
        *,
        where: dict[str, Any] | None = None,
        transports: dict[str, bool] | None = None,
        rmm: dict[str, Any] | None = None,
        gpu_bytes: list[int] = (),
        rest: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The choices of a kind that starts workers, in the order a record shows them
        (``gpu_bytes``: its GPUs' memory where known, for the RMM pool's size per GPU)."""
        resolved = plan.resolved
        pool = rmm["pool_size"] if rmm else None
        return {
            "transports": plan.transport.transports_choice(
                resolved.settings.cluster.ucx, transports or {}, resolved.sources
            ),
            **(where or {}),
            "workers": workers,
            "threads_per_worker": plan.layout.threads,
            "memory_limit": memory_limit,
            "rmm_pool_size": rmm_choice(resolved, plan.family, pool, rmm_rule(rmm, gpu_bytes)),
            **(rest or {}),
        }

    def start(self, spec, security: Any = None) -> tuple[Any, Any]:
        """``(cluster, client)``; ``cluster`` is None when nothing was started here."""
        raise NotImplementedError

    def close(self, spec, cluster) -> None:
        """Close a cluster :meth:`start` started."""
        cluster.close()

    def commands(self, spec) -> list[str] | None:
        """What runs on other hosts (None: nothing, the cluster is on this machine or running)."""
        return None

    def per_host(self, spec) -> dict[str, dict[str, Any]] | None:
        """Per host, what runs there and what its workers get (None: this machine only)."""
        return None
