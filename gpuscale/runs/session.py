"""Sessions: a cluster built for one backend family, with that family's dask.config in scope.

:func:`configure` resolves the settings, selects the family and builds the cluster spec,
starting nothing; :class:`Session` starts that cluster and runs workloads on it; :func:`finish`
writes a record. Keywords are the CLI flags' names (``config.KEYWORDS``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import dask

from .. import audit as audit_mod
from .. import backends, cluster, config, errors, machine, memory, workloads
from ..backends import (
    convert,
    fallback,  # noqa: F401 - registers the host fallback with host_collections
    host_collections,
    session_knobs,
)
from ..cluster import logs, preflight
from ..data import inputs, outputs
from ..decision import Decision
from ..engines.scope import Route
from ..errors import OutputNotWritten, UserError, phase
from ..plan.cluster import kind_of
from ..records import results
from ..records.explained import explained
from ..records.report import session_html
from ..trace import capture, check_dir
from ..wire import protocols
from . import repeats, runner
from .observe import RunOptions


def configure(
    *,
    profile: str | None = None,
    collection: str | None = None,
    check: bool = True,
    served: bool = False,
    work: tuple[Any, Any] | None = None,
    **settings: Any,
):
    """Resolve settings, select the family and build the cluster spec, starting nothing:
    ``(resolved, selection, spec)``. ``check``: fail now when the family or the protocol cannot
    run here; ``served``: the cluster is kept up for other processes; ``work``: ``(cls, p,
    source)`` of the one run the cluster starts for (:func:`gpus_for_work`)."""
    resolved = config.resolve(profile, config.keywords_to_nested(settings))
    selection = backends.select(resolved.settings.backend, collection, check=False)
    if check:
        here = kind_of(resolved, selection.family) == selection.family.cluster_kind
        selection.family.check(selection.requested, collection, devices=here)
    spec = cluster.build_spec(resolved, selection.family, collection, served=served)
    if work is not None and not served:
        spec = gpus_for_work(resolved, selection.family, collection, spec, *work)
        spec = processes_for_work(resolved, selection.family, collection, spec, *work)
    if check:
        protocols.get(spec.protocol).check()
    return resolved, selection, spec


def one_gpu_choice(cls, gpus: list[int], resolved) -> Decision | None:
    """Rule ``gpus.work``: the first of ``gpus`` for a workload that gains nothing from more
    (:attr:`gpuscale.workloads.Workload.one_gpu`); None where the rule does not apply."""
    c = resolved.settings.cluster
    if cls.one_gpu is None or len(gpus) < 2 or c.gpus is not None or c.workers is not None:
        return None
    return Decision(
        gpus[:1],
        "rule",
        f"{cls.name} takes one GPU of the {len(gpus)} visible where its planned memory fits one: "
        f"{cls.one_gpu}",
        "gpus.work",
        {"visible": list(gpus)},
        documented=True,
    )


def gpus_for_work(resolved, family, collection: str | None, spec, cls, p, source=None):
    """``spec`` on the one GPU rule ``gpus.work`` (:func:`one_gpu_choice`) picks for a run of
    ``cls`` on generated data, where the memory check admits the run on it; else ``spec``."""
    if spec.kind != "cuda" or source is not None:
        return spec
    one = one_gpu_choice(cls, list(spec.gpus), resolved)
    if one is None:
        return spec
    narrowed = cluster.build_spec(resolved, family, collection, gpus=one)
    try:
        fits = _planned_memory(cls, p, family, narrowed)[2]["fits"]
    except ImportError:  # the plan needs the family's libraries: `explain` says so itself
        return spec
    return narrowed if fits else spec


def processes_for_work(resolved, family, collection: str | None, spec, cls, p, source=None):
    """``spec`` with rule ``processes.small-work`` applied for a run of ``cls`` on a CPU cluster
    started here (:func:`gpuscale.plan.layout.processes_choice`); unchanged for a source of
    unknown size."""
    if spec.kind != "local":
        return spec
    try:
        estimate = _planned_memory(cls, p, family, spec, source)[2]["estimate_bytes"]
    except ImportError:  # the plan needs the family's libraries: `explain` says so itself
        return spec
    if source is not None and not source.nbytes:
        return spec
    return cluster.build_spec(resolved, family, collection, estimate_bytes=estimate)


def check_run(
    cls,
    params: dict[str, Any],
    *,
    data: Any = None,
    validate: str | None = None,
    output: Any = None,
    overwrite: bool = False,
):
    """Check everything about a run of ``cls`` that needs no cluster: ``(params, RunInputs)``
    (:func:`gpuscale.data.inputs.check_run`)."""
    inputs.check_params(cls, params, data)
    p = cls.parse(params)  # bad parameters fail before anything starts
    if data is not None and not cls.input_formats:
        raise UserError(
            f"workload '{cls.name}' runs on generated data only",
            f"--input / data= work with: {', '.join(workloads.readers())}",
        )
    return p, inputs.check_run(cls, p, data=data, validate=validate, output=output, overwrite=overwrite)


def planned_memory(cls, p, family, spec) -> tuple[Any, Any, dict[str, Any]]:
    """The memory check of a cluster not started yet: ``(workload, context, verdict)``. A local
    CPU cluster that does not fit gets ``need_limit_bytes`` (:func:`least_limit`) or
    ``no_limit_fits_bytes``."""
    wl, ctx, verdict = _planned_memory(cls, p, family, spec)
    settable = spec.kind == "local" and not family.on_device and spec.memory_limit_bytes and spec.workers
    if not verdict["fits"] and not verdict.get("too_large") and settable:
        top = int(machine.cpu().get("memory_bytes") or 0) // int(spec.workers)
        need = least_limit(cls, p, family, spec, top) if top else None
        if need:
            verdict["need_limit_bytes"] = need
        elif top:
            verdict["no_limit_fits_bytes"] = top  # none this machine can give its workers
    return wl, ctx, verdict


def _planned_memory(cls, p, family, spec, source=None):
    wl = cls()
    ctx = workloads.Context(family, spec, None, data=source)
    ctx.memory = memory.planned(spec, family, cluster.planned_worker_memory(spec))
    wl.plan(p, ctx)
    return wl, ctx, memory.assess(wl, p, ctx, ctx.memory)


def with_limit(spec, family, limit: int):
    """``spec`` with workers of ``limit`` bytes, its spill target set again for them."""
    key = "distributed.worker.memory.target"
    target, _ = memory.target_fraction(limit, spec.threads_per_worker or 1, family)
    dask_config = {k: v for k, v in spec.dask_config.items() if k != key}
    if target is not None:
        dask_config[key] = target
    return spec.model_copy(
        update={
            "memory_limit": limit,
            "memory_limit_bytes": limit,
            "kwargs": {**spec.kwargs, "memory_limit": limit},
            "dask_config": dask_config,
        }
    )


def least_limit(cls, p, family, spec, top: int) -> int | None:
    """The least worker memory limit (whole MiB) at which the planned check admits the run;
    None over ``top``, the most each worker may get."""

    def fits(limit: int) -> bool:
        return _planned_memory(cls, p, family, with_limit(spec, family, limit))[2]["fits"]

    lo, hi = int(spec.memory_limit_bytes), min(top, int(spec.memory_limit_bytes) * 2)
    while not fits(hi):
        if hi >= top:
            return None
        lo, hi = hi, min(top, hi * 2)
    mib = 2**20
    lo, hi = lo // mib, -(-hi // mib)
    while hi - lo > 1:  # lo does not fit, hi does
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid * mib) else (mid, hi)
    return hi * mib if hi * mib <= top else None


def refuse_planned(cls, p, family, spec) -> None:
    """Raise the one-line error of a run whose planned memory check does not fit."""
    _, _, verdict = planned_memory(cls, p, family, spec)
    if not verdict["fits"]:
        raise memory.error(cls.name, verdict)


class Session:
    """A cluster built for one backend family, started and closed as a context manager; inside
    the block ``array.backend`` / ``dataframe.backend`` are the family's."""

    def __init__(
        self,
        backend: str | None = None,
        protocol: str | None = None,
        *,
        profile: str | None = None,
        collection: str | None = None,
        served: bool = False,
        work: tuple[Any, Any] | None = None,
        **settings: Any,
    ):
        resolved, selection, spec = configure(
            profile=profile,
            collection=collection,
            backend=backend,
            protocol=protocol,
            served=served,
            work=work,
            **settings,
        )
        self._init(resolved, selection, spec, collection)
        if not served:
            self.dask_log = logs.path_under(self.settings.results_dir)

    def _init(self, resolved, selection, spec, collection: str | None) -> None:
        self.resolved, self.selection, self.spec = resolved, selection, spec
        self.collection = collection
        self.client = None
        self.cluster = None
        self.startup_s: float | None = None
        self.security = None
        """A :class:`distributed.Security` to connect with instead of the spec's (None: the spec's)."""
        self.preflight: dict[str, Any] | None = None
        """The preflight of a running cluster this session joined (``cluster.preflight``); None: none."""
        self.topology: dict[str, Any] | None = None
        """What the workers of a cluster this session started see (:func:`_topology`); None: not asked."""
        self.check_first = True
        """Run the preflight when joining a running cluster (not in a runner sent into one)."""
        self.placement = None
        """Where :meth:`run` runs the runner and why (:func:`gpuscale.runs.remote.placed`); None: here."""
        self.applied: dict[str, Decision] = {}
        """The Dask settings this session applies to its block (:mod:`gpuscale.backends.session_knobs`)."""
        self.dask_log = None
        """Where Dask logs below ERROR go while open (:mod:`gpuscale.cluster.logs`); None: stderr."""
        self._stack: contextlib.ExitStack | None = None

    @classmethod
    def planned(cls, resolved, selection, spec, collection: str | None = None) -> "Session":
        """A session over :func:`configure`'s three values, made elsewhere (a runner's client)."""
        s = cls.__new__(cls)
        s._init(resolved, selection, spec, collection)
        return s

    @property
    def settings(self) -> config.Settings:
        return self.resolved.settings

    @property
    def family(self) -> backends.Family:
        return self.selection.family

    def __enter__(self) -> "Session":
        stack = contextlib.ExitStack()
        self._one_line = errors.one_line_errors()
        try:
            stack.enter_context(logs.kept_off_stderr(self.dask_log))
            with phase(
                "connecting to the cluster" if self.spec.kind == "existing" else "the cluster's start-up"
            ):
                t0 = time.perf_counter()
                here = self.placement is None or self.placement.value != "cluster"
                # overlaps the cluster's start; a runner sent into the cluster needs none here
                importing = self.family.import_in_background(self.collection) if here else None
                self.client, self.cluster = stack.enter_context(cluster.connect(self.spec, self.security))
                if importing is not None:  # done before any code here imports from those packages
                    importing.join()
                self.family.warm_workers(self.client, self.collection)
                if self.spec.kind == "existing" and self.check_first:
                    self.preflight = preflight.check(
                        self.client,
                        self.family,
                        self.settings.cluster.bandwidth_probe,
                        self.resolved.sources.get(preflight.PROBE_SETTING, "default"),
                    )
                elif self.spec.kind != "existing" and (
                    self.family.on_device or self.spec.kind in ("ssh", "slurm", "srun")
                ):
                    self.topology = _topology(self.client)
                self.startup_s = time.perf_counter() - t0
                self._dashboard_link = None
                if self.spec.kwargs.get("dashboard_address", "") is not None:  # None: no dashboard
                    with contextlib.suppress(Exception):  # no dashboard link is not an error
                        self._dashboard_link = getattr(self.client, "dashboard_link", None)
                self.applied = session_plan(self.resolved, self.family)
                knobs = {**self.family.dask_config(), **session_knobs.dask_settings(self.applied)}
                stack.enter_context(dask.config.set(knobs))
                session_knobs.entered(self.applied, stack)
                self._host_scope = stack.enter_context(
                    host_collections.scope(self.family, self.settings.session.host_collections)
                )
                self._route = stack.enter_context(Route.of(self).scope())
        except BaseException as e:
            stack.close()
            self._one_line(e)
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
        self.client = self.cluster = None
        done, self._one_line = getattr(self, "_one_line", None), None
        if done is not None:
            done(exc[1] if len(exc) > 1 else None)

    close = __exit__

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's URL, read when the session opened; None when closed."""
        return getattr(self, "_dashboard_link", None) if self.client else None

    @property
    def fallbacks(self) -> list[dict[str, Any]]:
        """Every host fallback made in this session's block so far, in order
        (:mod:`gpuscale.backends.fallback`); empty under the CPU family."""
        scope = getattr(self, "_host_scope", None)
        if scope is None:
            return []
        with scope.lock:
            return [f.as_dict() for f in scope.fallbacks]

    @property
    def queries(self) -> list[dict[str, Any]]:
        """Every Dask DataFrame collection computed in this block so far: line, engine and why."""
        route = getattr(self, "_route", None)
        return [q.as_dict() for q in route.queries] if route is not None else []

    def explain(self, collection) -> dict[str, Any]:
        """The engine a compute of ``collection`` (a Dask DataFrame, Series or scalar) would
        take in this session, with the rule and reason; nothing runs."""
        self._require_open()
        return self._route.explain(collection)

    def _require_open(self) -> None:
        if self.client is None:
            raise UserError("this session is not open", "use it as `with gpuscale.session(...) as s:`")

    def run(
        self,
        workload: str,
        *,
        repeat: int | None = None,
        warmup: int | None = None,
        memory_check: bool | None = None,
        results_dir: str | None = None,
        write: bool = True,
        trace: str | None = None,
        data: Any = None,
        validate: str | None = None,
        output: str | None = None,
        overwrite: bool = False,
        strict_backend: bool | None = None,
        audit: bool = True,
        progress: runner.Progress | None = None,
        **params: Any,
    ) -> results.Result:
        """Run a workload on this session's cluster: timed, validated and recorded.

        The backend audit (:mod:`gpuscale.audit`, the record's ``audit``) records the type of
        every task's output during generate and the timed repeats; ``audit=False`` skips it.
        ``strict_backend`` (default: the ``run.strict-backend`` setting): chunks of another
        family raise a UserError once the record is written. ``trace``: a new or empty folder to
        capture the run's trace into (:mod:`gpuscale.trace`). ``data``: your own data instead of
        generated data (a Dask collection or a file path), moved to this session's backend.
        ``validate``: ``"off"``, ``"fast"`` or ``"full"`` (default: the workload's). ``output``:
        write the validated result to this file, atomically; an existing one only with
        ``overwrite=True``. ``progress``: how to show the repeats
        (:data:`gpuscale.runs.observe.Progress`; None shows nothing)."""
        options = RunOptions(
            repeat=repeat,
            warmup=warmup,
            memory_check=memory_check,
            results_dir=results_dir,
            write=write,
            trace=trace,
            data=data,
            validate=validate,
            output=output,
            overwrite=overwrite,
            strict_backend=strict_backend,
            audit=audit,
            progress=progress,
        )
        return self.run_with(workload, options, params)

    def run_with(self, workload: str, options: RunOptions, params: dict[str, Any]) -> results.Result:
        """:meth:`run` with its options as one record and the workload's parameters as a dict."""
        out_dir = options.results_dir or self.settings.results_dir
        if options.write:
            results.check_writable(out_dir)
        result = self.record(workload, options, params)
        finish(result, out_dir if options.write else None)
        for what in ("output", "trace"):
            unwritten = (result.info or {}).get(what) or {}
            if unwritten.get("written") is False and result.valid is not False:  # valid, but not written
                raise OutputNotWritten(unwritten["why"], result, f"--{what}")
        return result

    def record(self, workload: str, options: RunOptions, params: dict[str, Any]) -> results.Result:
        """:meth:`run_with` up to its record, neither written nor judged (:func:`finish` does both)."""
        self._require_open()
        cls = workloads.get(workload)
        o = options
        p, user = check_run(
            cls, params, data=o.data, validate=o.validate, output=o.output, overwrite=o.overwrite
        )
        self.family.check(self.selection.requested, cls.collection)
        run_cfg = self.settings.run
        if o.trace is not None:
            check_dir(o.trace)
        sources = {**self.resolved.sources, **o.keyword_sources()}
        strict = run_cfg.strict_backend if o.strict_backend is None else bool(o.strict_backend)
        if strict and not o.audit:
            raise UserError(
                "strict_backend needs the backend audit, but audit=False was given",
                "leave audit on (the default) or drop strict_backend",
            )
        ctx = workloads.Context(self.family, self.spec, self.client, data=user.source, validate=user.validate)
        at_start = set(cluster.workers(self.client))
        built: list[results.Result] = []
        try:
            with contextlib.ExitStack() as stack:  # the trace folder is written on leaving
                tracer = None if o.trace is None else stack.enter_context(self._capture(o.trace, cls.name))
                outcome = runner.execute(
                    cls(),
                    p,
                    ctx,
                    warmup=run_cfg.warmup if o.warmup is None else o.warmup,
                    repeat=repeats.policy(
                        _repeat(run_cfg.repeat if o.repeat is None else o.repeat), run_cfg.auto_repeat
                    ),
                    memory_check=run_cfg.memory_check if o.memory_check is None else o.memory_check,
                    observers=runner.default_observers(
                        tracer=tracer, audit=o.audit, cancelled=o.cancelled, progress=o.progress
                    ),
                )
                if outcome.audit is not None:
                    outcome.audit["strict"] = strict
                if tracer is not None:
                    tracer.stop()  # the window ends with the run; the record is built outside it
                    tracer.audit = outcome.audit  # summary.json's "audit" section
                with phase("writing --output"):
                    written = _write_output(cls(), p, outcome, user)
                info = self.cluster_info(since=at_start)
                result = results.Result.build(
                    workload=cls.name,
                    params=cls().record_params(p, ctx),
                    data=cls().record_data(p, ctx),
                    backend=self.selection.requested,
                    family=self.family.name,
                    backend_reason=self.selection.reason,
                    protocol=self.spec.protocol,
                    knobs=self._knobs(cls.collection, info),
                    choices={k: dict(v) for k, v in ctx.choices.items()},
                    cluster=info,
                    settings_sources=sources,
                    times_s=outcome.times_s,
                    **results.summary(outcome.times_s, outcome.disturbed),
                    warmup_s=outcome.warmup_s,
                    startup_s=self.startup_s,
                    generate_s=outcome.generate_s,
                    validate_s=outcome.validate_s,
                    valid=outcome.validation.valid,
                    validation=outcome.validation.to_dict(),
                    info={
                        **outcome.info,
                        "unsettled_repeats": outcome.settle_warnings,
                        **written,
                        "dask_log": logs.written(self.dask_log),
                        **results.disturbed_info(outcome.times_s, outcome.disturbed),
                        "engine": _workload_engine(cls.name, user.source).record(),
                    },
                    repeats=outcome.repeats,
                    memory={
                        "estimate_bytes": outcome.estimate_bytes,
                        "capacity_bytes": outcome.capacity_bytes,
                        **(outcome.memory or {}),
                    },
                    audit=outcome.audit,
                    explained=explained(
                        self.resolved,
                        self.selection,
                        self.spec,
                        cls.collection,
                        ctx.choices,
                        ctx.decisions,
                        self.applied,
                    ),
                    versions=machine.versions(),
                    hardware=machine.hardware(),
                    dashboard_link=self.dashboard_link,
                    dashboard_link_live=True if self.dashboard_link else None,
                    trace=str(tracer.path) if tracer is not None else None,
                )
                if self.placement is not None:
                    result.explained["cluster"]["runner"] = runner_entry(self.placement)
                    result.info["runner"] = runner_info(self.placement)
                if tracer is not None:
                    tracer.annotate(result_id=result.id)
                built.append(result)
        except (OSError, UserError) as e:  # the trace folder, written as the block ends
            if not built or o.trace is None:
                raise
            return _trace_not_written(built[0], o.trace, e)
        return result

    def to_backend(
        self, obj: Any, backend: str | None = None, *, chunks=None, npartitions: int | None = None
    ):
        """Your Dask array or DataFrame with this session's chunk type (NumPy <-> CuPy,
        pandas <-> cuDF), or ``backend``'s; lazy, block by block. In-memory data (a NumPy array,
        a pandas frame) becomes a Dask collection whose tasks build their blocks on the backend;
        ``chunks`` / ``npartitions`` default to the family's budgets."""
        family = self.family if backend is None else backends.select(backend).family
        if not dask.is_dask_collection(obj) and hasattr(obj, "shape"):
            return convert.from_memory(obj, family, chunks=chunks, npartitions=npartitions)
        if convert.collection_kind(obj) is None:
            inputs.inspect_collection(obj)  # raises the one-line error for what it is
            raise UserError(f"cannot convert a {inputs.type_name(obj)}", "give a Dask array or DataFrame")
        return convert.to_backend(obj, family)

    @contextlib.contextmanager
    def audit(self, *, phase: str = "user", strict: bool = False):
        """Audit the tasks the block runs on this session's cluster (:mod:`gpuscale.audit`); yields
        the :class:`~gpuscale.audit.Audit`, whose ``summary`` holds it after the block.
        ``strict=True``: chunks of another family raise a UserError on leaving the block."""
        self._require_open()
        with audit_mod.audit(self.client, self.family, phase=phase, strict=strict) as a:
            yield a

    @contextlib.contextmanager
    def trace(self, directory: str, *, phase: str = "user"):
        """Capture a trace of the block into ``directory`` (:mod:`gpuscale.trace`), one phase
        named ``phase`` spanning it; yields the :class:`~gpuscale.trace.Capture` (``.phase(name)``
        marks more, ``.summary`` after the block). An error in the block writes nothing."""
        self._require_open()
        with self._capture(directory) as tracer, tracer.phase(phase):
            tracer.notes += [f"the session applied {k}" for k in session_knobs.described(self.applied)]
            with audit_mod.audit(self.client, self.family, phase=phase) as a:  # summary.json's "audit"
                yield tracer
            tracer.audit = a.summary

    def _capture(self, directory: str, workload: str | None = None):
        return capture(
            self.client,
            directory,
            workload=workload,
            backend=self.selection.requested,
            family=self.family.name,
            protocol=self.spec.protocol,
            nvtx=self.family.nvtx_phases,
        )

    def _knobs(self, collection: str | None, info: dict[str, Any]) -> dict[str, Any]:
        """The family's knobs for ``collection`` as a record holds them: ``threads_per_worker``
        is the cluster's, the family's own ``family_threads_per_worker``."""
        knobs = self.family.knobs.as_dict(collection)
        knobs["family_threads_per_worker"] = knobs["threads_per_worker"]
        running = info.get("running") or {}
        if running.get("workers"):
            knobs["threads_per_worker"] = running["threads"] // running["workers"]
        elif info.get("threads_per_worker") is not None:
            knobs["threads_per_worker"] = info["threads_per_worker"]
        return knobs

    def cluster_info(self, since: set[str] | None = None) -> dict[str, Any]:
        """The planned spec plus what the running cluster has (workers, threads, ``hosts``, TLS);
        with ``since`` (the workers at a run's start) the workers lost and joined during it."""
        info = self.spec.model_dump(mode="json")
        if self.client is not None:
            workers = cluster.workers(self.client)
            info["running"] = {
                "workers": len(workers),
                "threads": sum(w.get("nthreads", 0) for w in workers.values()),
                "scheduler": self.client.scheduler.address,
            }
            hosts: dict[str, dict[str, Any]] = {}
            for addr, w in sorted(workers.items()):
                host = w.get("host") or addr.split("://")[-1].rsplit(":", 1)[0]
                h = hosts.setdefault(host, {"workers": 0, "threads": 0, "addresses": []})
                h["workers"] += 1
                h["threads"] += w.get("nthreads", 0)
                h["addresses"].append(addr)
            info["hosts"] = hosts
            info["tls"] = self.client.scheduler.address.startswith("tls://")
            if self.preflight is not None:
                info["preflight"] = self.preflight
            info["pairs"] = _pairs(list(workers), self.preflight, self.topology)
            if since is not None:
                info["workers_lost"] = sorted(since - set(workers))
                info["workers_joined"] = sorted(set(workers) - since)
        return info

    def _repr_html_(self) -> str:
        return session_html(self)


def _workload_engine(name: str, source) -> Decision:
    """The engine of a workload's run (rule ``engine.workload``): its own route's Dask plan."""
    data = "your data" if source is not None else "generated data"
    return Decision(
        "dask",
        "rule",
        f"the {name} workload runs its own route's Dask plan on {data}; your own DataFrame "
        "code in a session runs on the engine route",
        "engine.workload",
        documented=True,
    )


def session_plan(resolved, family) -> dict[str, Decision]:
    """The Dask settings a session of ``family`` applies (:func:`gpuscale.backends.session_knobs.plan`)."""
    return session_knobs.plan(family, resolved.settings.session, resolved.sources)


def _topology(client) -> dict[str, Any] | None:
    """What the workers see (hosts, NVLink, RDMA ports, the GPU each holds), for the record;
    None when they cannot say."""
    try:
        seen = preflight.facts(client)
    except Exception:  # noqa: BLE001 - a record without the NVLink facts, not a failed run
        return None
    return {"hosts": preflight.hosts(seen), "worker_gpus": preflight.worker_gpus(seen)}


def _pairs(
    addresses: list[str], checked: dict[str, Any] | None, topology: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The record's ``cluster.pairs`` (:func:`gpuscale.cluster.preflight.pairs`)."""
    seen = preflight.seen_from(checked)
    source = "preflight"
    if seen is None:
        seen, source = preflight.seen_from(topology), "the started cluster's workers"
    return preflight.pairs(addresses, seen, (checked or {}).get("probe"), source if seen else "addresses")


def _trace_not_written(result: results.Result, trace: str, e: BaseException) -> results.Result:
    """``result`` kept, its trace not: ``info.trace`` says why."""
    why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    result.trace = None
    result.info["trace"] = {
        "written": False,
        "path": str(trace),
        "why": f"could not write the trace {trace} ({why})",
    }
    return result


def _repeat(value: Any) -> int | str:
    """A ``repeat`` keyword checked like the ``run.repeat`` setting (:func:`config.repeat_value`)."""
    try:
        return config.repeat_value(value)
    except ValueError as e:
        raise UserError(f"repeat {e}, got {value!r}", "e.g. repeat=5 or repeat='auto'") from None


def finish(result: results.Result, out_dir: str | None) -> results.Result:
    """Write the record under ``out_dir`` (None: not written), then raise
    :func:`gpuscale.audit.strict_error` where a strict audit saw chunks of another family."""
    if out_dir is not None:
        with phase("writing the record"):
            results.write(result, out_dir)
    audit = result.audit
    if audit is not None and audit.get("strict") and audit["foreign_tasks"]:
        raise audit_mod.strict_error(audit, result.path)
    return result


def _write_output(workload, p, outcome, user) -> dict[str, Any]:
    """Write ``--output`` unless the result failed validation; what the record's ``info`` says."""
    if user.output is None:
        return {}
    if outcome.validation.valid is False:
        return {"output": {"path": str(user.output), "written": False, "why": "the result failed validation"}}

    value = workload.output_value(outcome.output, p, user.output.suffix.lower())
    try:
        return {"output": {**outputs.write(value, user.output, user.overwrite), "written": True}}
    except UserError as e:  # the disk filled, the file appeared: the measurement is kept all the same
        return {"output": {"path": str(user.output), "written": False, "why": str(e)}}


def session(backend: str | None = None, protocol: str | None = None, **kw: Any) -> Session:
    """A :class:`Session` (use it in a ``with`` block)."""
    return Session(backend, protocol, **kw)


def runner_entry(placement: Decision) -> dict[str, Any]:
    """The record's ``explained.cluster.runner`` (value, source, rule)."""
    worker = placement.numbers.get("worker")
    value = f"cluster (worker {worker})" if worker else placement.value
    return {"value": value, "source": placement.source, "rule": placement.rule}


def runner_info(placement: Decision) -> dict[str, Any]:
    """The record's ``info.runner`` (the runner in the cluster adds its timings)."""
    return {"where": placement.value, "worker": placement.numbers.get("worker")}
