"""Shared pieces of the DataFrame workloads: partition counts, generated frames, host copies."""
from __future__ import annotations

import math

import dask.dataframe as dd
import pandas as pd

from ..backends import to_host
from . import Context

FULL_CHECK_ROWS = 2_000_000
"""Frames up to this many rows are checked whole against pandas on the host."""


def plan_partitions(ctx: Context, given: int | None, rows: int, row_bytes: int,
                    name: str = "partitions") -> int:
    if given is not None:
        return ctx.choose(name, given, "flag")
    by_bytes = math.ceil(rows * row_bytes / ctx.knobs.partition_bytes)
    n = min(rows, max(by_bytes, ctx.total_threads))
    return ctx.choose(name, n, "rule",
                      f"max({rows:,} rows x {row_bytes} B / {ctx.family.name} partition budget "
                      f"{ctx.knobs.partition_bytes / 2**20:.0f} MiB = {by_bytes}, "
                      f"{ctx.total_threads} threads)")


def sizes(rows: int, parts: int) -> list[int]:
    return [rows // parts + (1 if i < rows % parts else 0) for i in range(parts)]


def from_partitions(make, rows: int, parts: int, ctx: Context, *extra):
    """A Dask DataFrame of ``parts`` partitions, each built on a worker by
    ``make((index, start, size, array_module, frame_module, *extra))``."""
    fam = ctx.family
    n = sizes(rows, parts)
    starts = [sum(n[:i]) for i in range(parts)]
    args = [(i, starts[i], n[i], fam.array_module, fam.dataframe_module, *extra) for i in range(parts)]
    meta = make((0, 0, 0, fam.array_module, fam.dataframe_module, *extra))
    return dd.from_map(make, args, meta=meta, enforce_metadata=False)


def host_frame(df) -> pd.DataFrame:
    """A pandas copy of a (computed) pandas or cuDF frame."""
    df = to_host(df)
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame(df)
