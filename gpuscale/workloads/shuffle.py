"""``shuffle``: a global sort of a generated frame by a random key, with ``sort_values`` or
``set_index`` (sampled divisions, then an all-to-all shuffle with the backend's method).

Data: ``rows`` rows in ``partitions`` partitions: ``key`` uniform random float64 and ``id``,
the row's number 0..rows-1.

Validation (per-partition statistics gathered from every output partition):

* every partition is sorted by key (index for ``set_index``) and partitions follow each
  other (max of one <= min of the next); with ``set_index`` the divisions are known and every
  partition lies inside its own;
* no row is lost or repeated: rows = ``--rows``, ids span 0..rows-1 and sum to
  rows (rows - 1) / 2, and the keys sum to the input's key sum (relative 1e-12);
* small (rows <= ``FULL_CHECK_ROWS``): the whole result, on the host, is sorted by key and
  holds exactly the input's (key, id) rows.
"""

from __future__ import annotations

import importlib
from typing import Literal

import dask
from pydantic import Field, PositiveInt

from ..routes import dataframe as gdf
from . import Check, Context, Output, Params, Validation, Workload, _frames, register
from ._frames import Shuffling, from_partitions, host_frame, plan_partitions
from .base import block_field, seed_field

ROW_BYTES = 16
TASK_ROUTE_COPIES = 5
"""Frames a task-based shuffle or one-task sort holds at its peak (the GPU family's route; see
docs/decisions.md, rule ``memory.task-route-copies``)."""
KEY_SUM_RTOL = 1e-12


class ShuffleParams(Params):
    rows: PositiveInt = Field(2_000_000, description="rows of the frame")
    method: Literal["sort_values", "set_index"] = Field(
        "sort_values", description="how to sort: sort_values('key') or set_index('key')"
    )
    partitions: PositiveInt | None = block_field(
        "partitions", "from the backend's partition size and the cluster's threads"
    )
    seed: int = seed_field()


def make_partition(args):
    i, start, n, array_module, frame_module, seed = args
    xp = importlib.import_module(array_module)
    lib = importlib.import_module(frame_module)
    rs = xp.random.RandomState(seed * 1_000_003 + i)
    return lib.DataFrame({"key": rs.random_sample(n), "id": xp.arange(start, start + n, dtype="int64")})


def partition_stats(part, on_index: bool) -> dict:
    """Small facts about one output partition (runs on a worker; pandas or cuDF)."""
    key = part.index.to_series() if on_index else part["key"]
    n = len(part)
    return {
        "rows": n,
        "sorted": bool(key.is_monotonic_increasing),
        "kmin": float(key.min()) if n else None,
        "kmax": float(key.max()) if n else None,
        "key_sum": float(key.sum()) if n else 0.0,
        "id_sum": int(part["id"].sum()) if n else 0,
        "id_min": int(part["id"].min()) if n else None,
        "id_max": int(part["id"].max()) if n else None,
    }


@register
class Shuffle(Shuffling, Workload):
    name = "shuffle"
    description = "global sort by a random key (sort_values / set_index): an all-to-all shuffle"
    collection = "dataframe"
    Params = ShuffleParams
    ROUTE = "sort"

    def plan(self, p, ctx: Context) -> None:
        plan_partitions(ctx, p.partitions, p.rows, ROW_BYTES)
        self.plan_route(ctx, "sort", "Dask's")

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """By route. P2P: the frame, its shards in P2P's buffers, the sorted result. The
        task-based shuffle and the one-task sort: ``TASK_ROUTE_COPIES`` frames as one peak. The
        full check (rows <= ``FULL_CHECK_ROWS``): twice the frame."""
        data = p.rows * ROW_BYTES
        full = ctx.validate != "off" and p.rows <= _frames.FULL_CHECK_ROWS
        return _frames.memory_by_route(
            ctx, p.rows, ROW_BYTES, data, TASK_ROUTE_COPIES, 2 * data if full else 0
        )

    def task_bytes(self, p, ctx: Context) -> int:
        """P2P: one transfer task's peak; other routes: 0."""
        return _frames.transfer_task_bytes(ctx, ROW_BYTES, partitions=p.rows)

    def describe_data(self, p) -> dict:
        return {
            "rows": p.rows,
            "columns": {"key": "float64", "id": "int64"},
            "source": "generated, key uniform [0, 1)",
        }

    def generate(self, p, ctx: Context):
        return from_partitions(make_partition, p.rows, ctx.value("partitions"), ctx, p.seed)

    def compute(self, df, p, ctx: Context) -> Output:
        route = gdf.sort(df, "key", index=p.method == "set_index", shuffle_method=ctx.value("shuffle_method"))
        return self.routed(route, ctx)

    def validate(self, out: Output, df, p, ctx: Context) -> Validation:
        res = out.collections["result"]
        on_index = p.method == "set_index"
        stats = dask.compute(*[dask.delayed(partition_stats)(d, on_index) for d in res.to_delayed()])
        key_sum = float(df["key"].sum().compute())
        full = [s for s in stats if s["rows"]]
        unsorted = sum(not s["sorted"] for s in full)
        checks = [Check.within("every partition sorted", unsorted, 0, "unsorted partitions")]
        order = sum(a["kmax"] > b["kmin"] for a, b in zip(full, full[1:]))
        checks.append(
            Check("partitions in order (max <= next min)", order == 0, order, 0, "overlapping pairs")
        )
        if on_index:
            divs = res.divisions
            known = res.known_divisions
            if len(stats) == 1 and not known:
                # one partition: divisions say nothing (dask-cudf leaves them unknown there);
                # the sortedness check above is the whole contract
                checks.append(Check("single partition: divisions not needed", True, "unknown", "-"))
            else:
                inside = known and all(
                    s["rows"] == 0 or (divs[i] <= s["kmin"] and s["kmax"] <= divs[i + 1])
                    for i, s in enumerate(stats)
                )
                checks.append(
                    Check(
                        "divisions known and every partition inside its own", bool(inside), str(known), "True"
                    )
                )
        rows = sum(s["rows"] for s in stats)
        checks.append(Check("rows", rows == p.rows, rows, p.rows))
        id_sum = sum(s["id_sum"] for s in stats)
        ids = (min((s["id_min"] for s in full), default=None), max((s["id_max"] for s in full), default=None))
        ok = id_sum == p.rows * (p.rows - 1) // 2 and ids == (0, p.rows - 1)
        checks.append(
            Check(
                "ids: 0..rows-1, sum rows(rows-1)/2",
                ok,
                f"{ids}, sum {id_sum}",
                f"(0, {p.rows - 1}), sum {p.rows * (p.rows - 1) // 2}",
            )
        )
        got_keys = sum(s["key_sum"] for s in stats)
        rel = abs(got_keys - key_sum) / abs(key_sum) if key_sum else abs(got_keys)
        checks.append(Check("key sum preserved", rel <= KEY_SUM_RTOL, rel, KEY_SUM_RTOL, "relative"))
        method = "per-partition order + ids and key sum (nothing lost or repeated)"
        if p.rows <= _frames.FULL_CHECK_ROWS:
            got = host_frame(res.compute())
            got = got.reset_index() if on_index else got
            if not (got["key"].to_numpy()[1:] >= got["key"].to_numpy()[:-1]).all():
                checks.append(Check("whole result sorted by key", False))
            # ties (if any) may come in any order: compare rows sorted by (key, id)
            a = got[["key", "id"]].sort_values(["key", "id"]).to_numpy()
            b = host_frame(df.compute())[["key", "id"]].sort_values(["key", "id"]).to_numpy()
            bad = int((a != b).any(axis=1).sum()) if a.shape == b.shape else -1
            checks.append(
                Check(
                    "same (key, id) rows as the input (pandas)",
                    bad == 0,
                    bad,
                    0,
                    "mismatching rows (-1: row counts differ)",
                )
            )
            method = "full reference (host copies, pandas) + " + method
        return Validation(method, checks)
