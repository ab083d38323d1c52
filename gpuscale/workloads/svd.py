"""``svd``: tall-skinny parallel SVD of a generated matrix, through :func:`gpuscale.linalg.svd`.

Data: uniform random entries, or with ``--condition C`` a matrix Q diag(s) V^T with a known,
log-spaced spectrum s from 1 down to 1/C (Q from a TSQR of a Gaussian matrix, V random
orthogonal), so every singular value can be checked against the truth.

Validation (tolerances relative to s_max, by dtype; see ``TOL``):

* always: s finite, non-negative, descending; sum(s^2) equals ||X||_F^2 (computed
  independently, by a separate reduction over X); s_max at least ||X z|| / ||z|| for a random
  z, and at most ||X||_F;
* with ``--condition``: every singular value against the known spectrum;
* small inputs (rows x cols <= ``FULL_CHECK_ELEMENTS``): every singular value against
  ``numpy.linalg.svd`` of the same matrix on the host;
* with ``--compute-uv``: residuals ||X v_i - s_i u_i|| for the first and last triplets.

On your own data: ``fast`` (the default) checks the identities above and the residuals of a
seeded sample of triplets; ``full`` also recomputes every singular value (and triplet
residual) with ``numpy.linalg.svd`` on the host, where it fits.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import dask
import numpy as np
from pydantic import Field, PositiveInt

from .. import backends
from ..backends import to_host
from ..backends.convert import from_memory
from ..data import inputs
from ..errors import UserError
from . import Check, Context, Output, Params, Validation, Workload, register
from .base import Dtype, block_field, dtype_field, seed_field

FULL_CHECK_ELEMENTS = 4_000_000
# value-check tolerance (x s_max), Frobenius identity (relative), triplet residual (x s_max)
TOL = {
    "float64": {"values": 1e-10, "frobenius": 1e-9, "residual": 1e-9},
    "float32": {"values": 1e-4, "frobenius": 1e-4, "residual": 1e-3},
    # your float16 data: the checks' own sums run in it; about 5 eps
    "float16": {"values": 5e-3, "frobenius": 5e-3, "residual": 1e-2},
}


class SVDParams(Params):
    rows: PositiveInt = Field(200_000, description="rows of the matrix")
    cols: PositiveInt = Field(100, description="columns (rows >= cols)")
    chunk_rows: PositiveInt | None = block_field(
        "rows per block", "chosen from the backend's chunk size and the cluster's threads"
    )
    dtype: Dtype = dtype_field()
    compute_uv: bool = Field(False, description="also form U and V^T")
    route: Literal["auto", "gram", "cholqr2", "tsqr"] = Field(
        "auto", description="SVD route (auto: fastest that holds the accuracy target)"
    )
    condition: float | None = Field(
        None,
        ge=1,
        le=1e15,
        allow_inf_nan=False,
        description="build a matrix with this condition number (1 to 1e15: float64 resolves no more) and a "
        "known log-spaced spectrum",
    )
    seed: int = seed_field()


@register
class SVD(Workload):
    name = "svd"
    description = "tall-skinny parallel SVD (Gram / CholeskyQR2 / TSQR routes, chosen by accuracy)"
    collection = "array"
    Params = SVDParams
    input_formats = ("npy", "zarr")
    output_formats = (".npy", ".npz")
    generation_params = ("rows", "cols", "chunk_rows", "dtype", "condition")
    validation_levels = True

    def check(self, p) -> None:
        if p.cols > p.rows:
            raise UserError(
                f"svd needs a tall matrix: --cols {p.cols} > --rows {p.rows}", "make --rows at least --cols"
            )
        if p.chunk_rows is not None and p.chunk_rows > p.rows:
            raise UserError(
                f"--chunk-rows {p.chunk_rows} is larger than the array's {p.rows} rows",
                f"use --chunk-rows <= {p.rows} (or leave it out)",
            )
        if p.chunk_rows is not None and p.chunk_rows < p.cols and p.route == "tsqr":
            raise UserError(
                f"--chunk-rows {p.chunk_rows} < --cols {p.cols}: TSQR needs blocks at "
                "least as tall as they are wide",
                f"use --chunk-rows >= {p.cols}",
            )

    def plan(self, p, ctx: Context) -> None:
        src = ctx.data
        if src is not None and src.format == "dask":
            rows = src.obj.chunks[0]
            ctx.choose(
                "chunk_rows",
                "input",
                "data",
                f"your array's own row blocks: {len(rows)} block(s) of {_span(rows)} rows",
            )
        elif src is not None:
            m, n = src.shape
            rows, why = _chunk_rule(m, n, np.dtype(src.dtype).itemsize, ctx, p.route)
            stored = src.stored_chunks[0] if src.stored_chunks else None
            if stored:  # whole stored chunks per block: each is read once
                rows = min(m, max(stored, rows // stored * stored))
                why += f", rounded to the store's {stored}-row chunks"
            ctx.choose("chunk_rows", rows, "rule", why)
        elif p.chunk_rows is not None:
            ctx.choose("chunk_rows", p.chunk_rows, "flag")
        else:
            rows, why = _chunk_rule(p.rows, p.cols, np.dtype(p.dtype).itemsize, ctx, p.route)
            ctx.choose("chunk_rows", rows, "rule", why)
        ctx.choose(
            "route",
            p.route,
            "flag" if p.route != "auto" else "default",
            "auto: Gram if its predicted error holds the tolerance, else CholeskyQR2, else TSQR"
            if p.route == "auto"
            else None,
        )
        ctx.choose_knob("tree_fan_in", "one combine step", knob="split_every")

    def _data_bytes(self, p, ctx: Context) -> int:
        if ctx.data is not None:
            src = ctx.data
            if src.nbytes is None:
                return 0  # unknown row count: not estimated
            # kept as given when float, converted to float64 otherwise
            return src.nbytes * (
                1 if np.dtype(src.dtype).kind == "f" else max(1, 8 // np.dtype(src.dtype).itemsize)
            )
        return p.rows * p.cols * np.dtype(p.dtype).itemsize

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """The matrix; TSQR's Q blocks and a generated spectrum's Q as large again; U as large
        again with --compute-uv."""
        data = self._data_bytes(p, ctx)
        inter = data if (p.route == "tsqr" or p.condition is not None) else 0
        return {"inputs": data, "intermediates": inter, "results": data if p.compute_uv else 0}

    def streams(self, p, ctx: Context) -> str | None:
        if ctx.data is not None or p.condition is not None or p.compute_uv or p.route == "tsqr":
            return None
        return (
            "the matrix is generated block by block from its seed, and the Gram / CholeskyQR2 "
            "routes read it block by block: every pass (each timed repeat, the validation) "
            "generates its blocks again instead of holding the matrix; the timings include "
            "generating it"
        )

    def stream_block_bytes(self, p, ctx: Context) -> int:
        rows = ctx.value("chunk_rows")
        return int(rows * p.cols * np.dtype(p.dtype).itemsize) if isinstance(rows, int) else 0

    def task_bytes(self, p, ctx: Context) -> int:
        rows = ctx.value("chunk_rows")
        cols = ctx.data.shape[1] if ctx.data is not None and len(ctx.data.shape) == 2 else p.cols
        itemsize = np.dtype(ctx.data.dtype).itemsize if ctx.data is not None else np.dtype(p.dtype).itemsize
        if not isinstance(rows, int):
            return 0
        return int(
            SVD_COPIES.get(p.route, 3) * rows * cols * max(itemsize, 8 if ctx.data is not None else itemsize)
        )

    def describe_data(self, p) -> dict:
        return {
            "shape": [p.rows, p.cols],
            "dtype": p.dtype,
            "source": "generated" + (f", condition {p.condition:g}" if p.condition else ", uniform"),
        }

    def host_bytes(self, p) -> int:
        """Host memory ``--validate full`` needs on generated data (X and its SVD workspace)."""
        return 3 * p.rows * p.cols * 8

    def check_input(self, p, source) -> None:
        shape = source.shape
        where = source.label
        if len(shape) != 2:
            raise UserError(
                f"svd needs a 2-D array, but {where} is {len(shape)}-D with shape {tuple(shape)}",
                "give a (rows, columns) matrix, e.g. save x.reshape(-1, 1) for one column",
            )
        m, n = shape
        kind = np.dtype(source.dtype).kind
        if kind not in "biuf":
            raise UserError(
                f"svd takes real numbers, but {where} holds {source.dtype}",
                "save it as float64 (x.astype('float64')), or x.real / abs(x) for complex data",
            )
        if isinstance(m, float) and math.isnan(m):
            return  # rows unknown until the chunk sizes are computed (when the data loads)
        if m == 0 or n == 0:
            raise UserError(f"{where} is empty (shape {tuple(shape)})", "give a matrix with rows and columns")
        if n > m:
            raise UserError(
                f"svd is for tall-skinny arrays: {where} has {m} rows < {n} columns",
                "save the transpose (x.T), whose singular values are the same",
            )

    def from_data(self, source, p, ctx: Context):
        notes: list[str] = []
        rows = ctx.value("chunk_rows")
        x = inputs.open_source(source, ctx.family, chunk_rows=rows if rows != "input" else None)
        if source.format == "dask" and backends_name(source.obj) != ctx.family.name:
            notes.append(
                f"moved {source.chunk_type} chunks to {ctx.family.array_module} "
                f"(the session's {ctx.family.name} family)"
            )
        if any(math.isnan(c) for c in x.chunks[0]):
            x = x.compute_chunk_sizes()
            notes.append("computed the unknown row-block sizes (one pass over the data)")
            self.check_input(p, dataclasses.replace(source, shape=tuple(x.shape)))
        if x.numblocks[1] > 1:
            notes.append(
                f"joined {x.numblocks[1]} column blocks into one (row blocks kept): every SVD "
                "route needs whole rows in a block"
            )
            x = x.rechunk({1: -1})
        desc = source.describe()
        desc.update(
            shape=list(x.shape),
            bytes=int(x.nbytes),
            chunk_type=inputs.type_name(x._meta),
            chunks={"row_blocks": len(x.chunks[0]), "rows_per_block": _span(x.chunks[0])},
        )
        if notes:
            desc["notes"] = notes
        ctx.data_description = desc
        return {"x": x, "s_true": None}

    def check_loaded(self, data, p, ctx: Context) -> None:
        """Refuse NaN / inf in the user's matrix, with the count and the first position."""
        if ctx.data is not None:
            inputs.check_finite(data["x"], ctx.data.label)

    def output_value(self, out: Output, p, suffix: str):
        cols = out.collections
        value = {"s": np.asarray(to_host(cols["s"].compute()))}
        if suffix == ".npz" and "vt" in cols:
            u, vt = dask.compute(cols["u"], cols["vt"])
            value.update(u=np.asarray(to_host(u)), vt=np.asarray(to_host(vt)))
        return value

    def generate(self, p, ctx: Context):
        import dask.array as da

        chunk = ctx.value("chunk_rows")
        rng = da.random.default_rng(p.seed)
        if p.condition is None:
            x = rng.random((p.rows, p.cols), chunks=(chunk, p.cols), dtype=p.dtype)
            return {"x": x, "s_true": None}
        g = rng.standard_normal((p.rows, p.cols), chunks=(max(chunk, p.cols), p.cols))
        q, _ = da.linalg.tsqr(g)
        s_true = np.logspace(0, -math.log10(p.condition), p.cols)
        v, _ = np.linalg.qr(np.random.default_rng(p.seed + 1).standard_normal((p.cols, p.cols)))
        core = s_true[:, None] * v.T  # diag(s) V^T, host; moved to the backend below
        # one task that builds the block on the backend (no host chunk: the backend audit)
        core_b = from_memory(core, ctx.family, chunks=core.shape)
        x = (
            da.blockwise(
                np.matmul, "ij", q, "ik", core_b, "kj", dtype=np.float64, concatenate=True, meta=q._meta
            )
            .astype(p.dtype)
            .rechunk((chunk, p.cols))
        )
        return {"x": x, "s_true": s_true}

    def compute(self, data, p, ctx: Context) -> Output:
        from ..routes import linalg

        res = linalg.svd(data["x"], compute_uv=p.compute_uv, route=p.route, split_every=ctx.knobs.split_every)
        route = ctx.decide("route", res.route)
        numbers = res.route.numbers
        info = {
            "name": route,
            "reason": res.route.rule,
            "condition_estimate": numbers.get("condition_estimate"),
        }
        return Output(res.collections(), {"route": {**info, "numbers": dict(numbers)}, "notes": res.notes})

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        x = data["x"]
        user = ctx.data is not None
        level = ctx.validate or ("fast" if user else None)  # None: by size (generated data)
        dtype = str(x.dtype) if str(x.dtype) in TOL else "float64"  # by the data's own precision
        tol = TOL[dtype]
        rows, cols = x.shape
        s = np.asarray(to_host(out.collections["s"].compute()), dtype=np.float64)
        checks: list[Check] = []
        smax = float(s[0]) if s.size else 0.0
        checks.append(Check("s finite and >= 0", bool(np.isfinite(s).all() and (s >= 0).all())))
        checks.append(Check("s descending", bool((np.diff(s) <= 1e-12 * max(smax, 1)).all())))
        z = np.random.default_rng(p.seed + 7).standard_normal(cols)
        zb = from_memory(z, ctx.family, chunks=z.shape)
        fro2, xz = dask.compute((x.astype(np.float64) ** 2).sum(), (x.astype(np.float64) @ zb))
        fro2 = float(to_host(fro2))
        xz = np.asarray(to_host(xz))
        rel = abs(float((s**2).sum()) - fro2) / fro2 if fro2 else abs(float((s**2).sum()))
        detail = "relative difference (||X||_F^2 by a separate sum of squares)"
        checks.append(Check.within("sum s^2 = ||X||_F^2", rel, tol["frobenius"], detail))
        lower = float(np.linalg.norm(xz) / np.linalg.norm(z))
        checks.append(
            Check(
                "||Xz||/||z|| <= s_max <= ||X||_F",
                lower <= smax * (1 + tol["frobenius"]) and smax <= math.sqrt(fro2) * (1 + tol["frobenius"]),
                smax,
                f"[{lower:.6g}, {math.sqrt(fro2):.6g}]",
            )
        )
        method = "identities"
        host_x = None
        if not user and data["s_true"] is not None:
            err = float(np.abs(s - data["s_true"]).max() / data["s_true"][0])
            detail = "max |s_i - s_true_i| / s_max"
            checks.append(Check.within("every s_i vs known spectrum", err, tol["values"], detail))
            method = "known spectrum + identities"
        elif level == "full" or (level is None and rows * cols <= FULL_CHECK_ELEMENTS):
            if level == "full":
                inputs.host_fits(3 * rows * cols * 8, "a host copy of X and its SVD")
            host_x = np.asarray(to_host(x.compute()), dtype=np.float64)
            ref = np.linalg.svd(host_x, compute_uv=False)
            err = float(np.abs(s - ref).max() / ref[0]) if ref.size and ref[0] else float(np.abs(s).max())
            detail = "max |s_i - s_ref_i| / s_max"
            checks.append(Check.within("every s_i vs numpy.linalg.svd", err, tol["values"], detail))
            method = "full reference (numpy.linalg.svd) + identities"
        if "vt" in out.collections:
            vt_all = np.asarray(to_host(out.collections["vt"].compute()), dtype=np.float64)
            if host_x is not None and level == "full":
                idx = list(range(cols))  # every triplet, on the host copy
                xv = host_x @ vt_all.T
                u = np.asarray(to_host(out.collections["u"].compute()), dtype=np.float64)
                what = "every triplet"
            else:
                # residuals of a few triplets (first, second, last and a seeded sample), on the
                # cluster, with host copies of just those columns
                pick = np.random.default_rng(p.seed + 13).choice(cols, size=min(cols, 3), replace=False)
                idx = sorted({0, min(1, cols - 1), cols - 1, *map(int, pick)})
                vb = from_memory(np.ascontiguousarray(vt_all[idx].T), ctx.family, chunks=(cols, len(idx)))
                xv, u = dask.compute(x.astype(np.float64) @ vb, out.collections["u"][:, idx])
                xv = np.asarray(to_host(xv), dtype=np.float64)
                u = np.asarray(to_host(u), dtype=np.float64)
                what = f"triplets {idx}"
            worst = float(np.linalg.norm(xv - u * s[idx][None, :], axis=0).max()) / (smax or 1.0)
            name = "triplet residuals ||Xv_i - s_i u_i||"
            checks.append(Check.within(name, worst, tol["residual"], f"{what}, relative to s_max"))
            method += " + triplet residuals"
        return Validation(method, checks, level)


SVD_COPIES = {"gram": 2, "auto": 2, "cholqr2": 3, "tsqr": 3}
"""Blocks one task holds at its peak, by route: the row block and its generated / read copy
(Gram's X_i^T X_i is cols^2); CholeskyQR2 and TSQR also form a Q block."""


def _chunk_rule(rows: int, cols: int, itemsize: int, ctx: Context, route: str = "auto") -> tuple[int, str]:
    """Rows per block, and why: the family's chunk budget (capped by worker memory), at least
    one block per thread, >= cols."""
    budget, capped = ctx.capped(ctx.knobs.chunk_bytes, SVD_COPIES.get(route, 3), "row block")
    by_bytes = max(1, budget // (cols * itemsize))
    by_threads = math.ceil(rows / ctx.total_threads)
    return max(min(by_bytes, by_threads), min(cols, rows)), (
        f"min({ctx.family.name} chunk budget {budget / 2**20:.0f} MiB / "
        f"{cols * itemsize} B per row = {by_bytes}, rows / {ctx.total_threads} "
        f"threads = {by_threads}), at least --cols {cols}" + (f" ({capped})" if capped else "")
    )


def _span(sizes) -> str | list:
    lo, hi = min(sizes), max(sizes)
    return f"{lo}" if lo == hi else f"{lo}..{hi}"


def backends_name(collection) -> str | None:
    try:
        return backends.family_of(collection).name
    except UserError:
        return None
