"""Shared pieces of the DataFrame workloads: partition counts, generated frames, host copies.

pandas and dask.dataframe are imported where used: a workload's command is built (and its
runner may be sent to a cluster) without them.
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


def plan_partitions(ctx: Context, given: int | None, rows: int, row_bytes: int,
                    name: str = "partitions") -> int:
    if given is not None:
        return ctx.choose(name, given, "flag")
    budget, capped = ctx.capped(ctx.knobs.partition_bytes, PARTITION_COPIES, "partition")
    by_bytes = math.ceil(rows * row_bytes / budget)
    n = min(rows, max(by_bytes, ctx.total_threads))
    return ctx.choose(name, n, "rule",
                      f"max({rows:,} rows x {row_bytes} B / {ctx.family.name} partition budget "
                      f"{budget / 2**20:.0f} MiB = {by_bytes}, "
                      f"{ctx.total_threads} threads)" + (f" ({capped})" if capped else ""))


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
