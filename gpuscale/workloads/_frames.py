"""Shared pieces of the DataFrame workloads: partition counts, generated frames, host copies.
pandas and dask.dataframe are imported where used.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, ClassVar

from ..backends import to_host
from ..errors import UserError
from . import Context, Output

if TYPE_CHECKING:
    import pandas as pd

PARTITION_COPIES = 3
"""Partitions one task holds at its peak (the partition, the operation's output and its hash
tables or sort buffers): block sizes are capped by worker memory with it."""

FULL_CHECK_ROWS = 2_000_000
"""Frames up to this many rows are checked whole against pandas on the host."""


def plan_partitions(
    ctx: Context, given: int | None, rows: int, row_bytes: int, name: str = "partitions"
) -> int:
    def rule(budget: int) -> tuple[int, str]:
        by_bytes = math.ceil(rows * row_bytes / budget)
        return min(rows, max(by_bytes, ctx.total_threads)), (
            f"max({rows:,} rows x {row_bytes} B / {ctx.family.name} partition budget "
            f"{budget / 2**20:.0f} MiB = {by_bytes}, {ctx.total_threads} threads)"
        )

    return ctx.choose_size(name, given, ctx.knobs.partition_bytes, PARTITION_COPIES, "partition", rule)


def check_partitions(partitions: int | None, rows: int, workload: str = "") -> None:
    """At most one partition per row."""
    if partitions is not None and partitions > rows:
        raise UserError(
            f"{workload} --partitions {partitions} > --rows {rows}".lstrip(),
            "use at most one partition per row",
        )


P2P_EXTRA_ROW_BYTES = 16
"""What a row gains in Dask's P2P shuffle: its output partition's number (int64, added before
the transfer) and its index (``split_by_worker`` converts to Arrow with ``preserve_index``)."""


def p2p(ctx: Context) -> bool:
    """Whether a sort or join shuffles with Dask's P2P (Dask's own route, with the shuffle
    method None or ``p2p``)."""
    method = ctx.value("shuffle_method", ctx.knobs.shuffle_method)
    return ctx.total_threads > 1 and method in (None, "p2p")


def p2p_shard_bytes(rows: int, row_bytes: int, ctx: Context) -> int:
    """The shards of ``rows`` rows in Dask's P2P comm and storage buffers (each at most its
    ``distributed.p2p`` buffer per worker; all in memory when P2P does not write to disk)."""
    import dask
    from dask.utils import parse_bytes

    b = ctx.memory
    workers = max(1, (b.workers if b is not None and b.workers else None) or ctx.spec.workers or 1)
    shards = rows * (row_bytes + P2P_EXTRA_ROW_BYTES)
    comm = parse_bytes(dask.config.get("distributed.p2p.comm.buffer", "1 GiB"))
    disk = dask.config.get("distributed.p2p.storage.disk", True)
    storage = parse_bytes(dask.config.get("distributed.p2p.storage.buffer", "100 MiB")) if disk else shards
    return min(shards, workers * comm) + min(shards, workers * storage)


def p2p_task_bytes(partition_rows: int, row_bytes: int) -> int:
    """One P2P transfer task's peak: the partition with its output partition's number, and three
    copies of the row as shipped (``split_by_worker``'s merge, Arrow table and sort)."""
    return int(partition_rows * (row_bytes + 8 + 3 * (row_bytes + P2P_EXTRA_ROW_BYTES)))


def memory_by_route(
    ctx: Context, rows: int, row_bytes: int, results: int, copies: int, check: int
) -> dict[str, int]:
    """A shuffle's memory by route. P2P: the ``rows`` input rows, their shards in P2P's buffers,
    the results. The task-based shuffle and the one-task route: ``copies`` inputs as one peak.
    ``check``: the validation's."""
    data = rows * row_bytes
    if not p2p(ctx):
        return {"peak": copies * data, "validation": check}
    return {
        "inputs": data,
        "shuffle_buffers": p2p_shard_bytes(rows, row_bytes, ctx),
        "results": results,
        "validation": check,
    }


def transfer_task_bytes(ctx: Context, row_bytes: int, **rows: int) -> int:
    """P2P: one transfer task's peak (:func:`p2p_task_bytes`) on the largest partition, for
    ``rows`` rows in the partitions of each named choice; other routes, or unplanned: 0."""
    parts = {name: ctx.value(name) for name in rows}
    if not all(isinstance(n, int) for n in parts.values()) or not p2p(ctx):
        return 0
    return p2p_task_bytes(max(math.ceil(n / parts[name]) for name, n in rows.items()), row_bytes)


class Shuffling:
    """Mixin for workloads that shuffle generated frames (``--rows``, ``--partitions``) with the
    family's shuffle method, through a route of :mod:`gpuscale.routes.dataframe` that picks its
    plan at run time (the choice ``ROUTE``)."""

    ROUTE: ClassVar[str]

    def check(self, p) -> None:
        check_partitions(p.partitions, p.rows, self.name)

    def plan_route(self, ctx: Context, op: str, dask_route: str) -> None:
        """The shuffle method, then ``ROUTE``: one task (the library's ``op``) or ``dask_route``."""
        ctx.choose_knob("shuffle_method", "Dask's default")
        ctx.choose(
            self.ROUTE,
            "auto",
            "rule",
            f"one task (the library's own {op}) when one worker with one thread is "
            f"the whole cluster, else {dask_route} (gpuscale.routes.dataframe.{op})",
        )

    def routed(self, route, ctx: Context) -> Output:
        """The route's result, its plan recorded as ``ROUTE``'s decision."""
        ctx.decide(self.ROUTE, route.decision)
        return Output({"result": route.result})


def sizes(rows: int, parts: int) -> list[int]:
    return [rows // parts + (1 if i < rows % parts else 0) for i in range(parts)]


def partition_args(rows: int, parts: int, array_module: str, frame_module: str, *extra) -> list[tuple]:
    """Each partition's ``(index, start, size, array_module, frame_module, *extra)``."""
    n = sizes(rows, parts)
    starts = [0, *itertools.accumulate(n[:-1])]
    return [(i, starts[i], n[i], array_module, frame_module, *extra) for i in range(parts)]


def from_partitions(make, rows: int, parts: int, ctx: Context, *extra):
    """A Dask DataFrame of ``parts`` partitions, each built on a worker by
    ``make((index, start, size, array_module, frame_module, *extra))``."""
    import dask.dataframe as dd

    fam = ctx.family
    args = partition_args(rows, parts, fam.array_module, fam.dataframe_module, *extra)
    meta = make((0, 0, 0, fam.array_module, fam.dataframe_module, *extra))
    return dd.from_map(make, args, meta=meta, enforce_metadata=False)


def host_frame(df) -> pd.DataFrame:
    """A pandas copy of a (computed) pandas or cuDF frame."""
    import pandas as pd

    df = to_host(df)
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame(df)
