"""The worker layout, decided once per cluster: how many worker processes and how many threads
each, from what you set, the family's threads per worker for the work's collection and the
cores the workers get (the machine's facts)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from dask.utils import format_bytes

from .. import machine
from ..decision import Decision

SMALL_WORK_BYTES = 512 * 2**20
"""Planned memory at or under which a run on generated data gets one worker of this process's
threads where you set no layout (rule ``processes.small-work``): worker processes take seconds
to start, more than such a run's work (docs/decisions.md)."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What the rules read of the machine the cluster is planned on."""

    cores: int
    """Usable cores of this process (its CPU affinity)."""
    memory_bytes: int

    @classmethod
    def here(cls) -> "Facts":
        c = machine.cpu()
        return cls(int(c["usable_cores"]), int(c["memory_bytes"]))


@dataclass(frozen=True, slots=True)
class Layout:
    """Workers and threads per worker of one cluster. ``workers`` is None where the cluster kind
    counts them itself (one per GPU, per host entry, per SLURM job)."""

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
    """Rules ``processes.*``: whether a CPU cluster started here runs its workers as processes.
    ``cluster.processes`` yes / no as you set it; auto: this process's threads for a run whose
    planned memory (``estimate_bytes``; None: no one run, as in a session) is at most
    :data:`SMALL_WORK_BYTES` where you set no layout and nothing keeps the cluster up, else
    processes. None where the cluster is not a CPU cluster started here."""
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
    if why is not None:
        return Decision(
            True,
            "rule",
            f"auto: worker processes, as {why}",
            "processes.small-work",
            numbers,
            documented=True,
        )
    return Decision(
        False,
        "rule",
        f"auto: the run's planned memory, {format_bytes(estimate_bytes)}, is at most "
        f"{small}: one worker of this process's threads and no dashboard, "
        "since worker processes take seconds to start",
        "processes.small-work",
        numbers,
        documented=True,
    )


def layout(
    resolved, family, collection: str | None, kind: str, facts: Facts, processes: Decision | None = None
) -> Layout:
    """The layout of a ``kind`` cluster for ``family``'s ``collection`` work, the one rule every
    cluster kind reads.

    * ``local``: workers and threads from the family's rule on ``facts.cores``;
    * ``cuda``: the threads you set, else the family's, else 1 (one worker per GPU);
    * ``ssh``: the threads you set, else the family's, else Dask's default on the host;
    * ``srun``: the threads you set, else ``SLURM_CPUS_PER_TASK`` (1 when unset);
    * ``slurm``: a job's cores over its worker processes (dask-jobqueue's rule).

    A running cluster (``existing``) has its own. ``processes``: rule ``processes.small-work``'s
    decision puts one worker of every core's thread in this process."""
    if kind not in _RULES:
        raise ValueError(f"a {kind!r} cluster has no layout of its own")
    c = resolved.settings.cluster
    own = family.worker_threads(collection)
    numbers = {"threads_set": c.threads_per_worker, "family_threads": own}
    if processes is not None and processes.rule_id == "processes.small-work" and not processes.value:
        return _in_process(processes, facts, numbers)
    out = _RULES[kind](resolved, family, collection, facts, own, numbers)
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
