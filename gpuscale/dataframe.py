"""Tuned DataFrame routes on any Dask DataFrame (pandas or cuDF partitions).

``groupby_agg`` chooses between a tree reduction (the result stays in one partition) and a
shuffle (the result is split over ``split_out`` partitions) from an estimate of the result's
size against the backend family's per-partition budget, and picks the family's shuffle
method (the task shuffle keeps cuDF on the device; P2P goes through host memory). The plan
it chose, with the numbers behind it, comes back with the result.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from . import backends
from .errors import UserError

AGGREGATIONS = ("sum", "mean", "min", "max", "count", "size", "std", "var", "first", "last")
BYTES_PER_VALUE = 8


@dataclasses.dataclass
class GroupbyPlan:
    split_out: int
    split_every: int
    shuffle_method: str | None
    groups: int
    groups_source: str
    result_bytes: int
    budget_bytes: int
    reason: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class GroupbyResult:
    result: Any  # a Dask DataFrame
    plan: GroupbyPlan


def _normalize_agg(df, by: list[str], agg) -> dict[str, list[str]]:
    if isinstance(agg, str):
        agg = {c: [agg] for c in df.columns if c not in by}
    spec = {c: ([a] if isinstance(a, str) else list(a)) for c, a in dict(agg).items()}
    missing = [c for c in spec if c not in df.columns]
    if missing:
        raise UserError(f"column(s) {missing} are not in the DataFrame",
                        f"choose from: {', '.join(map(str, df.columns))}")
    for col, aggs in spec.items():
        bad = [a for a in aggs if a not in AGGREGATIONS]
        if bad:
            raise UserError(f"unknown aggregation(s) {bad} for column '{col}'",
                            f"use: {', '.join(AGGREGATIONS)}")
        numeric = df._meta[col].dtype.kind in "biuf"
        if not numeric and any(a in ("sum", "mean", "std", "var") for a in aggs):
            raise UserError(f"column '{col}' ({df._meta[col].dtype}) is not numeric and cannot "
                            f"be aggregated with {aggs}", "use count/min/max/first/last for it")
    return spec


def plan_groupby(df, by, agg, *, groups: int | None = None, split_out: int | str = "auto",
                 family=None) -> GroupbyPlan:
    """Choose tree reduction or shuffle for ``df.groupby(by).agg(agg)``.

    ``groups`` is the number of distinct keys if known; otherwise it is estimated with
    ``nunique_approx`` (one pass over the key columns).
    """
    by = [by] if isinstance(by, str) else list(by)
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise UserError(f"group-by column(s) {missing} are not in the DataFrame",
                        f"choose from: {', '.join(map(str, df.columns))}")
    spec = _normalize_agg(df, by, agg)
    fam = family or backends.family_of(df)
    knobs = fam.knobs
    if groups is None:
        groups = int(df[by[0] if len(by) == 1 else by].nunique_approx().compute())
        source = "estimated with nunique_approx"
    else:
        source = "given"
    width = len(by) + sum(len(a) for a in spec.values())
    result_bytes = groups * width * BYTES_PER_VALUE
    budget = knobs.split_out_budget_bytes
    nparts = df.npartitions
    split_every = knobs.split_every or max(2, nparts)
    if split_out != "auto":
        n = int(split_out)
        if n < 1:
            raise UserError(f"split_out must be >= 1, got {n}", "use 1 for a tree reduction")
        return GroupbyPlan(n, split_every, knobs.shuffle_method if n > 1 else None, groups, source,
                           result_bytes, budget, f"split_out={n} set by you")
    if result_bytes <= budget:
        why = (f"split_out=1: estimated result {groups:,} groups x {width * BYTES_PER_VALUE} B = "
               f"{result_bytes / 1e6:.3g} MB, under the {fam.name} per-partition budget of "
               f"{budget / 1e6:.4g} MB: tree reduction (fan-in {split_every}), no shuffle")
        return GroupbyPlan(1, split_every, None, groups, source, result_bytes, budget, why)
    n = min(max(2, math.ceil(result_bytes / budget)), max(2, nparts))
    why = (f"split_out={n}: estimated result {groups:,} groups x {width * BYTES_PER_VALUE} B = "
           f"{result_bytes / 1e6:.3g} MB exceeds the {fam.name} budget of {budget / 1e6:.4g} MB: "
           f"{knobs.shuffle_method or 'Dask default'} shuffle")
    return GroupbyPlan(n, split_every, knobs.shuffle_method, groups, source, result_bytes, budget, why)


def groupby_agg(df, by, agg, *, groups: int | None = None, split_out: int | str = "auto",
                plan: GroupbyPlan | None = None, family=None) -> GroupbyResult:
    """``df.groupby(by).agg(agg)`` with the tuned plan; lazy. Works in any Client context.

    ``agg`` is a dict ``{column: "mean" | [aggs]}`` (or one aggregation for every column).
    """
    by_list = [by] if isinstance(by, str) else list(by)
    plan = plan or plan_groupby(df, by_list, agg, groups=groups, split_out=split_out, family=family)
    spec = _normalize_agg(df, by_list, agg)
    kwargs: dict[str, Any] = {"split_out": plan.split_out, "split_every": plan.split_every}
    if plan.shuffle_method:
        kwargs["shuffle_method"] = plan.shuffle_method
    key = by_list[0] if len(by_list) == 1 else by_list
    result = df.groupby(key).agg(spec, **kwargs)
    return GroupbyResult(result, plan)
