"""One-shot runs: check everything, build the cluster for one workload, run it, close it
(``gpuscale run`` and ``gpuscale.run(...)``)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from .. import config, workloads
from ..cluster import existing
from ..errors import ClusterGone, UserError, phase, phase_of
from ..records import results
from ..trace import check_dir
from . import remote, runner
from .observe import RunOptions
from .session import Session, check_run, finish, refuse_planned


def run(
    workload: str,
    *,
    backend: str | None = None,
    protocol: str | None = None,
    profile: str | None = None,
    repeat: int | None = None,
    warmup: int | None = None,
    memory_check: bool | None = None,
    results_dir: str | None = None,
    write: bool = True,
    cluster_settings: dict | None = None,
    trace: str | None = None,
    data: Any = None,
    validate: str | None = None,
    output: str | None = None,
    overwrite: bool = False,
    strict_backend: bool | None = None,
    in_cluster: bool | str | None = None,
    on_ready: Callable[[Session], Any] | None = None,
    hold: Callable[[Session, results.Result], Any] | None = None,
    progress: runner.Progress | None = None,
    **params: Any,
) -> results.Result:
    """One-shot: check everything, build the cluster for this workload, run it, close it.

    Workload parameters are keywords (``rows=...``); cluster settings go in
    ``cluster_settings`` (``{"workers": 2}``, the names of ``config.KEYWORDS``). ``trace``,
    ``data``, ``validate``, ``output``, ``overwrite``, ``strict_backend``, ``progress``: as
    :meth:`Session.run`, checked before the cluster starts. ``in_cluster``: where the runner
    runs (:func:`gpuscale.runs.remote.placement`). ``on_ready(session)`` is called once the
    cluster is up; ``hold(session, result)`` after the record is written, the cluster closing
    when it returns.
    """

    cls = workloads.get(workload)
    options = RunOptions(
        write=write,
        trace=trace,
        data=data,
        validate=validate,
        output=output,
        overwrite=overwrite,
        progress=progress,
    )  # the rest are the session's settings
    p, checked = check_run(cls, params, data=data, validate=validate, output=output, overwrite=overwrite)
    settings = config.merge_keywords(
        cluster_settings,
        backend=backend,
        protocol=protocol,
        results_dir=results_dir,
        repeat=repeat,
        warmup=warmup,
        memory_check=memory_check,
        strict_backend=strict_backend,
        in_cluster=in_cluster,
    )
    work = (cls, p, checked.source)  # the GPUs it takes, where its workers run (rules gpus.work, processes.*)
    s = Session(profile=profile, collection=cls.collection, work=work, **settings)
    if data is None and s.settings.run.memory_check and s.spec.kind in ("local", "cuda"):
        refuse_planned(cls, p, s.family, s.spec)  # what `explain` says, before the cluster starts
    if write:
        results.check_writable(s.settings.results_dir)
    if trace is not None:
        check_dir(trace)  # before the cluster starts
    s.placement = remote.placement(
        s.resolved,
        s.spec,
        trace=trace,
        data=data,
        output=output,
        hooks=on_ready is not None or hold is not None,
    )

    try:
        with existing.reconnect_reported() if s.spec.kind == "existing" else contextlib.nullcontext():
            return _run(s, cls, options, params, on_ready=on_ready, hold=hold)
    except (UserError, ClusterGone):
        raise
    except Exception as e:  # noqa: BLE001 - a failure because the scheduler went away says so
        if s.spec.kind != "existing" or existing.answers(s.spec.scheduler):
            raise
        raise ClusterGone(s.spec.scheduler, phase_of(e, "the run")) from e


def _run(s: Session, cls, options: RunOptions, params: dict[str, Any], *, on_ready, hold) -> results.Result:
    """The run on the session's cluster, the runner where ``s.placement`` says."""
    if s.placement.value == "cluster":
        try:
            with phase("the run on a worker of the cluster"):
                result = remote.run_in_cluster(s, cls.name, s.placement, options, params)
            return finish(result, s.settings.results_dir if options.write else None)
        except remote.NotServed as e:
            if s.settings.run.in_cluster is True:
                raise UserError(
                    f"--in-cluster: {e}", "install the same gpuscale on the workers, or drop --in-cluster"
                ) from None
            s.placement = remote.placed(
                "client", s.placement.source, f"auto: {e}, so the runner stays in this process"
            )
    with s:
        if on_ready is not None:
            on_ready(s)
        result = s.run_with(cls.name, options, params)
        if hold is not None:
            hold(s, result)
    if s.spec.kind != "existing":  # the cluster it started is closed: its dashboard is gone
        result.dashboard_link_live = results.link_live_after_run(result)
    return result
