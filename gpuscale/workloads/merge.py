"""``merge``: an inner join of two generated frames on ``key``, with a controlled fraction of
the right frame's keys matching the left's (a hash join: both sides are shuffled by key with
the backend's shuffle method).

Data: the left frame has ``rows`` rows with every key in [0, rows) exactly once (a
pseudo-random permutation, key_i = (a i + 1) mod rows) and ``x = 7 key + 3``; the right frame
has ``right_rows`` rows, each with probability ``match_fraction`` a key drawn from [0, rows)
(matches exactly one left row), else one from [rows, 2 rows) (matches none), and a random
float ``y``.

Validation:

* the result has exactly as many rows as the right frame has keys below ``rows`` (counted
  separately on the right frame);
* every result row pairs the right key with its own left row: ``x == 7 key + 3``;
* sum of ``y`` over the result = sum of ``y`` over the matching right rows (relative 1e-9);
* the matching fraction is within 6 sigma of ``--match-fraction`` (the generator's promise);
* small (rows + right_rows <= ``FULL_CHECK_ROWS``): the whole result equals pandas'
  ``merge`` of host copies (rows compared after sorting by key, y).
"""

from __future__ import annotations

import importlib
import math

import dask
from pydantic import Field, PositiveInt

from ..routes import dataframe as gdf
from . import Check, Context, Output, Params, Validation, Workload, _frames, register
from ._frames import Shuffling, from_partitions, host_frame, plan_partitions
from .base import block_field, seed_field

ROW_BYTES = 16
PRIMES = (1_000_003, 999_983, 998_244_353)


class MergeParams(Params):
    rows: PositiveInt = Field(
        2_000_000, description="rows of the left frame (its keys: 0..rows-1, once each)"
    )
    right_rows: PositiveInt | None = Field(None, description="rows of the right frame (default: --rows)")
    match_fraction: float = Field(
        0.3, ge=0.0, le=1.0, description="fraction of right rows whose key matches a left row, 0..1"
    )
    partitions: PositiveInt | None = block_field(
        "partitions of the left frame", "from the backend's partition size and the cluster's threads"
    )
    seed: int = seed_field()


def multiplier(rows: int) -> int:
    """A prime that does not divide ``rows``: key_i = (a i + 1) mod rows is a permutation."""
    return next(a for a in PRIMES if rows % a)


def make_left(args):
    i, start, n, array_module, frame_module, rows = args
    xp = importlib.import_module(array_module)
    lib = importlib.import_module(frame_module)
    key = (xp.arange(start, start + n, dtype="int64") * multiplier(max(rows, 1)) + 1) % max(rows, 1)
    return lib.DataFrame({"key": key, "x": key * 7 + 3})


def make_right(args):
    i, start, n, array_module, frame_module, rows, fraction, seed = args
    xp = importlib.import_module(array_module)
    lib = importlib.import_module(frame_module)
    rs = xp.random.RandomState(seed * 1_000_003 + 7_919 + i)
    match = rs.random_sample(n) < fraction
    k = rs.randint(0, max(rows, 1), size=n, dtype="int64")
    return lib.DataFrame({"key": xp.where(match, k, k + rows), "y": rs.random_sample(n)})


@register
class Merge(Shuffling, Workload):
    name = "merge"
    description = "inner join of two frames with a controlled fraction of matching keys"
    collection = "dataframe"
    Params = MergeParams
    ROUTE = "join"

    def right_rows(self, p) -> int:
        return p.right_rows or p.rows

    def plan(self, p, ctx: Context) -> None:
        left = plan_partitions(ctx, p.partitions, p.rows, ROW_BYTES, "partitions")
        right_rows = self.right_rows(p)
        ctx.choose(
            "right_partitions",
            max(1, min(right_rows, round(left * right_rows / p.rows))),
            "rule",
            "the left frame's partitions scaled by --right-rows / --rows",
        )
        self.plan_route(ctx, "merge", "Dask's hash join")

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """By route. P2P: both frames, both sides' shards in P2P's buffers, the result. The
        task-based join and the one-task merge: four copies of both frames as one peak. The full
        check (rows + right rows <= ``FULL_CHECK_ROWS``): twice the largest frame."""
        right = self.right_rows(p)
        result = int(right * p.match_fraction) * (ROW_BYTES + 8)
        full = ctx.validate != "off" and p.rows + right <= _frames.FULL_CHECK_ROWS
        check = 2 * max(p.rows * ROW_BYTES, right * ROW_BYTES, result) if full else 0
        return _frames.memory_by_route(ctx, p.rows + right, ROW_BYTES, result, 4, check)

    def task_bytes(self, p, ctx: Context) -> int:
        """P2P: one transfer task's peak on the larger side's partitions; other routes: 0."""
        return _frames.transfer_task_bytes(
            ctx, ROW_BYTES, partitions=p.rows, right_partitions=self.right_rows(p)
        )

    def describe_data(self, p) -> dict:
        return {
            "left": {"rows": p.rows, "columns": {"key": "int64", "x": "int64"}},
            "right": {"rows": self.right_rows(p), "columns": {"key": "int64", "y": "float64"}},
            "source": f"generated, {p.match_fraction:g} of right keys match",
        }

    def generate(self, p, ctx: Context):
        left = from_partitions(make_left, p.rows, ctx.value("partitions"), ctx, p.rows)
        right = from_partitions(
            make_right,
            self.right_rows(p),
            ctx.value("right_partitions"),
            ctx,
            p.rows,
            p.match_fraction,
            p.seed,
        )
        return {"left": left, "right": right}

    def compute(self, data, p, ctx: Context) -> Output:
        route = gdf.merge(
            data["left"],
            data["right"],
            on="key",
            how="inner",
            shuffle_method=ctx.value("shuffle_method"),
        )
        return self.routed(route, ctx)

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        res, left, right = out.collections["result"], data["left"], data["right"]
        right_rows = self.right_rows(p)
        matching = right[right["key"] < p.rows]
        counts = dask.compute(
            res.shape[0],
            matching.shape[0],
            (res["x"] != res["key"] * 7 + 3).sum(),
            (res["key"] >= p.rows).sum(),
            res["y"].sum(),
            matching["y"].sum(),
        )
        got_rows, expected_rows, bad_x, outside = (int(v) for v in counts[:4])
        y_res, y_ref = (float(v) for v in counts[4:])
        checks = [
            Check("rows = right keys below --rows", got_rows == expected_rows, got_rows, expected_rows),
            Check.within(
                "x = 7 key + 3 in every row (pairs the right left row)", bad_x, 0, "mismatching rows"
            ),
            Check("every key is a left key", outside == 0, outside, 0, "rows with key >= --rows"),
        ]
        rel = abs(y_res - y_ref) / max(abs(y_ref), 1e-300) if y_ref else abs(y_res)
        checks.append(Check("sum y = sum y of matching right rows", rel <= 1e-9, rel, 1e-9, "relative"))
        sigma = math.sqrt(max(p.match_fraction * (1 - p.match_fraction), 1e-12) / right_rows)
        frac = expected_rows / right_rows
        checks.append(
            Check(
                "matching fraction ~ --match-fraction (6 sigma)",
                abs(frac - p.match_fraction) <= 6 * sigma + 1e-12,
                frac,
                f"{p.match_fraction:g} +- {6 * sigma:.2g}",
            )
        )
        method = "row count + per-row pairing (x = 7 key + 3) + sum of y"
        if p.rows + right_rows <= _frames.FULL_CHECK_ROWS:
            lh, rh = (host_frame(d.compute()) for d in (left, right))
            ref = lh.merge(rh, on="key", how="inner")
            got = host_frame(res.compute())
            checks.append(_same_rows(got, ref))
            method = "full reference (pandas merge of host copies) + " + method
        return Validation(method, checks)


def _same_rows(got, ref) -> Check:
    cols = ["key", "x", "y"]
    if sorted(got.columns) != sorted(cols) or len(got) != len(ref):
        return Check(
            "same rows as pandas merge",
            False,
            f"{len(got)} rows, {list(got.columns)}",
            f"{len(ref)} rows, {cols}",
        )
    a = got[cols].sort_values(["key", "y"]).to_numpy()
    b = ref[cols].sort_values(["key", "y"]).to_numpy()
    bad = int((a != b).any(axis=1).sum())
    return Check("same rows as pandas merge", bad == 0, bad, 0, "mismatching rows")
