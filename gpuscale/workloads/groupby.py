"""``groupby``: max, count and mean per key of generated int64 / float64 columns, through
:func:`gpuscale.dataframe.groupby_agg`.

Data: ``rows`` rows in ``partitions`` partitions, columns ``key`` (uniform in [0, keys)),
``int64`` and ``float64``, generated on the active backend (NumPy + pandas or CuPy + cuDF)
inside each partition.

Validation against pandas on the same data:

* small (rows <= ``FULL_CHECK_ROWS``): the whole frame comes to the host and pandas computes
  the reference; every group and value must match (mean to 1e-9 relative);
* large: counts sum to the row count (``len`` of the frame, counted separately); the number
  of groups equals an exact ``nunique`` of the key column; a random sample of
  ``SAMPLE_GROUPS`` groups is recomputed with pandas from their rows and must match.
"""
from __future__ import annotations

import importlib
import math
from typing import Literal, Union

import dask.dataframe as dd
import numpy as np
import pandas as pd
from pydantic import Field, PositiveInt

from .. import dataframe as routes
from ..backends import to_host
from ..errors import UserError
from . import Check, Context, Output, Params, Validation, Workload, register

AGG = {"int64": ["max", "count"], "float64": ["mean"]}
ROW_BYTES = 24  # key + int64 + float64
FULL_CHECK_ROWS = 5_000_000
SAMPLE_GROUPS = 25
MEAN_RTOL = 1e-9


class GroupbyParams(Params):
    rows: PositiveInt = Field(2_000_000, description="rows of the frame")
    keys: PositiveInt = Field(10_000, description="distinct keys (cardinality), at most rows")
    partitions: PositiveInt | None = Field(None, description="partitions (default: from the "
                                           "backend's partition size and the cluster's threads)")
    split_out: Union[Literal["auto"], PositiveInt] = Field(
        "auto", description="result partitions (auto: 1 when the result fits the budget)")
    seed: int = Field(0, description="random seed")


def make_partition(args):
    """One partition, built on the chunk libraries named in ``args`` (runs on a worker)."""
    i, n, keys, seed, array_module, frame_module = args
    xp = importlib.import_module(array_module)
    lib = importlib.import_module(frame_module)
    rs = xp.random.RandomState(seed * 1_000_003 + i)
    return lib.DataFrame({
        "key": rs.randint(0, keys, size=n, dtype="int64"),
        "int64": rs.randint(0, 1_000_000, size=n, dtype="int64"),
        "float64": rs.random_sample(n),
    })


@register
class Groupby(Workload):
    name = "groupby"
    description = "groupby-aggregate (max, count, mean) with the plan chosen from the result size"
    collection = "dataframe"
    Params = GroupbyParams

    def check(self, p) -> None:
        if p.keys > p.rows:
            raise UserError(f"--keys {p.keys} > --rows {p.rows}: there cannot be more groups than rows",
                            "make --keys at most --rows")
        if p.partitions is not None and p.partitions > p.rows:
            raise UserError(f"--partitions {p.partitions} > --rows {p.rows}",
                            "use at most one partition per row")

    def plan(self, p, ctx: Context) -> None:
        if p.partitions is not None:
            ctx.choose("partitions", p.partitions, "flag")
        else:
            by_bytes = math.ceil(p.rows * ROW_BYTES / ctx.knobs.partition_bytes)
            n = min(p.rows, max(by_bytes, ctx.total_threads))
            ctx.choose("partitions", n, "rule",
                       f"max({p.rows:,} rows x {ROW_BYTES} B / {ctx.family.name} partition budget "
                       f"{ctx.knobs.partition_bytes / 2**20:.0f} MiB = {by_bytes}, "
                       f"{ctx.total_threads} threads)")

    def estimate_bytes(self, p, ctx: Context) -> int:
        return int(p.rows * ROW_BYTES * 3)

    def describe_data(self, p) -> dict:
        return {"rows": p.rows, "columns": {"key": "int64", "int64": "int64", "float64": "float64"},
                "source": f"generated, {p.keys:,} keys"}

    def generate(self, p, ctx: Context):
        n = ctx.choices["partitions"]["value"]
        sizes = [p.rows // n + (1 if i < p.rows % n else 0) for i in range(n)]
        fam = ctx.family
        args = [(i, sizes[i], p.keys, p.seed, fam.array_module, fam.dataframe_module) for i in range(n)]
        meta = make_partition((0, 0, 1, 0, fam.array_module, fam.dataframe_module))
        return dd.from_map(make_partition, args, meta=meta, enforce_metadata=False)

    def compute(self, data, p, ctx: Context) -> Output:
        res = routes.groupby_agg(data, "key", AGG, groups=p.keys, rows=p.rows, split_out=p.split_out,
                                 family=ctx.family)
        ctx.choose("groupby_strategy", res.plan.strategy, "flag" if p.split_out != "auto" else "rule",
                   res.plan.reason)
        ctx.choose("split_out", res.plan.split_out, "flag" if p.split_out != "auto" else "rule")
        ctx.choose("shuffle_method", res.plan.shuffle_method, "rule" if res.plan.split_out > 1 else "family",
                   "no shuffle: tree reduction" if res.plan.split_out == 1 else None)
        ctx.choose("split_every", res.plan.split_every, "family")
        return Output({"result": res.result}, {"plan": res.plan.to_dict()})

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        got = _host_frame(out.collections["result"].compute())
        checks: list[Check] = []
        if p.rows <= FULL_CHECK_ROWS:
            frame = _host_frame(data.compute())
            ref = frame.groupby("key").agg(AGG)
            checks += _compare(got, ref, "all groups")
            return Validation("full reference (pandas on the same data)", checks)
        total = int(got[("int64", "count")].sum())
        rows = int(len(data))
        checks.append(Check("counts sum to rows", total == rows == p.rows, total, p.rows))
        # An independent count of every key (value_counts, a tree reduction) against the result.
        counts = to_host(data["key"].value_counts(split_out=1, sort=False).compute()).sort_index()
        same = counts.index.equals(got.index) and bool(
            (counts.to_numpy() == got[("int64", "count")].to_numpy()).all())
        checks.append(Check("every group's count = value_counts(key)", same, len(got), len(counts)))
        sample = np.random.default_rng(p.seed + 11).choice(got.index.to_numpy(),
                                                           size=min(SAMPLE_GROUPS, len(got)), replace=False)
        subset = _host_frame(data[data["key"].isin(list(map(int, sample)))].compute())
        ref = subset.groupby("key").agg(AGG)
        checks += _compare(got.loc[ref.index], ref, f"{len(sample)} sampled groups")
        return Validation("all counts (value_counts) + sampled groups recomputed with pandas", checks)


def _host_frame(df) -> pd.DataFrame:
    df = to_host(df)
    return df.sort_index() if isinstance(df, pd.DataFrame) else pd.DataFrame(df).sort_index()


def _compare(got: pd.DataFrame, ref: pd.DataFrame, what: str) -> list[Check]:
    got = got.sort_index()
    ref = ref.sort_index()
    same_keys = got.index.equals(ref.index)
    checks = [Check(f"same keys ({what})", bool(same_keys), len(got), len(ref))]
    if not same_keys:
        return checks
    for col in [("int64", "max"), ("int64", "count")]:
        bad = int((got[col].to_numpy() != ref[col].to_numpy()).sum())
        checks.append(Check(f"{col[0]} {col[1]} exact", bad == 0, bad, 0, "mismatching groups"))
    g, r = got[("float64", "mean")].to_numpy(), ref[("float64", "mean")].to_numpy()
    err = float(np.max(np.abs(g - r) / np.maximum(np.abs(r), 1e-300))) if len(r) else 0.0
    checks.append(Check("float64 mean", err <= MEAN_RTOL, err, MEAN_RTOL, "max relative difference"))
    return checks
