"""What a translated plan reads: the uncompressed bytes of the columns its Parquet scans list,
from the files' footers (no data read; each file's footer read once while it is unchanged), and
its share of the CSV files it scans."""

from __future__ import annotations

import functools
import os
from typing import Any


def read_bytes(reads: list[dict[str, Any]]) -> int | None:
    """The sum over ``reads`` (each ``{"files", "columns"}``) of those columns' uncompressed
    sizes; None when a footer cannot be read."""
    total = 0
    for r in reads:
        if "bytes" in r:  # a text file's size: what its columns take once parsed, near enough
            total += r["bytes"]
            continue
        wanted = frozenset(r["columns"])
        for f in r["files"]:
            try:
                st = os.stat(f)
                sizes = _column_sizes(f, st.st_mtime_ns, st.st_size)
            except (OSError, ValueError):
                return None
            total += sum(n for c, n in sizes if c in wanted)
    return total


@functools.lru_cache(maxsize=4096)
def _column_sizes(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, int], ...]:
    import pyarrow.parquet as pq

    md = pq.ParquetFile(path).metadata
    out: dict[str, int] = {}
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            name = col.path_in_schema.split(".")[0]
            out[name] = out.get(name, 0) + int(col.total_uncompressed_size)
    return tuple(out.items())
