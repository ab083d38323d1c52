"""The send interval of Dask's batched control streams (``distributed.batched.BatchedSend``),
set by ``cluster.message-interval`` on every stream of a cluster gpuscale starts and on this
client's own streams on any cluster. See docs/decisions.md, rule ``message-interval.auto``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import dask.config

from ..decision import Decision

MODULE = __name__
AUTO_S = 0.002
"""``auto``'s interval, in seconds, on every stream gpuscale sets."""
DASK_DEFAULTS = {
    "client -> scheduler": 0.010,
    "scheduler -> worker": 0.005,
    "scheduler -> client": 0.002,
    "worker -> scheduler": 0.002,
}
"""distributed's own intervals (seconds), fixed in its code."""
CONFIG_KEY = "gpuscale-internal.message-interval"
"""Where the chosen interval (seconds) travels to the processes a cluster start spawns."""
SETTING = "cluster.message-interval"
PLUGIN = "gpuscale-message-interval"
"""The name of the scheduler plugin :func:`dask_setup` adds."""


def choose(resolved, kind: str) -> Decision:
    """The interval (seconds, or None: Dask's own) for a cluster of ``kind``, with the rule.
    ``existing``: only this client's two streams are set."""
    setting = resolved.settings.cluster.message_interval
    source = resolved.sources.get(SETTING, "default")
    dask_ms = ", ".join(f"{k} {v * 1e3:g} ms" for k, v in DASK_DEFAULTS.items())
    if setting == "dask":
        return Decision(None, source, f"dask: distributed's own intervals ({dask_ms})", "messages.dask")
    seconds = AUTO_S if setting == "auto" else float(setting)
    where = {
        "existing": "this client's streams (client -> scheduler, scheduler -> client); the running "
        "cluster's scheduler <-> worker streams keep what its owner set",
        "slurm": "client <-> scheduler and scheduler -> each worker; the workers in SLURM jobs start "
        "from the job script without gpuscale's preload and keep Dask's worker -> scheduler",
    }.get(kind, "every batched stream: client <-> scheduler, scheduler <-> each worker")
    why = (
        (
            f"auto: {seconds * 1e3:g} ms on {where}, instead of Dask's ({dask_ms}): a run of a few tasks "
            "waits out each interval after the release of the previous result (docs/decisions.md, "
            "rule message-interval.auto); dask: Dask's own"
        )
        if setting == "auto"
        else f"{seconds * 1e3:g} ms on {where} (set by you; dask: Dask's own, {dask_ms})"
    )
    auto = setting == "auto"
    return Decision(seconds, "rule" if auto else source, why, "messages.auto" if auto else "messages.set")


def construct_config(seconds: float | None) -> dict[str, Any]:
    """The Dask settings (this module as a preload) that set ``seconds`` on a started cluster's streams."""
    if seconds is None:
        return {}
    out: dict[str, Any] = {CONFIG_KEY: seconds}
    for role in ("scheduler", "worker"):
        key = f"distributed.{role}.preload"
        have = list(dask.config.get(key, None) or [])
        out[key] = have if MODULE in have else have + [MODULE]
    return out


def _set(stream, seconds: float) -> None:
    """One stream's interval; a stream without one is left alone."""
    if stream is not None and isinstance(getattr(stream, "interval", None), (int, float)):
        stream.interval = seconds


def _worker_streams(seconds: float):
    """A scheduler plugin: each worker's scheduler -> worker stream gets ``seconds`` as it joins."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class WorkerStreams(SchedulerPlugin):
        name = PLUGIN

        def add_worker(self, scheduler=None, worker=None, **kw) -> None:
            _set(scheduler.stream_comms.get(worker), seconds)

    return WorkerStreams()


def dask_setup(server=None) -> None:
    """Preload of the clusters gpuscale starts: the interval of :data:`CONFIG_KEY` on outgoing streams."""
    seconds = dask.config.get(CONFIG_KEY, None)
    if seconds is None or server is None:
        return
    from distributed import Scheduler, Worker

    if isinstance(server, Worker):
        _set(getattr(server, "batched_stream", None), float(seconds))
    elif isinstance(server, Scheduler):
        server.add_plugin(_worker_streams(float(seconds)), name=PLUGIN, idempotent=True)
        for stream in server.stream_comms.values():
            _set(stream, float(seconds))


def _scheduler_to_client(dask_scheduler=None, client_id: str = "", seconds: float = AUTO_S) -> bool:
    stream = dask_scheduler.client_comms.get(client_id)
    _set(stream, seconds)
    return stream is not None


def apply_client(client, seconds: float | None) -> None:
    """This client's two streams (to and from its scheduler) at ``seconds``; None: Dask's own."""
    if seconds is None or client is None:
        return
    _set(getattr(client, "scheduler_comm", None), seconds)
    with contextlib.suppress(Exception):
        client.run_on_scheduler(_scheduler_to_client, client_id=client.id, seconds=seconds)


def _worker_stream(seconds: float, dask_worker=None) -> None:
    _set(getattr(dask_worker, "batched_stream", None), seconds)


def apply_workers(client, seconds: float | None) -> None:
    """Each worker's worker -> scheduler stream at ``seconds``, set now through ``client.run``
    (for workers the preload does not reach). Never raises."""
    if seconds is None or client is None:
        return
    with contextlib.suppress(Exception):
        client.run(_worker_stream, seconds)


def intervals(client) -> dict[str, Any]:
    """The intervals in force now (seconds), read from the streams themselves."""

    def on_scheduler(dask_scheduler=None, client_id: str = "") -> dict[str, Any]:
        c = dask_scheduler.client_comms.get(client_id)
        return {
            "scheduler -> client": getattr(c, "interval", None),
            "scheduler -> worker": sorted(
                {getattr(s, "interval", None) for s in dask_scheduler.stream_comms.values()}
            ),
        }

    def on_worker(dask_worker=None):
        return getattr(getattr(dask_worker, "batched_stream", None), "interval", None)

    out = {"client -> scheduler": getattr(getattr(client, "scheduler_comm", None), "interval", None)}
    out.update(client.run_on_scheduler(on_scheduler, client_id=client.id))
    out["worker -> scheduler"] = sorted(set(client.run(on_worker).values()))
    return out
