"""The worker layout, decided once per cluster: how many worker processes and how many threads
each, from what you set, the family's rule and the machine's facts."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from dask.utils import format_bytes

from .. import machine
from ..decision import Decision
from ..errors import UserError

SMALL_WORK_BYTES = 512 * 2**20
"""Planned memory at or under which a run on generated data gets one worker of this process's
threads where you set no layout (rule ``processes.small-work``)."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What the rules read of the machine the cluster is planned on."""

    cores: int
    """Usable cores of this process (its CPU affinity)."""
    memory_bytes: int
    gpus: tuple[tuple[int, int], ...] = ()
    """The visible GPUs as (index, memory bytes); read for a GPU cluster only."""

    @classmethod
    def here(cls, gpus: bool = False) -> "Facts":
        c = machine.cpu()
        seen = tuple((g["index"], g["memory_bytes"]) for g in machine.gpus()) if gpus else ()
        return cls(int(c["usable_cores"]), int(c["memory_bytes"]), seen)


def choose_gpus(resolved, facts: Facts, picked: Decision | None) -> Decision:
    """The GPUs a GPU cluster started here takes, one worker each: the ones you set (rule
    ``gpus.set``), else those a rule of the work picked (``picked``, rule ``gpus.work``), else
    every visible GPU; the first ``--workers`` of them where you set the workers."""
    c, src = resolved.settings.cluster, resolved.sources
    visible = [i for i, _ in facts.gpus]
    if c.gpus is not None:
        unknown = [g for g in c.gpus if visible and g not in visible]
        if unknown:
            raise UserError(
                f"GPU(s) {unknown} are not visible here (visible: {visible})",
                "pick visible GPUs with --gpus, e.g. --gpus " + ",".join(map(str, visible)),
            )
        gpus = list(c.gpus)
    else:
        gpus = list(picked.value) if picked is not None else visible
    if c.workers is not None and gpus and c.workers > len(gpus):
        raise UserError(
            f"--workers {c.workers} exceeds the {len(gpus)} GPU(s) selected",
            "a GPU cluster runs one worker per GPU: lower --workers or add --gpus",
        )
    gpus = gpus[: c.workers] if c.workers is not None else gpus
    if c.gpus is not None:
        return Decision(gpus, src.get("cluster.gpus", "default"), None, "gpus.set")
    if picked is not None:
        return picked
    return Decision(gpus, "rule", f"every visible GPU ({len(gpus)})", "gpus.visible")


def _per_gpu(resolved, gpus: Decision) -> Decision:
    """One worker per GPU the cluster takes (rule ``layout.per-gpu``), or the workers you set."""
    c, n = resolved.settings.cluster, len(gpus.value)
    if c.workers is not None:
        return Decision(n, resolved.sources.get("cluster.workers", "flag"), None, "layout.set")
    why = f"one worker per selected GPU: {n} GPU(s) {list(gpus.value)}"
    return Decision(n, "rule", why, "layout.per-gpu")


@dataclass(frozen=True, slots=True)
class Layout:
    """Workers and threads per worker of one cluster (``workers`` None: the kind counts them)."""

    threads: Decision
    workers: Decision | None = None
    why: str = ""
    """The layout rule's sentence (a local cluster's notes show it)."""
    cores: int | None = None
    """The cores the rule shared out (processes on this machine)."""
    processes: Decision | None = None
    """Whether the workers are processes (rules ``processes.*``); None: the kind's own."""


def processes_choice(
    resolved, kind: str, family, *, served: bool, estimate_bytes: int | None
) -> Decision | None:
    """Rules ``processes.*``: whether a CPU cluster started here runs its workers as processes
    (``cluster.processes``; auto: not for a run of at most :data:`SMALL_WORK_BYTES` of planned
    memory, ``estimate_bytes``). None where the cluster is not a CPU cluster started here."""
    if kind != "local":
        return None
    c, sources = resolved.settings.cluster, resolved.sources
    setting = c.processes
    numbers = {"setting": setting, "estimate_bytes": estimate_bytes, "small_bytes": SMALL_WORK_BYTES}
    if setting != "auto":
        return Decision(
            setting == "yes", sources.get("cluster.processes", "flag"), None, "processes.set", numbers
        )
    layout_set = {"workers": c.workers, "threads per worker": c.threads_per_worker}
    layout_set["a memory limit"] = None if c.memory_limit == "auto" else c.memory_limit
    yours = [name for name, value in layout_set.items() if value is not None]
    small = format_bytes(SMALL_WORK_BYTES)
    why = (
        "the cluster is kept up for other processes"
        if served
        else f"you set {', '.join(yours)}"
        if yours
        else "no one run's planned memory (a session)"
        if estimate_bytes is None
        else f"the run's planned memory, {format_bytes(estimate_bytes)}, is over {small}"
        if estimate_bytes > SMALL_WORK_BYTES
        else None
    )
    if why is None:
        rule = (
            f"auto: the run's planned memory, {format_bytes(estimate_bytes)}, is at most "
            f"{small}: one worker of this process's threads and no dashboard, "
            "since worker processes take seconds to start"
        )
    else:
        rule = f"auto: worker processes, as {why}"
    return Decision(why is not None, "rule", rule, "processes.small-work", numbers, documented=True)


def layout(
    resolved,
    family,
    collection: str | None,
    kind: str,
    facts: Facts,
    processes: Decision | None = None,
    gpus: Decision | None = None,
) -> Layout:
    """The layout of a ``kind`` cluster for ``family``'s ``collection`` work, the one rule every
    cluster kind reads.

    * ``local``: workers and threads from the family's rule on ``facts.cores``;
    * ``cuda``: the threads you set, else the family's, else 1 (one worker per GPU);
    * ``ssh``: the threads you set, else the family's, else Dask's default on the host;
    * ``srun``: the threads you set, else ``SLURM_CPUS_PER_TASK`` (1 when unset);
    * ``slurm``: a job's cores over its worker processes (dask-jobqueue's rule).

    ``processes``: rule ``processes.small-work`` may put one worker in this process; ``gpus``:
    the GPUs a ``cuda`` cluster takes, one worker each."""
    if kind not in _RULES:
        raise ValueError(f"a {kind!r} cluster has no layout of its own")
    c = resolved.settings.cluster
    own = family.worker_threads(collection)
    numbers = {"threads_set": c.threads_per_worker, "family_threads": own}
    if processes is not None and processes.rule_id == "processes.small-work" and not processes.value:
        return _in_process(processes, facts, numbers)
    out = _RULES[kind](resolved, family, collection, facts, own, numbers)
    if gpus is not None:
        out = dataclasses.replace(out, workers=_per_gpu(resolved, gpus))
    return out if processes is None else dataclasses.replace(out, processes=processes)


def _in_process(processes: Decision, facts: Facts, numbers) -> Layout:
    why = f"one worker of {facts.cores} thread(s) in this process (rule processes.small-work)"
    numbers = {**numbers, "cores": facts.cores}
    return Layout(
        workers=Decision(1, "rule", why, "processes.small-work", numbers),
        threads=Decision(facts.cores, "rule", why, "processes.small-work", numbers),
        why=why,
        cores=facts.cores,
        processes=processes,
    )


def _set(resolved, numbers) -> Decision:
    """The threads per worker you set."""
    c, src = resolved.settings.cluster, resolved.sources
    return Decision(
        c.threads_per_worker, src.get("cluster.threads-per-worker", "flag"), None, "layout.set", numbers
    )


def _local(resolved, family, collection, facts, own, numbers) -> Layout:
    c, src = resolved.settings.cluster, resolved.sources
    workers, threads, why, rule_id = family.layout_rule(
        collection, facts.cores, 0, workers=c.workers, threads=c.threads_per_worker
    )
    numbers = {**numbers, "workers_set": c.workers, "cores": facts.cores}
    return Layout(
        workers=Decision(workers, src.get("cluster.workers", "flag"), None, "layout.set", numbers)
        if c.workers is not None
        else Decision(workers, "rule", why, rule_id, numbers),
        threads=_set(resolved, numbers)
        if c.threads_per_worker is not None
        else Decision(threads, "family" if own is not None else "rule", why, rule_id, numbers),
        why=why,
        cores=facts.cores,
    )


def _cuda(resolved, family, collection, facts, own, numbers) -> Layout:
    if resolved.settings.cluster.threads_per_worker is not None:
        return Layout(threads=_set(resolved, numbers))
    if own is not None:
        why = f"{family.name} family for {collection or 'session'} work: {own} thread(s) per worker"
        return Layout(threads=Decision(own, "family", why, "layout.family", numbers))
    return Layout(threads=Decision(1, "rule", None, "layout.one-thread", numbers))


def _ssh(resolved, family, collection, facts, own, numbers) -> Layout:
    set_threads = resolved.settings.cluster.threads_per_worker
    threads = set_threads or own
    return Layout(
        threads=Decision(
            threads,
            resolved.sources.get("cluster.threads-per-worker", "family"),
            None if threads else "Dask's default: the remote host's cores",
            "layout.set" if set_threads else "layout.family" if threads else "layout.host-default",
            numbers,
        )
    )


def _srun(resolved, family, collection, facts, own, numbers) -> Layout:
    set_threads = resolved.settings.cluster.threads_per_worker
    per_task = os.environ.get("SLURM_CPUS_PER_TASK")
    from_task = int(per_task) if per_task and per_task.isdigit() else 1
    return Layout(
        threads=Decision(
            set_threads or from_task,
            resolved.sources.get("cluster.threads-per-worker", "rule"),
            None if set_threads else "SLURM_CPUS_PER_TASK (1 when unset)",
            "layout.set" if set_threads else "layout.srun-task",
            {**numbers, "cpus_per_task": per_task},
        )
    )


def _slurm(resolved, family, collection, facts, own, numbers) -> Layout:
    sl = resolved.settings.cluster.slurm
    return Layout(
        threads=Decision(
            sl.cores // sl.processes,
            resolved.sources.get("cluster.slurm.cores", "default"),
            f"cores / processes = {sl.cores} / {sl.processes} (dask-jobqueue's rule)",
            "layout.slurm-job",
            {"cores": sl.cores, "processes": sl.processes},
        )
    )


_RULES = {"local": _local, "cuda": _cuda, "ssh": _ssh, "srun": _srun, "slurm": _slurm}
