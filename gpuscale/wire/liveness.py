"""How long the scheduler of a cluster gpuscale starts waits for a worker's heartbeat before
it removes the worker (distributed's ``distributed.scheduler.worker-ttl``), set by
``cluster.worker-ttl``. See docs/decisions.md, rule ``worker-ttl.started``.
"""

from __future__ import annotations

from typing import Any

import dask.config
from dask.utils import parse_timedelta

from ..decision import Decision

SETTING = "cluster.worker-ttl"
CONFIG_KEY = "distributed.scheduler.worker-ttl"
DASK_DEFAULT_S = 300
"""distributed's own worker-ttl, seconds."""
STARTED_HERE = ("local", "cuda")
"""Cluster kinds whose scheduler starts in this process, under the config :func:`config` gives."""


def choose(resolved, kind: str) -> Decision:
    """The seconds without a heartbeat after which the scheduler removes a worker (None: Dask's own)."""
    setting = resolved.settings.cluster.worker_ttl
    source = resolved.sources.get(SETTING, "default")
    if kind not in STARTED_HERE:
        return Decision(
            None, "rule", f"a {kind} cluster's scheduler keeps its own worker-ttl", "worker-ttl.elsewhere"
        )
    if setting == "dask":
        return Decision(None, source, f"dask: distributed's own {CONFIG_KEY}", "worker-ttl.dask")
    yours = dask.config.get(CONFIG_KEY, None)
    if source == "default" and yours is not None and parse_timedelta(yours) != DASK_DEFAULT_S:
        return Decision(
            None, "dask.config", f"{CONFIG_KEY} is set in Dask's config (yours): kept", "worker-ttl.yours"
        )
    return Decision(
        setting,
        "rule" if source == "default" else source,
        f"{setting:g} s without a heartbeat and the scheduler removes the worker (stopped, frozen "
        "or cut off) and runs its tasks on the others, as for a worker that died; the repeats it "
        "disturbed are left out of the median (Dask's own: 5 minutes)",
        "worker-ttl.started",
    )


def config(seconds: float | None) -> dict[str, Any]:
    """The Dask setting a cluster start runs under; {} for Dask's own."""
    return {} if seconds is None else {CONFIG_KEY: f"{seconds:g}s"}
