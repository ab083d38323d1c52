"""Which engine runs a user's Dask DataFrame collection computed in a session: the decision,
from the ``session.engine`` setting, the family, the cluster, whether the plan translates and
how much it reads. Rule ids ``engine.*``; docs/decisions.md explains each with its evidence.

=================  ============================================================================
value              what runs the plan
=================  ============================================================================
``polars``         Polars' streaming engine in this process (the CPU family on this machine)
``polars-gpu``     cudf-polars on one GPU worker: the session's one, or one of several where
                   one GPU runs the plan in memory (``engine.one-gpu``)
``polars-gpus``    cudf-polars' ``DaskEngine`` over the session's GPU workers
``dask``           Dask, as the collection would run without gpuscale
=================  ============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from ..decision import Decision

SETTING = "session.engine"
ENGINES = ("polars", "polars-gpu", "polars-gpus", "dask")
LOCAL_KINDS = ("local", "cuda")
"""Cluster kinds started on this machine (their workers see this process's files)."""


@dataclass(frozen=True)
class Where:
    """What the decision needs to know of the session's cluster."""

    family: str
    on_device: bool
    kind: str
    """The cluster kind (``local``, ``cuda``, ``existing``, ``ssh``...)."""
    workers: int
    capacity_bytes: int | None
    """Memory the engine has for the plan (this machine's, or its GPUs'); None: unknown."""
    unavailable: str | None = None
    """Why the family's engine cannot run here; None: it can."""

    @property
    def one_worker_bytes(self) -> int | None:
        """The memory of one of the engine's workers (one GPU where the family is on a device)."""
        return self.capacity_bytes // max(self.workers, 1) if self.capacity_bytes else None


def decide(
    setting: str, source: str, where: Where, untranslatable: str | None, reads_bytes: int | None
) -> Decision:
    """The engine for one collection. ``untranslatable``: why its plan has no Polars translation
    (None: it has one); ``reads_bytes``: what its plan reads, uncompressed (Parquet footers)."""
    numbers = {"setting": setting, "kind": where.kind, "workers": where.workers}
    if reads_bytes is not None:
        numbers["reads_bytes"] = reads_bytes
    if where.capacity_bytes is not None:
        numbers["capacity_bytes"] = where.capacity_bytes

    def made(value, rule_id, why, src="rule"):
        return Decision(value, src, why, rule_id, numbers, documented=True)

    if setting == "dask":
        return made("dask", "engine.setting", f"{SETTING} is dask", source)
    if untranslatable is not None:
        return made("dask", "engine.untranslatable", f"no Polars translation: {untranslatable}")
    forced = setting == "polars"
    if where.unavailable is not None:
        return made("dask", "engine.unavailable", where.unavailable)
    if where.kind not in LOCAL_KINDS and not where.on_device and not forced:
        return made(
            "dask",
            "engine.hosts",
            f"the CPU family on a {where.kind} cluster: Dask keeps the work on its workers, "
            "Polars would run it in this process alone",
        )
    if (
        not forced
        and reads_bytes is not None
        and where.capacity_bytes is not None
        and reads_bytes > where.capacity_bytes
    ):
        return made(
            "dask",
            "engine.too-large",
            f"the plan reads {_gib(reads_bytes)} uncompressed, more than the "
            f"{_gib(where.capacity_bytes)} the engine has; Dask streams it partition by partition",
        )
    src = source if forced else "rule"
    if not where.on_device:
        return made(
            "polars", "engine.polars", "Polars' streaming engine in this process, on all its cores", src
        )
    if where.workers <= 1:
        return made("polars-gpu", "engine.polars-gpu", "cudf-polars on the session's GPU worker", src)
    if _in_memory(where, reads_bytes):
        return made(
            "polars-gpu",
            "engine.one-gpu",
            f"the plan reads {_gib(reads_bytes)} uncompressed, at most 1/{IN_MEMORY_SHARE} of one GPU's "
            f"{_gib(where.one_worker_bytes)}: cudf-polars on one of the session's {where.workers} GPU "
            "workers, whole tables in its memory",
            src,
        )
    return made(
        "polars-gpus",
        "engine.polars-gpus",
        f"cudf-polars' DaskEngine over the session's {where.workers} GPU workers",
        src,
    )


IN_MEMORY_SHARE = 4
"""cudf-polars runs a plan in memory where it reads at most 1/``IN_MEMORY_SHARE`` of the GPU's memory."""


def executor(where: Where, reads_bytes: int | None) -> Decision:
    """How cudf-polars runs a plan on one GPU: ``in-memory`` where what the plan reads is known
    and small beside the GPU's memory, else ``streaming`` (in partitions)."""
    room = where.one_worker_bytes
    numbers = {"reads_bytes": reads_bytes, "capacity_bytes": room}
    if _in_memory(where, reads_bytes):
        return Decision(
            "in-memory",
            "rule",
            f"the plan reads {_gib(reads_bytes)} uncompressed, at most 1/{IN_MEMORY_SHARE} of the GPU's "
            f"{_gib(room)}: whole tables, no partitioning",
            "engine.in-memory",
            numbers,
            documented=True,
        )
    why = (
        "what the plan reads is unknown"
        if reads_bytes is None or not room
        else (
            f"the plan reads {_gib(reads_bytes)} uncompressed, more than 1/{IN_MEMORY_SHARE} of the GPU's "
            f"{_gib(room)}"
        )
    )
    return Decision(
        "streaming", "rule", f"{why}: in partitions", "engine.streaming", numbers, documented=True
    )


def _in_memory(where: Where, reads_bytes: int | None) -> bool:
    room = where.one_worker_bytes
    return reads_bytes is not None and bool(room) and reads_bytes * IN_MEMORY_SHARE <= room


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
