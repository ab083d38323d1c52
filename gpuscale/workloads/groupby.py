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

On your own data (``--by``, ``--agg``): ``fast`` (the default) counts every group's rows
separately (the counts must sum to the rows with a key, the groups must be the result's, no
``count`` may exceed them) and recomputes ``SAMPLE_GROUPS`` sampled groups with pandas;
``full`` recomputes the whole result with pandas on the host, where it fits.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Literal, Optional, Union

import dask
import numpy as np
from pydantic import Field, PositiveInt, field_validator

from .. import errors
from ..backends import to_host
from ..data import inputs
from ..data.inputs import AGG_EXAMPLE, parse_agg, parse_by
from ..errors import UserError
from ..routes import dataframe as routes
from ..routes import locality
from . import Check, Context, Output, Params, Validation, Workload, register
from ._frames import PARTITION_COPIES, check_partitions, from_partitions, host_frame, plan_partitions
from .base import block_field, seed_field

if TYPE_CHECKING:  # imported where used: the CLI builds this workload's command without them
    import pandas as pd

AGG = {"int64": ["max", "count"], "float64": ["mean"]}
ROW_BYTES = 24  # key + int64 + float64
RESULT_ROW_BYTES = 8 * (1 + sum(len(a) for a in AGG.values()))
FULL_CHECK_ROWS = 5_000_000
SAMPLE_GROUPS = 25
MEAN_RTOL = 1e-9
PARTIAL_ROW_BYTES = 8 * (1 + 4)
"""A tree partial's row: the key and max, count, sum, count (the mean's two)."""
COUNT_ROW_BYTES = 16
"""A key's count in the fast check (key, count)."""
COMBINE_COPIES = 3
"""A combine task holds its inputs, their concatenation and the grouped output (see
docs/decisions.md, rule ``groupby.combine-copies``)."""


class GroupbyParams(Params):
    rows: PositiveInt = Field(2_000_000, description="rows of the frame")
    keys: PositiveInt = Field(10_000, description="distinct keys (cardinality), at most rows")
    partitions: PositiveInt | None = block_field(
        "partitions", "from the backend's partition size and the cluster's threads"
    )
    split_out: Union[Literal["auto"], PositiveInt] = Field(
        "auto", description="result partitions (auto: 1 when the result fits the budget)"
    )
    seed: int = seed_field()
    by: Optional[list[str]] = Field(
        None,
        description="with --input: column(s) to group by, e.g. "
        "--by store or --by store,day (a ',' in a name: \\,)",
    )
    agg: Optional[dict[str, list[str]]] = Field(
        None,
        description="with --input: aggregations per column, e.g. --agg 'price:mean,max;qty:sum'; "
        "a ';' in a column name is written \\; (--agg 'a\\;b:sum'), a backslash \\\\",
    )

    @field_validator("by", mode="before")
    @classmethod
    def _by(cls, v):
        return parse_by(v) if isinstance(v, str) else v

    @field_validator("agg", mode="before")
    @classmethod
    def _agg(cls, v):
        if isinstance(v, str):
            return parse_agg(v)
        if isinstance(v, dict):
            return {c: [a] if isinstance(a, str) else list(a) for c, a in v.items()}
        return v


def make_partition(args):
    """One partition, built on the chunk libraries named in ``args`` (runs on a worker; see
    :func:`gpuscale.workloads._frames.from_partitions`)."""
    i, _start, n, array_module, frame_module, keys, seed = args
    xp = importlib.import_module(array_module)
    lib = importlib.import_module(frame_module)
    rs = xp.random.RandomState(seed * 1_000_003 + i)
    return lib.DataFrame(
        {
            "key": rs.randint(0, keys, size=n, dtype="int64"),
            "int64": rs.randint(0, 1_000_000, size=n, dtype="int64"),
            "float64": rs.random_sample(n),
        }
    )


@register
class Groupby(Workload):
    name = "groupby"
    description = "groupby-aggregate (max, count, mean) with the plan chosen from the result size"
    collection = "dataframe"
    Params = GroupbyParams
    input_formats = ("parquet", "csv")
    output_formats = (".parquet", ".csv")
    generation_params = ("rows", "keys", "partitions")
    input_params = ("by", "agg")
    validation_levels = True
    one_gpu = "a second GPU moves each worker's partial to the other and made 100 M and 400 M rows slower"

    def check(self, p) -> None:
        if p.keys > p.rows:
            raise UserError(
                f"--keys {p.keys} > --rows {p.rows}: there cannot be more groups than rows",
                "make --keys at most --rows",
            )
        check_partitions(p.partitions, p.rows)

    def plan(self, p, ctx: Context) -> None:
        if ctx.data is not None:
            return self._plan_input(p, ctx)
        plan_partitions(ctx, p.partitions, p.rows, ROW_BYTES)
        # keys and rows are known: the whole plan is made here, for `explain`
        _record_plan(
            ctx,
            p,
            routes.decide_groupby(
                groups=p.keys,
                rows=p.rows,
                npartitions=ctx.value("partitions"),
                width=1 + sum(len(a) for a in AGG.values()),
                decomposable=True,
                family=ctx.family,
                split_out=p.split_out,
                **_room_for(p.rows * ROW_BYTES, ctx),
            ),
        )

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """The frame; the plan's intermediates (per-worker and shuffle: as large as the frame; a
        tree: one partial per partition, at most the result each); the result; the full check's
        copy, twice the frame (docs/decisions.md, rule ``groupby.full-check-copy``)."""
        if ctx.data is not None:  # the input's size in memory where known
            data = ctx.data.nbytes or 0
            return {"inputs": data, "intermediates": data, "results": data}
        data = p.rows * ROW_BYTES
        result = p.keys * RESULT_ROW_BYTES
        parts = ctx.value("partitions") or 1
        inter = min(data, result * parts) if ctx.value("groupby_strategy") == "tree" else data
        return {
            "inputs": data,
            "intermediates": inter,
            "results": result,
            "validation": 2 * data if _full_check(p, ctx) else 0,
        }

    def streams(self, p, ctx: Context) -> str | None:
        if ctx.data is not None or ctx.value("groupby_strategy") != "tree":
            return None
        return (
            "the frame is generated partition by partition from its seed, and the tree plan "
            "aggregates each partition as it is made: every pass (each timed repeat, the "
            "validation) makes its partitions again and holds only their partials; the "
            "timings include making them"
        )

    def stream_block_bytes(self, p, ctx: Context) -> int:
        parts = ctx.value("partitions")
        return int(p.rows * ROW_BYTES / parts) if ctx.data is None and parts else 0

    def task_bytes(self, p, ctx: Context) -> int:
        """The larger of a partition's task (``PARTITION_COPIES`` partitions) and a combine's
        (:func:`combine_bytes`)."""
        parts = ctx.value("partitions")
        if ctx.data is not None or not parts:
            return 0
        return max(int(PARTITION_COPIES * p.rows * ROW_BYTES / parts), combine_bytes(p, ctx))

    def describe_data(self, p) -> dict:
        return {
            "rows": p.rows,
            "columns": {"key": "int64", "int64": "int64", "float64": "float64"},
            "source": f"generated, {p.keys:,} keys",
        }

    def generate(self, p, ctx: Context):
        return from_partitions(make_partition, p.rows, ctx.value("partitions"), ctx, p.keys, p.seed)

    def compute(self, data, p, ctx: Context) -> Output:
        if isinstance(data, dict):  # the user's frame
            df, groups, rows, nbytes = data["df"], data["groups"], data["rows"], data.get("bytes")
            by, agg = p.by, p.agg
        else:
            df, by, agg, groups, rows, nbytes = data, "key", AGG, p.keys, p.rows, p.rows * ROW_BYTES
        room = _room_for(nbytes, ctx)
        res = routes.groupby_agg(
            df, by, agg, groups=groups, rows=rows, split_out=p.split_out, family=ctx.family, **room
        )
        plan = res.decision
        _record_plan(ctx, p, plan)
        return Output(
            {"result": res.result}, {"plan": {"strategy": plan.value, **plan.numbers, "reason": plan.rule}}
        )

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        if isinstance(data, dict):
            return _validate_user(out, data["df"], p, ctx.validate or "fast")
        level = ctx.validate
        if _full_check(p, ctx):
            got = _host_frame(out.collections["result"].compute())
            if level == "full":
                inputs.host_fits(self.host_bytes(p), "a pandas copy of the frame")
            frame = host_frame(data.compute())  # grouped by key: its row order does not matter
            checks = _compare(got, frame.groupby("key").agg(AGG), "all groups")
            return Validation("full reference (pandas on the same data)", checks, level)
        # independent of the result: every key's count, the row count and the sampled keys'
        # rows, compared on the workers (:func:`_sampled_check`)
        sample = [
            int(k)
            for k in np.sort(
                np.random.default_rng(p.seed + 11).choice(p.keys, size=_sample_size(p, ctx), replace=False)
            )
        ]
        fan = ctx.value("split_every") or ctx.knobs.split_every or 8
        rows, n_got, n_counts, total, same, picked, subset = _sampled_check(
            data, out.collections["result"], sample, fan
        )
        checks = [
            Check("counts sum to rows", total == rows == p.rows, total, p.rows),
            Check("every group's count = value_counts(key)", same, n_got, n_counts),
        ]
        ref = _host_frame(subset).groupby("key").agg(AGG)
        checks += _compare(_host_frame(picked), ref, f"{len(sample)} sampled groups")
        return Validation("all counts (value_counts) + sampled groups recomputed with pandas", checks, level)

    def host_bytes(self, p) -> int:
        """Host memory ``--validate full`` needs on generated data (the frame, its groupby)."""
        return 3 * p.rows * ROW_BYTES

    def check_input(self, p, source) -> None:
        if not p.by or not p.agg:
            missing = " and ".join(f for f, v in (("--by", p.by), ("--agg", p.agg)) if not v)
            cols = errors.listed(source.meta.columns)
            raise UserError(
                f"groupby on your own data needs {missing} (columns: {cols})",
                f"e.g. --by COLUMN {AGG_EXAMPLE} (API: by=..., agg={{column: [aggs]}})",
            )
        routes.check_columns(source.meta, p.by, p.agg, where=source.label)

    def _plan_input(self, p, ctx: Context) -> None:
        if ctx.data.format == "csv":
            ctx.choose(
                "csv_blocksize",
                ctx.knobs.partition_bytes,
                "family",
                f"{ctx.family.name} partition budget {ctx.knobs.partition_bytes / 2**20:.0f} MiB "
                "per CSV block",
            )

    def from_data(self, source, p, ctx: Context):
        from distributed import wait

        notes: list[str] = []
        df = inputs.open_source(source, ctx.family, partition_bytes=ctx.knobs.partition_bytes)
        if (
            source.format == "dask"
            and source.chunk_type
            and source.chunk_type.split(".")[0] != ctx.family.dataframe_module
        ):
            notes.append(
                f"moved {source.chunk_type} partitions to {ctx.family.dataframe_module} "
                f"(the session's {ctx.family.name} family)"
            )
        routes.check_columns(df, p.by, p.agg, where=source.label)
        df = ctx.client.persist(routes.ready_to_persist(df))  # read once for the estimate and repeats
        try:
            wait(df)
            count, how = routes.count_groups(df, p.by)
            rows, groups = dask.compute(df.shape[0], count)
        except Exception as e:  # noqa: BLE001 - a file that fails to parse
            if source.path is None:
                raise
            raise inputs.unreadable(source.path, source.format, e) from None
        rows, groups = int(rows), max(1, min(int(rows), int(round(float(groups)))))
        ctx.choose(
            "partitions",
            df.npartitions,
            "data",
            "your DataFrame's partitions"
            if source.path is None
            else f"Dask's {inputs.FORMAT_NAMES[source.format]} reader",
        )
        ctx.choose("groups", groups, "estimated", f"{how} of the group-by key(s), one pass over the data")
        if ctx.validate == "full":
            nbytes = source.nbytes or int(df.memory_usage(deep=True).sum().compute())
            inputs.host_fits(3 * nbytes, source.label)
        desc = source.describe()
        desc.update(
            rows=rows,
            partitions=df.npartitions,
            columns=source.columns,
            chunk_type=inputs.type_name(df._meta),
        )
        if notes:
            desc["notes"] = notes
        ctx.data_description = desc
        nbytes = source.nbytes
        if not nbytes and ctx.memory is not None and ctx.memory.task_room is not None:
            nbytes = int(df.memory_usage(deep=True).sum().compute())
        return {"df": df, "groups": groups, "rows": rows, "bytes": nbytes or None}

    def output_value(self, out: Output, p, suffix: str):
        return _host_frame(out.collections["result"].compute())


def combine_bytes(p, ctx: Context) -> int:
    """What one combine task holds at its peak: ``fan-in`` partials of up to ``keys`` groups
    each, ``COMBINE_COPIES`` times: the tree's partials, else the fast check's counts (0 when
    neither runs). Generated data only."""
    parts = ctx.value("partitions") or 1
    fan = min(parts, ctx.value("split_every") or parts)
    rows_in = min(fan * p.keys, p.rows)
    if ctx.value("groupby_strategy") == "tree":
        row = PARTIAL_ROW_BYTES
    elif ctx.validate in (None, "fast") and parts > 1 and not _full_check(p, ctx):
        row = COUNT_ROW_BYTES
    else:
        return 0
    return int(rows_in * row * COMBINE_COPIES)


def _full_check(p, ctx: Context) -> bool:
    return ctx.validate == "full" or (ctx.validate is None and p.rows <= FULL_CHECK_ROWS)


def _sampled_check(data, result, sample: list[int], fan: int = 8):
    """(rows, groups in the result, keys counted, the result's counts summed, every count equal
    to its key's, the result's rows of the sampled keys, the data's rows of them), in one
    compute whose tasks hold at most ``fan`` partitions' counts each."""
    from dask.base import tokenize
    from dask.delayed import Delayed

    dsk, dkeys = locality.graph_and_keys(data)
    rdsk, rkeys = locality.graph_and_keys(result)
    dsk.update(rdsk)
    name = f"gpuscale-groupby-check-{tokenize(dkeys, rkeys, sample, locality.memory_state(data))}"
    tier = {(f"{name}-facts", i): (_facts, k, sample) for i, k in enumerate(dkeys)}
    dsk.update(tier)
    facts = list(tier)
    fan, level = max(2, fan), 0
    while len(facts) > fan:
        level += 1
        tier = {
            (f"{name}-merge-{level}", i // fan): (_merge_facts, facts[i : i + fan])
            for i in range(0, len(facts), fan)
        }
        dsk.update(tier)
        facts = list(tier)
    dsk[(name, 0)] = (_verdict, facts, rkeys, sample)
    (verdict,) = dask.compute(Delayed((name, 0), dsk))
    return verdict


def _facts(part, sample):
    """Runs on a worker: one partition's rows, count per key, and rows of the sampled keys."""
    return len(part), part["key"].value_counts(sort=False), part[part["key"].isin(sample)]


def _merge_facts(facts):
    """Runs on a worker: several partitions' facts as one (rows summed, counts per key summed,
    sampled rows concatenated)."""
    from dask.dataframe.dispatch import concat

    return (
        sum(f[0] for f in facts),
        concat([f[1] for f in facts]).groupby(level=0).sum(),
        concat([f[2] for f in facts]),
    )


def _verdict(facts, result_parts, sample):
    """Runs on a worker, on the chunk library (pandas or cuDF): see :func:`_sampled_check`."""
    from dask.dataframe.dispatch import concat

    result = concat(list(result_parts)) if len(result_parts) > 1 else result_parts[0]
    counts = concat([f[1] for f in facts]).groupby(level=0).sum().sort_index()
    got = result[("int64", "count")].sort_index()
    same = (
        len(got) == len(counts)
        and bool((got.index == counts.index).all())
        and bool((got.values == counts.values).all())
    )
    return (
        int(sum(f[0] for f in facts)),
        len(got),
        len(counts),
        int(got.sum()),
        bool(same),
        result[result.index.isin(sample)],
        concat([f[2] for f in facts]),
    )


def _sample_size(p, ctx: Context) -> int:
    """Groups the sampled check recomputes: ``SAMPLE_GROUPS``, fewer where their rows would
    take more than a quarter of what a worker's tasks may hold."""
    n = min(SAMPLE_GROUPS, p.keys)
    room = ctx.memory.task_room if ctx.memory is not None else None
    if room:
        n = min(n, max(1, int(room / 4 / (p.rows * ROW_BYTES / p.keys))))
    return n


def _room_for(nbytes: int | None, ctx: Context) -> dict[str, int | None]:
    """The keywords of :func:`gpuscale.routes.dataframe.decide_groupby` for a frame of
    ``nbytes`` (None: not checked): threads, bytes per worker and what one worker's tasks may
    hold (docs/decisions.md, rule ``groupby.per-worker-room``)."""
    b = ctx.memory
    threads = (b.threads if b is not None and b.workers else None) or getattr(
        ctx.spec, "threads_per_worker", None
    )
    out: dict[str, int | None] = {"threads": threads} if threads else {}
    if b is None or not b.workers or not nbytes:
        return out
    return {**out, "worker_bytes": -(-int(nbytes) // b.workers), "room_bytes": b.task_room}


def _record_plan(ctx: Context, p, plan) -> None:
    """The groupby plan's choices, each with its source and rule."""
    given = p.split_out != "auto"
    n = plan.numbers
    ctx.choose("groupby_strategy", plan.value, "flag" if given else "rule", plan.rule)
    ctx.choose("split_out", n["split_out"], "flag" if given else "rule", None if given else plan.rule)
    ctx.choose(
        "shuffle_method",
        n["shuffle_method"],
        "rule" if n["split_out"] > 1 else "family",
        f"no shuffle: split_out=1 ({plan.value})"
        if n["split_out"] == 1
        else f"{ctx.family.name} family's shuffle for split_out={n['split_out']}",
    )
    ctx.choose(
        "split_every",
        n["split_every"],
        "family",
        f"{ctx.family.name} fan-in {ctx.knobs.split_every}"
        if ctx.knobs.split_every
        else f"{ctx.family.name}: all partials in one combine (max(2, {ctx.value('partitions')} partitions))",
    )


SAMPLE_RTOL = {"float64": 1e-9, "float32": 1e-3}
VAR_RTOL = {"float64": 1e-7, "float32": 1e-2}


def _validate_user(out: Output, df, p, level: str) -> Validation:
    """Validation without a known answer (see the module docstring)."""
    import pandas as pd

    by, spec = p.by, p.agg
    key = by[0] if len(by) == 1 else by
    got = _host_frame(out.collections["result"].compute())
    if level == "full":
        frame = _host_frame(df.compute())
        checks = _compare_frame(got, frame, key, spec, "all groups")
        return Validation("full reference (pandas on the whole frame)", checks, "full")
    sizes = (
        df[key].value_counts(split_out=1, sort=False) if len(by) == 1 else df.groupby(by).size(split_out=1)
    )
    keyed = df[by].dropna().shape[0]
    sizes, keyed, rows = dask.compute(sizes, keyed, df.shape[0])
    sizes = to_host(sizes).sort_index()
    total, keyed, rows = int(sizes.sum()), int(keyed), int(rows)
    checks = [
        Check(
            "group counts sum to the rows",
            total == keyed,
            total,
            keyed,
            f"{rows - keyed} of {rows} rows have a missing key (not grouped)"
            if keyed != rows
            else "independent count (value_counts / groupby().size())",
        )
    ]
    same = _same_index(sizes.index, got.index)
    checks.append(Check("same groups as the independent count", same, len(got), len(sizes)))
    if same:
        for col, aggs in spec.items():
            for a in aggs:
                g = got[(col, a)].to_numpy()
                if a == "size":
                    bad = int((g != sizes.to_numpy()).sum())
                    checks.append(Check(f"{col} size = group count", bad == 0, bad, 0, "mismatching groups"))
                elif a == "count":
                    bad = int((g > sizes.to_numpy()).sum())
                    checks.append(Check(f"{col} count <= group count", bad == 0, bad, 0, "groups over"))
    n = min(SAMPLE_GROUPS, len(got))
    pos = np.sort(np.random.default_rng(p.seed + 11).choice(len(got), size=n, replace=False)) if n else []
    picked = got.iloc[pos]
    mask = None
    for i, col in enumerate(by):
        values = picked.index.get_level_values(i) if len(by) > 1 else picked.index
        m = df[col].isin(list(pd.unique(np.asarray(values, dtype=object))))
        mask = m if mask is None else mask & m
    subset = (_host_frame(df[mask].compute()) if n else _host_frame(df._meta)).reset_index(drop=True)
    checks += _compare_frame(picked, subset, key, spec, f"{n} sampled groups", only=picked.index)
    return Validation(
        f"all group counts (independent count) + {n} sampled groups recomputed with pandas", checks, "fast"
    )


def _compare_frame(got: pd.DataFrame, frame: pd.DataFrame, key, spec, what: str, only=None) -> list[Check]:
    """``got`` against pandas' ``frame.groupby(key).agg(spec)`` (restricted to ``only``): exact
    for counts, min, max, first, last and integer sums; floats relative to the group's scale."""
    import pandas as pd

    ref = frame.groupby(key).agg(spec)
    if only is not None:
        ref = ref[ref.index.isin(only)]
    ref = ref.sort_index()
    got = got.sort_index()
    same = _same_index(got.index, ref.index)
    checks = [Check(f"same groups ({what})", same, len(got), len(ref))]
    if not same:
        return checks
    groupers = [frame[k] for k in ([key] if isinstance(key, str) else key)]
    for col, aggs in spec.items():
        x = frame[col]
        kind = x.dtype.kind
        dt = "float32" if x.dtype == np.float32 else "float64"
        for a in aggs:
            g = np.asarray(got[(col, a)].to_numpy(), dtype=object if kind not in "biuf" else None)
            r = np.asarray(ref[(col, a)].to_numpy(), dtype=object if kind not in "biuf" else None)
            exact = a in ("count", "size", "min", "max", "first", "last") or (a == "sum" and kind in "biu")
            if exact:
                both_nan = pd.isna(pd.Series(g)).to_numpy() & pd.isna(pd.Series(r)).to_numpy()
                bad = int(((g != r) & ~both_nan).sum())
                checks.append(Check(f"{col} {a} exact", bad == 0, bad, 0, "mismatching groups"))
                continue
            g, r = g.astype(np.float64), r.astype(np.float64)
            xf = x.astype(np.float64)
            if a in ("sum", "mean"):
                scale = xf.abs().groupby(groupers).agg(a)
                tol = SAMPLE_RTOL[dt]
            else:  # var, std: compare variances against 2 mean(x^2)
                scale = (xf**2).groupby(groupers).mean() * 2
                tol = VAR_RTOL[dt]
                if a == "std":
                    g, r = g**2, r**2
            scale = scale.reindex(ref.index).to_numpy(dtype=np.float64)
            diff = np.abs(g - r)
            diff[np.isnan(g) & np.isnan(r)] = 0.0
            err = float(np.nanmax(diff / np.maximum(scale, 1e-300), initial=0.0)) if len(r) else 0.0
            err = err if not np.isnan(diff).any() else float("inf")
            checks.append(Check(f"{col} {a}", err <= tol, err, tol, "max |got - pandas| / group scale"))
    return checks


def _same_index(a: pd.Index, b: pd.Index) -> bool:
    if len(a) != len(b):
        return False
    if a.equals(b):
        return True
    fa = a.to_frame(index=False).astype(object).to_numpy()
    fb = b.to_frame(index=False).astype(object).to_numpy()
    return bool((fa == fb).all())


def _host_frame(df) -> pd.DataFrame:
    return host_frame(df).sort_index()


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
