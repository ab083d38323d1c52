"""Shared pieces of the DataFrame workloads: partition counts, generated frames, host copies.
pandas and dask.dataframe are imported where used.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from ..backends import to_host
from . import Context

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
    if given is not None:
        return ctx.choose(name, given, "flag")
    budget, capped = ctx.capped(ctx.knobs.partition_bytes, PARTITION_COPIES, "partition")
    by_bytes = math.ceil(rows * row_bytes / budget)
    n = min(rows, max(by_bytes, ctx.total_threads))
    return ctx.choose(
        name,
        n,
        "rule",
        f"max({rows:,} rows x {row_bytes} B / {ctx.family.name} partition budget "
        f"{budget / 2**20:.0f} MiB = {by_bytes}, "
        f"{ctx.total_threads} threads)" + (f" ({capped})" if capped else ""),
    )


P2P_EXTRA_ROW_BYTES = 16
"""What a row gains in Dask's P2P shuffle: its output partition's number (int64, added before
the transfer) and its index (``split_by_worker`` converts to Arrow with ``preserve_index``)."""


def p2p(ctx: Context) -> bool:
    """Whether a sort or join shuffles with Dask's P2P (Dask's own route, with the shuffle
    method None or ``p2p``)."""
    method = ctx.choices.get("shuffle_method", {}).get("value", ctx.knobs.shuffle_method)
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
