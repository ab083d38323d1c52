"""Tuned DataFrame routes on any Dask DataFrame (pandas or cuDF partitions).

``groupby_agg`` chooses per-worker, tree or shuffle from an estimate of the result's size
against the backend family's budget and returns the plan with the result; ``merge`` and
``sort`` run as one task where one single-threaded worker is the whole cluster. The graphs
are built by hand (docs/decisions.md, rule ``routes.graph-by-hand``).
"""

from __future__ import annotations

import math
from typing import Any

from dask.base import tokenize

from .. import _dask_compat, backends, errors
from ..decision import Decision
from ..errors import UserError
from . import Routed, locality, routed

AGGREGATIONS = ("sum", "mean", "min", "max", "count", "size", "std", "var", "first", "last")
BYTES_PER_VALUE = 8
# aggregation -> (its partial aggregations, how partials combine), for the per-worker route
DECOMPOSE = {
    "sum": (("sum",), "sum"),
    "count": (("count",), "sum"),
    "min": (("min",), "min"),
    "max": (("max",), "max"),
    "mean": (("sum", "count"), None),
}


def count_groups(df, by: list[str]):
    """(lazy number of distinct ``by`` keys, how it is counted): Dask's ``nunique_approx`` on
    pandas partitions, an exact distinct count on others (Dask's HyperLogLog needs pandas)."""
    import pandas as pd

    key = df[by[0]] if len(by) == 1 else df[by]
    if isinstance(df._meta, pd.DataFrame):
        return key.nunique_approx(), "nunique_approx (HyperLogLog)"
    if len(by) == 1:
        return key.nunique(dropna=False), "an exact distinct count (nunique; HyperLogLog needs pandas)"
    distinct = key.drop_duplicates(split_out=1).shape[0]
    return distinct, "an exact distinct count (drop_duplicates; HyperLogLog needs pandas)"


def check_columns(df, by, agg, where: str = "the DataFrame") -> tuple[list[str], dict[str, list[str]]]:
    """``(by, {column: [aggregations]})`` checked against a frame's columns and dtypes (Dask,
    pandas or cuDF); raises a one-line UserError naming the columns there are (``where`` names
    the frame)."""
    by = [by] if isinstance(by, str) else list(by)
    if not by:
        raise UserError("no group-by column given", "name at least one column to group by")
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise UserError(
            f"group-by column(s) {missing} are not in {where}",
            f"choose from: {errors.listed(df.columns)}",
        )
    return by, _normalize_agg(df, by, agg, where)


def _normalize_agg(df, by: list[str], agg, where: str = "the DataFrame") -> dict[str, list[str]]:
    if isinstance(agg, str):
        agg = {c: [agg] for c in df.columns if c not in by}
    spec = {c: ([a] if isinstance(a, str) else list(a)) for c, a in dict(agg).items()}
    if not spec or not all(spec.values()):
        raise UserError(
            "no aggregation given", "name a column and its aggregations, e.g. {'price': ['mean']}"
        )
    missing = [c for c in spec if c not in df.columns]
    if missing:
        raise UserError(
            f"column(s) {missing} are not in {where}", f"choose from: {errors.listed(df.columns)}"
        )
    meta = getattr(df, "_meta", df)
    for col, aggs in spec.items():
        bad = [a for a in aggs if a not in AGGREGATIONS]
        if bad:
            raise UserError(
                f"unknown aggregation(s) {bad} for column '{col}'", f"use: {', '.join(AGGREGATIONS)}"
            )
        if meta[col].dtype.kind not in "biuf" and any(a in ("sum", "mean", "std", "var") for a in aggs):
            raise UserError(
                f"column '{col}' ({meta[col].dtype}) is not numeric and cannot be aggregated with {aggs}",
                "use count/min/max/first/last for it",
            )
    return spec


def choose_groupby(
    df,
    by,
    agg,
    *,
    groups: int | None = None,
    rows: int | None = None,
    split_out: int | str = "auto",
    family=None,
    worker_bytes: int | None = None,
    room_bytes: int | None = None,
    threads: int | None = None,
) -> Decision:
    """Choose how to run ``df.groupby(by).agg(agg)``.

    * the result is estimated at ``groups`` x (key + aggregate columns) x 8 B; over the family's
      per-partition budget it is split over ``split_out`` partitions by the family's shuffle;
    * under it, one output partition: "per-worker" (each worker concatenates its partitions
      and aggregates once) where a partition's groups are at least the family's
      ``groupby_concat_min_fraction`` of its rows or each worker runs one thread, else a tree.

    ``groups`` (distinct keys) and ``rows`` are estimated in one pass when not given.
    """
    by, spec = check_columns(df, by, agg)
    fam = family or backends.family_of(df)
    source = "given"
    if groups is None or rows is None:
        import dask

        est, how = count_groups(df, by)
        est_groups, est_rows = dask.compute(est, df.shape[0])
        source = f"estimated with {how}" if groups is None else source
        groups = int(est_groups) if groups is None else groups
        rows = int(est_rows) if rows is None else rows
    return decide_groupby(
        groups=groups,
        rows=rows,
        npartitions=df.npartitions,
        width=len(by) + sum(len(a) for a in spec.values()),
        decomposable=all(a in DECOMPOSE for aggs in spec.values() for a in aggs),
        family=fam,
        split_out=split_out,
        groups_source=source,
        worker_bytes=worker_bytes,
        room_bytes=room_bytes,
        threads=threads,
    )


ONE_THREAD = (
    "measured on 2 CPU workers x 1 thread, 1 M-40 M rows x 10-100 k keys: per-worker beat the "
    "tree in 6 of 9 cells, by up to 26 %, and lost by at most 8 %; on one worker of 2 threads "
    "it lost 2-3x from 10 M rows: docs/bench-cpu/groupby-plan"
)
"""Why the per-worker route is taken on one-thread workers whatever the share of groups."""

CONCAT_COPIES = 2
"""The per-worker route holds a worker's partitions concatenated and the aggregation's tables."""


def decide_groupby(
    *,
    groups: int,
    rows: int,
    npartitions: int,
    width: int,
    decomposable: bool,
    family,
    split_out: int | str = "auto",
    groups_source: str = "given",
    worker_bytes: int | None = None,
    room_bytes: int | None = None,
    threads: int | None = None,
) -> Decision:
    """The plan of :func:`choose_groupby` from numbers alone (nothing computed): ``width`` =
    key + aggregate columns, ``decomposable`` = every aggregation is in ``DECOMPOSE``. The
    per-worker route is taken only where ``CONCAT_COPIES x worker_bytes`` (the frame's bytes
    per worker) fits ``room_bytes`` (what one worker's tasks may hold), and whatever the
    share of groups where ``threads`` (per worker) is 1. Raises UserError for a
    ``split_out`` under 1.

    The decision's ``value`` is "per-worker", "tree" or "shuffle"; its ``numbers`` (the run's
    ``info.plan``) are the result partitions, fan-in, shuffle and the estimate it used."""
    knobs = family.knobs
    result_bytes = groups * width * BYTES_PER_VALUE
    budget = knobs.split_out_budget_bytes
    split_every = knobs.split_every or max(2, npartitions)
    size = f"estimated result {groups:,} groups x {width * BYTES_PER_VALUE} B = {result_bytes / 1e6:.3g} MB"

    def plan(strategy: str, n: int, why: str, source: str = "rule") -> Decision:
        numbers = {
            "split_out": n,
            "split_every": split_every,
            "shuffle_method": knobs.shuffle_method if n > 1 else None,
            "groups": groups,
            "groups_source": groups_source,
            "result_bytes": result_bytes,
            "budget_bytes": budget,
        }
        return Decision(strategy, source, why, None, numbers)

    if split_out != "auto":
        n = int(split_out)
        if n < 1:
            raise UserError(f"split_out must be >= 1, got {n}", "use 1 for a tree reduction")
        return plan("shuffle" if n > 1 else "tree", n, f"split_out={n} set by you", "flag")
    if result_bytes > budget:
        n = min(max(2, math.ceil(result_bytes / budget)), max(2, npartitions))
        why = (
            f"split_out={n}: {size} exceeds the {family.name} budget of {budget / 1e6:.4g} MB: "
            f"{knobs.shuffle_method or 'Dask default'} shuffle"
        )
        return plan("shuffle", n, why)
    per_part = max(1, rows // max(1, npartitions))
    fraction = min(groups, per_part) / per_part
    least = knobs.groupby_concat_min_fraction
    one_thread = threads == 1 and fraction < least
    if one_thread:
        least = 0.0
    too_big = (
        worker_bytes is not None and room_bytes is not None and CONCAT_COPIES * worker_bytes > room_bytes
    )
    if (npartitions > 1 or least == 0) and fraction >= least and decomposable and not too_big:
        under = f"split_out=1 ({size}, under the {family.name} budget of {budget / 1e6:.4g} MB); per-worker: "
        if one_thread:
            why = (
                under
                + f"each worker runs one thread, so one task per worker loses no parallelism ({ONE_THREAD})"
            )
        elif least == 0:
            why = under + (
                f"the {family.name} family aggregates each worker's partitions in one task "
                f"(groupby_concat_min_fraction 0: Dask's tree costs more than the work there)"
            )
        else:
            why = under + (
                f"a partition of ~{per_part:,} rows would keep ~{fraction:.0%} of them "
                f"as groups (>= {least:.0%}), so each worker concatenates its partitions and "
                "aggregates once"
            )
        return plan("per-worker", 1, why)
    why = (
        f"split_out=1: {size}, under the {family.name} per-partition budget of "
        f"{budget / 1e6:.4g} MB: tree reduction (fan-in {split_every}), no shuffle"
    )
    if too_big and decomposable:
        why += (
            f"; not per-worker: concatenating a worker's {worker_bytes / 1e6:.4g} MB (x{CONCAT_COPIES}) "
            f"would not fit the {room_bytes / 1e6:.4g} MB its tasks may hold"
        )
    return plan("tree", 1, why)


def groupby_agg(
    df,
    by,
    agg,
    *,
    groups: int | None = None,
    rows: int | None = None,
    split_out: int | str = "auto",
    plan: Decision | None = None,
    family=None,
    worker_bytes: int | None = None,
    room_bytes: int | None = None,
    threads: int | None = None,
    sort: bool | None = None,
) -> Routed:
    """``df.groupby(by, sort=sort).agg(agg)`` with the tuned plan; lazy. Works in any Client
    context.

    ``agg`` is a dict ``{column: "mean" | [aggs]}`` (or one aggregation for every column). The
    result has the same index and ``(column, aggregation)`` columns as Dask's / pandas' own.
    ``sort``: as Dask's ``groupby(sort=...)``: None leaves the groups in the order the
    aggregation gives them, True sorts them by key (one result partition only; its cost is in
    docs/benchmarks/dataframe.md).

    Returns
    -------
    Routed
        ``result`` (a Dask DataFrame) and the ``decision`` (:func:`decide_groupby`).
    """
    _dask_frame(df, "groupby_agg")
    by_list = [by] if isinstance(by, str) else list(by)
    plan = plan or choose_groupby(
        df,
        by_list,
        agg,
        groups=groups,
        rows=rows,
        split_out=split_out,
        family=family,
        worker_bytes=worker_bytes,
        room_bytes=room_bytes,
        threads=threads,
    )
    spec = _normalize_agg(df, by_list, agg)
    n = plan.numbers
    if sort and n["split_out"] > 1:
        raise UserError(
            f"sort=True needs the result in one partition; this plan splits it over "
            f"{n['split_out']} ({plan.rule})",
            "pass split_out=1 (the result must fit one worker), or sort the result yourself",
        )
    if plan.value == "per-worker":
        return Routed(_per_worker_agg(df, by_list, spec, bool(sort)), plan)
    kwargs: dict[str, Any] = {"split_out": n["split_out"], "split_every": n["split_every"]}
    if n["shuffle_method"]:
        kwargs["shuffle_method"] = n["shuffle_method"]
    key = by_list[0] if len(by_list) == 1 else by_list
    return Routed(df.groupby(key, sort=sort).agg(spec, **kwargs), plan)


def _flat(col, agg) -> str:
    return f"{col}\x1f{agg}"


def _concat(parts):
    """The frames ``parts`` as one (the one itself where there is one)."""
    from dask.dataframe.dispatch import concat

    return concat(list(parts)) if len(parts) > 1 else parts[0]


def _partial(parts, by, spec):
    partial_spec = {c: sorted({p for a in aggs for p in DECOMPOSE[a][0]}) for c, aggs in spec.items()}
    g = _concat(parts).groupby(by[0] if len(by) == 1 else by, sort=False).agg(partial_spec)
    g.columns = [_flat(c, a) for c, a in g.columns]
    return g


def _combine(partials, by, spec, sort: bool = False):
    frame = _concat(partials)
    how = {}
    for c, aggs in spec.items():
        for a in aggs:
            for p in DECOMPOSE[a][0]:
                how[_flat(c, p)] = DECOMPOSE[p][1] if a == "mean" else DECOMPOSE[a][1]
    if len(partials) == 1:
        g = frame.sort_index() if sort else frame  # one row per group already
    else:
        level = list(range(len(by))) if len(by) > 1 else 0
        g = frame.groupby(level=level, sort=sort).agg(how)
    out = {
        (c, a): g[_flat(c, "sum")] / g[_flat(c, "count")] if a == "mean" else g[_flat(c, a)]
        for c, aggs in spec.items()
        for a in aggs
    }
    result = g[[]].copy() if hasattr(g, "copy") else g[[]]
    for i, col in enumerate(out.values()):
        result[f"{i}"] = col
    import pandas as pd

    result.columns = pd.MultiIndex.from_tuples(list(out))
    return result


def _worker_groups(df, keys) -> list[list[int]]:
    """Partition numbers grouped by the worker that holds them (persisted data, evened out by
    :func:`locality.balance`), else in contiguous runs, one per worker."""
    groups = locality.blocks_by_worker(df, keys)
    if groups:
        return locality.balance(groups)
    n = df.npartitions
    try:
        from distributed import default_client

        nworkers = max(1, _dask_compat.size(default_client())[0])
    except (ValueError, ImportError):
        nworkers = 1
    size = math.ceil(n / min(n, nworkers))
    return [list(range(i, min(n, i + size))) for i in range(0, n, size)]


_META_CACHE: dict = {}


def _meta_of(fn, metas: list, *args):
    """``fn([meta] for each of metas, *args)``, the output meta of a hand-built route, computed
    once per (function, the metas' types, columns, dtypes and index, ``args``)."""

    def shape(m):
        return (
            type(m).__module__,
            type(m).__name__,
            tuple((str(c), str(t)) for c, t in m.dtypes.items()),
            str(m.index.dtype),
            m.index.name,
        )

    key = (fn.__module__, fn.__qualname__, tuple(shape(m) for m in metas), repr(args))
    if key not in _META_CACHE:
        _META_CACHE[key] = fn(*[[m] for m in metas], *args)
    return _META_CACHE[key]


def _whole(parts, by, spec, sort: bool = False):
    """All of the data on one worker: concatenate and aggregate once with the library's own
    aggregations (sorted by key if ``sort``; rule ``routes.one-task``)."""
    return _concat(parts).groupby(by[0] if len(by) == 1 else by, sort=sort).agg(spec)


def _combined(parts, by, spec):
    return _combine([_partial(parts, by, spec)], by, spec)


def _per_worker_agg(df, by, spec, sort: bool = False):
    """One task per worker (concatenate its partitions, aggregate) and one combining task; on
    one worker, one task (:func:`_whole`)."""
    dsk, keys = locality.graph_and_keys(df)
    groups = _worker_groups(df, keys)
    name = f"gpuscale-groupby-{tokenize(keys, by, spec, sort, groups, locality.memory_state(df))}"
    one = len(groups) == 1
    if one:
        dsk[(name, 0)] = (_whole, [keys[i] for i in groups[0]], by, spec, sort)
    else:
        partials = [(f"{name}-partial", j) for j in range(len(groups))]
        for pkey, idx in zip(partials, groups):
            dsk[pkey] = (_partial, [keys[i] for i in idx], by, spec)
        dsk[(name, 0)] = (_combine, partials, by, spec, sort)
    meta = _meta_of(_whole if one else _combined, [df._meta], by, spec)
    return frame_of_task(dsk, meta, (name, 0), "gpuscale-groupby")


def frame_of_task(dsk: dict, meta, key, prefix: str):
    """A one-partition Dask DataFrame whose partition is the task ``dsk[key]`` itself (no
    alias task, unlike ``dd.from_graph``), named from ``key``, which names the task by its
    content."""
    return _dask_compat.one_task_frame(dsk, meta, key, prefix, tokenize(key))


def one_single_thread_worker() -> str | None:
    """Why one task does the whole job here (the default client's cluster is one worker with
    one thread: rule ``routes.one-task``), or None."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return None
    if _dask_compat.size(client) != (1, 1):
        return None
    return "one worker with one thread holds the cluster: one task (the library's own call) instead of Dask's"


def _whole_merge(lefts, rights, on, how):
    return _concat(lefts).merge(_concat(rights), on=on, how=how)


def _whole_sort(parts, by, index: bool):
    out = _concat(parts).sort_values(by)
    return out.set_index(by) if index else out


def _one_task(name: str, func, frames, args, meta):
    """A one-partition Dask DataFrame whose one task is ``func(blocks of each frame..., *args)``,
    over the frames' futures when persisted (:func:`locality.graph_and_keys`)."""
    held = [locality.graph_and_keys(f) for f in frames]
    dsk = {k: v for graph, _ in held for k, v in graph.items()}
    block_keys = [keys for _, keys in held]
    token = tokenize(block_keys, args, [locality.memory_state(f) for f in frames])
    key = (f"{name}-{token}", 0)
    dsk[key] = (func, *[list(k) for k in block_keys], *args)
    return frame_of_task(dsk, meta, key, name)


def _dask_frame(df, route: str) -> None:
    """Refuse, in one line, what is not a Dask DataFrame (a pandas or cuDF frame in memory)."""
    import dask.dataframe as dd

    if not isinstance(df, dd.DataFrame):
        raise UserError(
            f"{route} takes a Dask DataFrame, got {type(df).__module__.partition('.')[0]} "
            f"{type(df).__name__}",
            "wrap it with dask.dataframe.from_pandas(df, npartitions=N), or read your files with "
            "dask.dataframe.read_parquet",
        )


def merge(left, right, on, how: str = "inner", shuffle_method: str | None = None) -> Routed:
    """``left.merge(right, on=on, how=how)``, lazy: one task when one single-threaded worker is
    the whole cluster (:func:`one_single_thread_worker`), else Dask's hash join with
    ``shuffle_method``. The result's rows are the same; their order and partitioning are not."""
    _dask_frame(left, "merge")
    _dask_frame(right, "merge")
    why = one_single_thread_worker()
    if why:
        meta = _meta_of(_whole_merge, [left._meta, right._meta], on, how)
        return routed(
            _one_task("gpuscale-merge", _whole_merge, [left, right], (on, how), meta), "one task", why
        )
    return routed(
        left.merge(right, on=on, how=how, shuffle_method=shuffle_method),
        "dask",
        f"Dask's hash join (shuffle {shuffle_method or 'Dask default'}): several workers or threads",
    )


def sort(df, by: str, *, index: bool = False, shuffle_method: str | None = None) -> Routed:
    """``df.sort_values(by)`` (``index=True``: ``df.set_index(by)``, sorted), lazy: one task
    and one sorted partition (divisions unknown) when one single-threaded worker is the whole
    cluster, else Dask's own with ``shuffle_method``."""
    _dask_frame(df, "sort")
    why = one_single_thread_worker()
    if why:
        meta = _meta_of(_whole_sort, [df._meta], by, index)
        return routed(_one_task("gpuscale-sort", _whole_sort, [df], (by, index), meta), "one task", why)
    res = (
        df.set_index(by, shuffle_method=shuffle_method)
        if index
        else df.sort_values(by, shuffle_method=shuffle_method)
    )
    return routed(
        res,
        "dask",
        f"Dask's {'set_index' if index else 'sort_values'} "
        f"(shuffle {shuffle_method or 'Dask default'}): several workers or threads",
    )


def ready_to_persist(collection):
    """``collection`` as it should be handed to ``client.persist``: a Dask DataFrame optimized
    first, so its keys are the futures' (rule ``routes.persist-optimized``); others as they
    are."""
    import dask.dataframe as dd

    if isinstance(collection, (dd.DataFrame, dd.Series)):
        return collection.optimize()
    return collection
