"""The runner in a running cluster: where ``gpuscale run`` runs its runner, and running it there.

:func:`placement` decides from ``run.in-cluster``; :func:`run_in_cluster` sends the runner to a
worker and returns the record it built, JSON text read as data (docs/threat-model.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from typing import Any

from .._version import __version__
from ..cluster import existing, preflight, security
from ..decision import Decision
from ..errors import UserError, shown
from ..records import results
from .observe import RunOptions
from .session import Session, _pairs


def placed(where: str, source: str, why: str, worker: str | None = None) -> Decision:
    """Where ``gpuscale run`` runs its runner: ``"client"`` (this process) or ``"cluster"`` (a
    task on a worker, its address in ``numbers`` once placed), and why."""
    return Decision(where, source, why, None, {"worker": worker})


IN_CLUSTER_WHY = (
    "the runner goes to a worker of the running cluster, which has imported the chunk "
    "libraries and holds the device context already, so this process imports neither; "
    "the record comes back here and is written here"
)


def placement(
    resolved, spec, *, trace: Any = None, data: Any = None, output: Any = None, hooks: bool = False
) -> Decision:
    """Where ``api.run`` runs the runner, from ``run.in-cluster``: auto takes the cluster when
    the run joins a running scheduler and writes no file but the record; ``true`` where it
    cannot raises a UserError naming why."""
    setting = resolved.settings.run.in_cluster
    source = resolved.sources.get("run.in-cluster", "default")
    if setting is False:
        return placed("client", source, "run.in-cluster is false: the runner stays in this process")
    if spec.kind != "existing":
        if setting is True:
            raise UserError(
                "--in-cluster runs the runner on a running cluster's worker, but no scheduler was named",
                "add --scheduler ADDRESS (e.g. from `gpuscale cluster up`) or drop --in-cluster",
            )
        return placed(
            "client",
            source,
            "auto: this run starts its own cluster, whose workers are as "
            "new as this process; the runner stays here",
        )
    blockers = [
        why
        for why, present in (
            ("--trace writes its folder from this process", trace is not None),
            ("--output writes the result file from this process", output is not None),
            ("--dashboard holds the cluster from this process", hooks),
            (
                "data= is a collection in this process",
                data is not None and not isinstance(data, (str, os.PathLike)),
            ),
        )
        if present
    ]
    if blockers:
        if setting is True:
            raise UserError(
                f"--in-cluster cannot run this: {'; '.join(blockers)}",
                "drop --in-cluster (the runner then stays in this process)",
            )
        return placed("client", source, f"auto: {'; '.join(blockers)}, so the runner stays here")
    return placed(
        "cluster",
        source,
        ("auto: a running scheduler was named; " if setting == "auto" else "run.in-cluster is true: ")
        + IN_CLUSTER_WHY,
    )


class NotServed(Exception):
    """The cluster's workers cannot run this gpuscale's runner (not installed, another version)."""


def run_in_cluster(
    session,
    workload: str,
    where: Decision,
    options: RunOptions,
    params: dict[str, Any],
):
    """Run ``session.record(workload, ...)`` in a task on a worker of the session's running
    cluster and return the record it built, not written; :class:`NotServed` where the workers
    cannot run this gpuscale."""
    age_s = _since_process_start()  # a fresh command: its interpreter, imports and settings
    t0 = time.perf_counter()
    _, client = existing.Existing().start(session.spec)
    try:
        connect_s = time.perf_counter() - t0
        checked = preflight.check(  # before any work; its runner does not check again
            client,
            session.family,
            session.settings.cluster.bandwidth_probe,
            session.resolved.sources.get(preflight.PROBE_SETTING, "default"),
        )
        data = options.data
        if isinstance(data, (str, os.PathLike)):
            data = os.path.abspath(os.fspath(data))  # the worker's working folder is not ours
        request = {
            "version": __version__,
            "resolved": session.resolved,
            "selection": session.selection,
            "spec": session.spec,
            "collection": session.collection,
            "workload": workload,
            "placement": where,
            "client": client.id,
            "data": data,
            "validate": options.validate,
            "params": params,
        }
        t1 = time.perf_counter()
        future = client.submit(
            _runner, request, pure=False, key=f"gpuscale-runner-{workload}-{uuid.uuid4().hex[:8]}"
        )
        try:
            result = _record(future.result())
        except ImportError as e:
            if (getattr(e, "name", None) or "").split(".")[0] == "gpuscale":
                raise NotServed(f"the workers cannot import gpuscale ({e})") from None
            raise
        except RuntimeError as e:  # the scheduler unpickles the task first
            if "deserialization of the task graph" in str(e):
                cause = e.__cause__ or e.__context__
                raise NotServed(
                    f"the scheduler cannot read this gpuscale's runner task "
                    f"({type(cause).__name__}: {cause}; another gpuscale version there?)"
                ) from None
            raise
        round_trip_s = time.perf_counter() - t1
    finally:
        t2 = time.perf_counter()
        with contextlib.suppress(Exception):
            client.close()
        close_s = time.perf_counter() - t2
    result.cluster["preflight"] = checked
    addresses = [a for h in (result.cluster.get("hosts") or {}).values() for a in h.get("addresses", [])]
    result.cluster["pairs"] = _pairs(addresses, checked)
    runner = result.info.setdefault("runner", {})
    runner.update(
        client_age_s=age_s,
        client_connect_s=connect_s,
        client_close_s=close_s,
        round_trip_s=round_trip_s,
        dispatch_s=max(0.0, round_trip_s - runner.get("runner_s", 0.0)),
    )
    result.startup_s = connect_s + (result.startup_s or 0.0)
    return result


def _since_process_start() -> float | None:
    """Seconds since this process started; None where the system does not say (Linux does)."""
    with contextlib.suppress(Exception):
        with open("/proc/self/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime, in ticks
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started / os.sysconf("SC_CLK_TCK"))
    return None


def _runner(request: dict[str, Any]):
    """The task ``run_in_cluster`` submits (runs on a worker)."""
    from distributed import get_worker, secede

    if request["version"] != __version__:
        raise NotServed(f"the workers have gpuscale {__version__}, this process {request['version']}")
    t0 = time.perf_counter()
    secede()  # the runner's own tasks need this worker's thread(s)
    worker = get_worker()
    address = worker.scheduler.address  # as this worker reaches the scheduler
    spec = request["spec"]
    spec = spec.model_copy(update={"scheduler": address, "kwargs": {**spec.kwargs, "address": address}})
    s = Session.planned(request["resolved"], request["selection"], spec, request["collection"])
    s.security = security.as_client(worker.security)  # the client's credentials file may not be on this host
    s.check_first = False  # its client ran the preflight
    p = request["placement"]
    s.placement = placed(p.value, p.source, p.rule, worker.address)
    with s:

        def cancelled() -> bool:
            return not s.client.run_on_scheduler(_has_client, request["client"])

        options = RunOptions(data=request["data"], validate=request["validate"], cancelled=cancelled)
        result = s.record(request["workload"], options, request["params"])
    result.info["runner"].update(pid=os.getpid(), runner_s=time.perf_counter() - t0)
    return result.to_json()


def _record(text: Any):
    """The runner's record, read from JSON text (never an object to unpickle)."""
    fix = "check that the cluster's workers run this version of gpuscale, or pass --no-in-cluster"
    if not isinstance(text, str):
        raise UserError(
            f"the cluster's runner sent back a {type(text).__name__}, not a record's JSON text", fix
        )
    try:
        return results.Result.model_validate(json.loads(text))
    except ValueError as e:
        raise UserError(
            f"the cluster's runner sent back a record that does not read as one ({shown(str(e), 120)})", fix
        ) from None


def _has_client(client_id: str, dask_scheduler=None) -> bool:
    return client_id in dask_scheduler.clients
