"""``gpuscale explain``: what a run with the same arguments would do, starting nothing."""

from __future__ import annotations

from typing import Any

from .. import config, workloads
from .. import memory as _memory
from ..errors import UserError
from ..records.explained import explained
from . import remote, runner
from .session import configure, planned_memory, runner_entry, session_plan


def explain(
    workload: str,
    *,
    backend: str | None = None,
    protocol: str | None = None,
    profile: str | None = None,
    cluster_settings: dict | None = None,
    trace: str | None = None,
    output: str | None = None,
    dashboard: bool = False,
    **params: Any,
) -> dict[str, Any]:
    """The plan of ``run(workload, ...)`` with the same arguments, starting nothing, as a plain
    dict: settings, family, cluster spec, choices, every knob with its source and rule, where
    the runner would run, the memory check and the audit. Run settings go in
    ``cluster_settings``; ``trace`` / ``output`` / ``dashboard`` only change the runner's place."""
    cls = workloads.get(workload)
    p = cls.parse(params)
    settings = config.merge_keywords(cluster_settings, backend=backend, protocol=protocol)
    resolved, selection, spec = configure(
        profile=profile, collection=cls.collection, check=False, work=(cls, p, None), **settings
    )
    fam = selection.family
    notes: list[str] = []
    usable, why = fam.probe()
    if not usable:
        notes.append(
            f"the {fam.name} family cannot run here ({why}): this is the plan a run would follow where it can"
        )
    try:
        wl, ctx, memory = planned_memory(cls, p, fam, spec)
    except ImportError as e:
        raise UserError(
            f"explaining {cls.name} on the {fam.name} family needs the module "
            f"'{e.name}' here (the workload's plan asks it)",
            "explain it where that family's libraries are installed",
        ) from None
    run_cfg = resolved.settings.run
    memory["checked"] = bool(run_cfg.memory_check)
    if run_cfg.memory_check and not memory["fits"]:
        notes.append("the run would stop before starting work: " + str(_memory.error(cls.name, memory)))
    if spec.workers is not None and spec.threads_per_worker is not None:
        notes.append(
            f"thread-based rules used the planned {spec.workers} worker(s) x "
            f"{spec.threads_per_worker} thread(s)"
        )
    elif spec.scheduler is not None:
        notes.append(
            f"the running cluster at {spec.scheduler} is not asked: thread-based rules assumed "
            f"{ctx.total_threads} thread(s) and memory is not checked; a run uses what it has"
        )
    strict = getattr(run_cfg, "strict_backend", False)
    knobs = explained(
        resolved, selection, spec, cls.collection, ctx.choices, session=session_plan(resolved, fam)
    )
    try:
        placement = remote.placement(resolved, spec, trace=trace, output=output, hooks=dashboard)
        knobs["cluster"]["runner"] = runner_entry(placement)
    except UserError as e:
        knobs["cluster"]["runner"] = {
            "value": None,
            "source": resolved.sources.get("run.in-cluster", "default"),
            "rule": str(e),
        }
        notes.append(f"the run would stop before starting work: {e}")
    per_host = {"per_host": spec.per_host} if spec.per_host is not None else {}
    return {
        "workload": cls.name,
        "collection": cls.collection,
        "params": wl.record_params(p, ctx) if hasattr(wl, "record_params") else p.model_dump(mode="json"),
        "backend": selection.requested,
        "family": fam.name,
        "reason": selection.reason,
        "cluster": spec.model_dump(mode="json"),
        **per_host,
        "profile": resolved.profile,
        "settings_sources": resolved.sources,
        "run": {
            "warmup": run_cfg.warmup,
            "repeat": run_cfg.repeat,
            "memory_check": run_cfg.memory_check,
            "strict_backend": strict,
            **({"auto_repeat": run_cfg.auto_repeat.model_dump()} if run_cfg.repeat == "auto" else {}),
        },
        "choices": {k: dict(v) for k, v in ctx.choices.items()},
        "explained": knobs,
        "memory": memory,
        "audit": {
            "scope": runner.AUDIT_SCOPE,
            "expected_family": fam.name,
            "strict_backend": strict,
            "on_foreign_chunks": "error, exit 2 (the record is written first)"
            if strict
            else "reported in the record and the run summary",
        },
        "notes": notes,
    }
