"""Every tuned choice explained: each knob's value, where it came from, and the rule.

:func:`explained` lays the knobs of one run out by scope, each as ``{"value", "source",
"rule"}``:

``cluster``
    backend and family, protocol and transports, workers, threads per worker, memory limit,
    GPUs and the RMM pool: from the resolved settings (``config.resolve``) and the planned
    :class:`~gpuscale.cluster.ClusterSpec`.
``family``
    the backend family's knobs (chunk and partition budgets, shuffle method, split_out
    budget, tree fan-in, pre-imports).
``workload``
    the workload's own choices (``Context.choose``: chunk / partition sizes, split_out,
    shuffle method, SVD route, ...). A choice a route settles at run time (``Context.decide``,
    e.g. svd's ``route``: planned ``auto``, decided ``gram`` from the condition estimate)
    shows the decision, with ``planned`` / ``planned_rule`` keeping the plan.

Sources: ``default`` / ``user-yaml`` / ``profile`` / ``env`` / ``dask.config`` / ``flag`` /
``keyword`` (the settings layer the value came from), ``family`` (the backend family's
default), ``rule`` (chosen by a rule: ``rule`` says which, with its numbers), ``cluster``
(whatever a running cluster has).

:func:`plan` is ``gpuscale explain`` / :func:`gpuscale.api.explain`: the same settings,
family, cluster spec, workload plan and memory headroom a run would use, starting nothing.
The record of a run carries the same ``explained`` (``Result.explained``), so the two can be
compared key by key.
"""
from __future__ import annotations

from typing import Any

from dask.utils import format_bytes

from . import machine

FAMILY_KNOBS = {
    "chunk_bytes": "target bytes of one array chunk (row block)",
    "partition_bytes": "target bytes of one DataFrame partition",
    "shuffle_method": "shuffle used when a result is split over partitions (None: Dask's default)",
    "split_out_budget_bytes": "a groupby result estimated under this stays in one partition",
    "split_every": "fan-in of tree reductions (None: all partials in one combine)",
    "pre_import": "libraries each worker imports at start",
}


def _entry(value: Any, source: str, rule: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"value": value, "source": source, "rule": rule, **extra}


def cluster_knobs(resolved, selection, spec, collection: str | None) -> dict[str, dict[str, Any]]:
    """The cluster's knobs: value, source and rule (see the module docstring)."""
    from .cluster import protocols
    src = resolved.sources
    s = resolved.settings
    c = s.cluster
    fam = selection.family
    out: dict[str, dict[str, Any]] = {}
    out["backend"] = _entry(selection.requested, src.get("backend", "default"))
    out["family"] = _entry(fam.name, "rule" if selection.requested == "auto" else src.get("backend", "default"),
                           selection.reason)
    existing = spec.scheduler is not None
    out["protocol"] = _entry(spec.protocol, "scheduler address" if existing and s.protocol != spec.protocol
                             else src.get("protocol", "default"))
    proto = protocols.get(spec.protocol) if spec.protocol in protocols.names() else None
    switches = {k: getattr(c.ucx, k) for k in ("nvlink", "infiniband", "rdmacm") if getattr(c.ucx, k) is not None}
    if switches and proto is not None and proto.switches_transports:
        key = f"cluster.ucx.{next(iter(switches))}"
        out["transports"] = _entry(spec.transports or switches, src.get(key, "flag"),
                                   "switches you set: " + ", ".join(f"{k}={v}" for k, v in switches.items()))
    else:
        label = proto.transport_label() if proto is not None else spec.protocol
        out["transports"] = _entry(spec.transports or {"selection": label}, "rule",
                                   f"{proto.description if proto else spec.protocol}: transports {label}"
                                   + ("; UCX switches apply to GPU clusters only (ignored)" if switches else ""))
    if existing:
        for k in ("workers", "threads_per_worker", "memory_limit"):
            out[k] = _entry(None, "cluster", f"whatever the running cluster at {spec.scheduler} has")
    else:
        layout = next((n.removeprefix("layout: ") for n in spec.notes if n.startswith("layout: ")), None)
        if spec.gpus is not None:
            out["gpus"] = _entry(list(spec.gpus), src.get("cluster.gpus", "default") if c.gpus is not None
                                 else "rule", None if c.gpus is not None else
                                 f"every visible GPU ({len(spec.gpus)})")
            wrule = f"one worker per selected GPU: {len(spec.gpus)} GPU(s) {list(spec.gpus)}"
        else:
            wrule = layout
        out["workers"] = _entry(spec.workers, src.get("cluster.workers", "flag") if c.workers is not None
                                else "rule", None if c.workers is not None else wrule)
        tpw_family = fam.knobs.threads_per_worker.get(collection or "session")
        if c.threads_per_worker is not None:
            out["threads_per_worker"] = _entry(spec.threads_per_worker,
                                               src.get("cluster.threads-per-worker", "flag"))
        elif tpw_family is not None:
            out["threads_per_worker"] = _entry(spec.threads_per_worker, "family",
                                               layout or f"{fam.name} family for {collection or 'session'} "
                                               f"work: {tpw_family} thread(s) per worker")
        else:
            out["threads_per_worker"] = _entry(spec.threads_per_worker, "rule", layout)
        out["memory_limit"] = _memory_limit(resolved, spec)
    out["rmm_pool_size"] = _rmm(resolved, spec, fam)
    return out


def _memory_limit(resolved, spec) -> dict[str, Any]:
    setting = resolved.settings.cluster.memory_limit
    source = resolved.sources.get("cluster.memory-limit", "default")
    value = spec.memory_limit_bytes
    if setting == "auto":
        cpu = machine.cpu()
        threads = spec.threads_per_worker or 1
        cores = machine.usable_cores()
        if spec.gpus is not None:  # LocalCUDACluster: host memory split over its workers
            rule = (f"auto: this machine's {format_bytes(cpu['memory_bytes'])} of host memory split over "
                    f"{max(1, spec.workers or 1)} worker(s) = {format_bytes(value or 0)} each")
        else:
            rule = (f"auto: this machine's {format_bytes(cpu['memory_bytes'])} x min(1, {threads} thread(s) "
                    f"/ {cores} core(s)) = {format_bytes(value or 0)} per worker (distributed's rule)")
        return _entry(value, source, rule, setting=setting)
    return _entry(value, source, None if value is None else f"{setting!r} = {format_bytes(value)} per worker",
                  setting=setting)


def _rmm(resolved, spec, fam) -> dict[str, Any]:
    setting = resolved.settings.cluster.rmm.pool_size
    source = resolved.sources.get("cluster.rmm.pool-size", "default")
    if spec.rmm is None:
        if setting == "auto":
            return _entry(None, "family", f"the {fam.name} family uses no RMM pool")
        if setting is None:
            return _entry(None, source, "no pool (set by you)")
        return _entry(None, source, f"{setting!r} was set, but the {fam.name} family's cluster has no RMM pool")
    pool = spec.rmm["pool_size"]
    rule = spec.rmm.get("source")
    if isinstance(pool, float) and pool <= 1 and spec.gpus:
        sizes = {g["index"]: g["memory_bytes"] for g in machine.gpus()}
        known = [sizes[g] for g in spec.gpus if g in sizes]
        if known:
            rule = f"{rule}: {pool:g} x {format_bytes(min(known))} = {format_bytes(int(pool * min(known)))} per GPU"
    return _entry(pool, "family" if setting == "auto" else source, rule)


def family_knobs(family, collection: str | None) -> dict[str, dict[str, Any]]:
    d = family.knobs.as_dict(collection)
    return {k: _entry(d[k], "family", f"{family.name} family default: {why}")
            for k, why in FAMILY_KNOBS.items() if k in d}


def workload_knobs(choices: dict[str, dict], decisions: dict[str, dict] | None = None) -> dict[str, dict[str, Any]]:
    out = {k: dict(v) for k, v in choices.items()}
    for k, d in (decisions or {}).items():
        planned = choices.get(k, {})
        out[k] = {**d, "planned": planned.get("value"), "planned_rule": planned.get("rule")}
    return out


def explained(resolved, selection, spec, collection: str | None, choices: dict[str, dict],
              decisions: dict[str, dict] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """Every knob of a run by scope: ``{"cluster": ..., "family": ..., "workload": ...}``."""
    return {"cluster": cluster_knobs(resolved, selection, spec, collection),
            "family": family_knobs(selection.family, collection),
            "workload": workload_knobs(choices, decisions)}


def planned_worker_memory(spec) -> list[int]:
    """Memory per planned worker that holds the chunks, as ``Family.worker_memory`` reports
    it once running: device memory per GPU for a GPU cluster, the host memory limit
    otherwise; [] when unknown (a running scheduler's)."""
    if spec.scheduler is not None:
        return []
    if spec.gpus is not None:
        sizes = {g["index"]: g["memory_bytes"] for g in machine.gpus()}
        return [sizes[g] for g in spec.gpus if g in sizes]
    if spec.memory_limit_bytes and spec.workers:
        return [int(spec.memory_limit_bytes)] * int(spec.workers)
    return []


def plan(workload: str, *, backend: str | None = None, protocol: str | None = None,
         profile: str | None = None, cluster_settings: dict | None = None,
         placement_args: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
    """What ``gpuscale run`` with the same arguments would do, starting nothing: settings and
    their sources, family, cluster spec, the workload's choices, every knob explained, the
    memory headroom and the audit settings, as a plain dict."""
    from . import api, runner, serve, workloads
    from .errors import UserError
    cls = workloads.get(workload)
    p = cls.parse(params)
    extra = dict(cluster_settings or {})
    backend = backend or extra.pop("backend", None)
    protocol = protocol or extra.pop("protocol", None)
    resolved, selection, spec = api.plan(profile=profile, collection=cls.collection, check=False,
                                         backend=backend, protocol=protocol, **extra)
    fam = selection.family
    notes: list[str] = []
    usable, why = fam.probe()
    if not usable:
        notes.append(f"the {fam.name} family cannot run here ({why}): this is the plan a run "
                     "would follow where it can")
    wl = cls()
    ctx = workloads.Context(fam, spec, None)
    try:
        wl.plan(p, ctx)
    except ImportError as e:
        raise UserError(f"explaining {cls.name} on the {fam.name} family needs the module "
                        f"'{e.name}' here (the workload's plan asks it)",
                        "explain it where that family's libraries are installed") from None
    memory = runner.headroom(wl, p, ctx, planned_worker_memory(spec))
    run_cfg = resolved.settings.run
    memory["checked"] = bool(run_cfg.memory_check)
    if run_cfg.memory_check and not memory["fits"]:
        notes.append("the run would stop before starting work: " + str(runner.memory_error(cls.name, memory)))
    if spec.workers is not None and spec.threads_per_worker is not None:
        notes.append(f"thread-based rules used the planned {spec.workers} worker(s) x "
                     f"{spec.threads_per_worker} thread(s)")
    elif spec.scheduler is not None:
        notes.append(f"the running cluster at {spec.scheduler} is not asked: thread-based rules assumed "
                     f"{ctx.total_threads} thread(s) and memory is not checked; a run uses what it has")
    strict = getattr(run_cfg, "strict_backend", False)
    knobs = explained(resolved, selection, spec, cls.collection, ctx.choices)
    try:
        knobs["cluster"]["runner"] = serve.placement(resolved, spec, **(placement_args or {})).entry()
    except UserError as e:
        knobs["cluster"]["runner"] = {"value": None, "source": resolved.sources.get("run.in-cluster", "default"),
                                      "rule": str(e)}
        notes.append(f"the run would stop before starting work: {e}")
    return {
        "workload": cls.name, "collection": cls.collection,
        "params": wl.record_params(p, ctx) if hasattr(wl, "record_params") else p.model_dump(mode="json"),
        "backend": selection.requested, "family": fam.name, "reason": selection.reason,
        "cluster": spec.model_dump(mode="json"), "profile": resolved.profile,
        "settings_sources": resolved.sources,
        "run": {"warmup": run_cfg.warmup, "repeat": run_cfg.repeat, "memory_check": run_cfg.memory_check,
                "strict_backend": strict},
        "choices": ctx.choices,
        "explained": knobs,
        "memory": memory,
        "audit": {"scope": runner.AUDIT_SCOPE, "expected_family": fam.name,
                  "strict_backend": strict,
                  "on_foreign_chunks": "error, exit 2 (the record is written first)" if strict
                  else "reported in the record and the run summary"},
        "notes": notes,
    }
