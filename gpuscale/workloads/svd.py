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
"""
from __future__ import annotations

import math
from typing import Literal

import dask
import dask.array as da
import numpy as np
from pydantic import Field, PositiveInt

from .. import linalg
from ..backends import to_host
from ..errors import UserError
from . import Check, Context, Output, Params, Validation, Workload, register

FULL_CHECK_ELEMENTS = 4_000_000
# value-check tolerance (x s_max), Frobenius identity (relative), triplet residual (x s_max)
TOL = {"float64": {"values": 1e-10, "frobenius": 1e-9, "residual": 1e-9},
       "float32": {"values": 1e-4, "frobenius": 1e-4, "residual": 1e-3}}
TSQR_FLOAT32_VALUES = 1e-4


class SVDParams(Params):
    rows: PositiveInt = Field(200_000, description="rows of the matrix")
    cols: PositiveInt = Field(100, description="columns (rows >= cols)")
    chunk_rows: PositiveInt | None = Field(None, description="rows per block (default: chosen "
                                           "from the backend's chunk size and the cluster's threads)")
    dtype: Literal["float64", "float32"] = Field("float64", description="element type")
    compute_uv: bool = Field(False, description="also form U and V^T")
    route: Literal["auto", "gram", "cholqr2", "tsqr"] = Field(
        "auto", description="SVD route (auto: fastest that holds the accuracy target)")
    condition: float | None = Field(None, ge=1, description="build a matrix with this condition "
                                    "number and a known log-spaced spectrum")
    seed: int = Field(0, description="random seed")


@register
class SVD(Workload):
    name = "svd"
    description = "tall-skinny parallel SVD (Gram / CholeskyQR2 / TSQR routes, chosen by accuracy)"
    collection = "array"
    Params = SVDParams

    def check(self, p) -> None:
        if p.cols > p.rows:
            raise UserError(f"svd needs a tall matrix: --cols {p.cols} > --rows {p.rows}",
                            "make --rows at least --cols")
        if p.chunk_rows is not None and p.chunk_rows > p.rows:
            raise UserError(f"--chunk-rows {p.chunk_rows} is larger than the array's {p.rows} rows",
                            f"use --chunk-rows <= {p.rows} (or leave it out)")
        if p.chunk_rows is not None and p.chunk_rows < p.cols and p.route == "tsqr":
            raise UserError(f"--chunk-rows {p.chunk_rows} < --cols {p.cols}: TSQR needs blocks at "
                            "least as tall as they are wide", f"use --chunk-rows >= {p.cols}")

    def plan(self, p, ctx: Context) -> None:
        itemsize = np.dtype(p.dtype).itemsize
        if p.chunk_rows is not None:
            ctx.choose("chunk_rows", p.chunk_rows, "flag")
        else:
            by_bytes = max(1, ctx.knobs.chunk_bytes // (p.cols * itemsize))
            by_threads = math.ceil(p.rows / ctx.total_threads)
            rows = max(min(by_bytes, by_threads), min(p.cols, p.rows))
            ctx.choose("chunk_rows", rows, "rule",
                       f"min({ctx.family.name} chunk budget {ctx.knobs.chunk_bytes / 2**20:.0f} MiB / "
                       f"{p.cols * itemsize} B per row = {by_bytes}, rows / {ctx.total_threads} "
                       f"threads = {by_threads}), at least --cols {p.cols}")
        ctx.choose("route", p.route, "flag" if p.route != "auto" else "default",
                   "auto: Gram if its predicted error holds the tolerance, else CholeskyQR2, "
                   "else TSQR" if p.route == "auto" else None)
        ctx.choose("tree_fan_in", ctx.knobs.split_every, "family",
                   "None: one combine step" if ctx.knobs.split_every is None else None)

    def estimate_bytes(self, p, ctx: Context) -> int:
        data = p.rows * p.cols * np.dtype(p.dtype).itemsize
        factor = 2.0
        if p.route == "tsqr" or p.compute_uv:
            factor += 1.0
        if p.condition is not None:
            factor += 1.0
        return int(data * factor)

    def describe_data(self, p) -> dict:
        return {"shape": [p.rows, p.cols], "dtype": p.dtype,
                "source": "generated" + (f", condition {p.condition:g}" if p.condition else ", uniform")}

    def generate(self, p, ctx: Context):
        chunk = ctx.choices["chunk_rows"]["value"]
        rng = da.random.default_rng(p.seed)
        if p.condition is None:
            x = rng.random((p.rows, p.cols), chunks=(chunk, p.cols), dtype=p.dtype)
            return {"x": x, "s_true": None}
        g = rng.standard_normal((p.rows, p.cols), chunks=(max(chunk, p.cols), p.cols))
        q, _ = da.linalg.tsqr(g)
        s_true = np.logspace(0, -math.log10(p.condition), p.cols)
        v, _ = np.linalg.qr(np.random.default_rng(p.seed + 1).standard_normal((p.cols, p.cols)))
        core = (s_true[:, None] * v.T)  # diag(s) V^T, host; moved to the backend below
        core_b = da.from_array(core, chunks=core.shape).map_blocks(
            _like, q._meta, dtype=np.float64, meta=q._meta)
        x = da.blockwise(np.matmul, "ij", q, "ik", core_b, "kj", dtype=np.float64,
                         concatenate=True, meta=q._meta).astype(p.dtype).rechunk((chunk, p.cols))
        return {"x": x, "s_true": s_true}

    def compute(self, data, p, ctx: Context) -> Output:
        res = linalg.svd(data["x"], compute_uv=p.compute_uv, route=p.route,
                         split_every=ctx.knobs.split_every)
        return Output(res.collections(), {"route": res.route.to_dict(), "notes": res.notes})

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        tol = TOL[p.dtype]
        x = data["x"]
        s = np.asarray(to_host(out.collections["s"].compute()), dtype=np.float64)
        checks: list[Check] = []
        smax = float(s[0]) if s.size else 0.0
        checks.append(Check("s finite and >= 0", bool(np.isfinite(s).all() and (s >= 0).all())))
        checks.append(Check("s descending", bool((np.diff(s) <= 1e-12 * max(smax, 1)).all())))
        z = np.random.default_rng(p.seed + 7).standard_normal(p.cols)
        zb = da.from_array(z, chunks=z.shape).map_blocks(_like, x._meta, dtype=np.float64, meta=x._meta)
        fro2, xz = dask.compute((x.astype(np.float64) ** 2).sum(), (x.astype(np.float64) @ zb))
        fro2 = float(to_host(fro2))
        xz = np.asarray(to_host(xz))
        rel = abs(float((s ** 2).sum()) - fro2) / fro2 if fro2 else abs(float((s ** 2).sum()))
        checks.append(Check("sum s^2 = ||X||_F^2", rel <= tol["frobenius"], rel, tol["frobenius"],
                            "relative difference"))
        lower = float(np.linalg.norm(xz) / np.linalg.norm(z))
        checks.append(Check("||Xz||/||z|| <= s_max <= ||X||_F",
                            lower <= smax * (1 + tol["frobenius"]) and smax <= math.sqrt(fro2) * (1 + tol["frobenius"]),
                            smax, f"[{lower:.6g}, {math.sqrt(fro2):.6g}]"))
        values_tol = tol["values"]
        method = "identities"
        if data["s_true"] is not None:
            err = float(np.abs(s - data["s_true"]).max() / data["s_true"][0])
            checks.append(Check("every s_i vs known spectrum", err <= values_tol, err, values_tol,
                                "max |s_i - s_true_i| / s_max"))
            method = "known spectrum + identities"
        elif p.rows * p.cols <= FULL_CHECK_ELEMENTS:
            ref = np.linalg.svd(np.asarray(to_host(x.compute()), dtype=np.float64), compute_uv=False)
            err = float(np.abs(s - ref).max() / ref[0])
            checks.append(Check("every s_i vs numpy.linalg.svd", err <= values_tol, err, values_tol,
                                "max |s_i - s_ref_i| / s_max"))
            method = "full reference (numpy.linalg.svd) + identities"
        if p.compute_uv:
            # residuals of a few triplets, on host copies of just those columns
            idx = sorted({0, 1, p.cols - 1})
            vt = np.asarray(to_host(out.collections["vt"].compute()), dtype=np.float64)[idx]
            vb = da.from_array(np.ascontiguousarray(vt.T), chunks=(p.cols, len(idx))).map_blocks(
                _like, x._meta, dtype=np.float64, meta=x._meta)
            xv, u = dask.compute(x.astype(np.float64) @ vb, out.collections["u"][:, idx])
            xv = np.asarray(to_host(xv), dtype=np.float64)
            u = np.asarray(to_host(u), dtype=np.float64)
            worst = float(np.linalg.norm(xv - u * s[idx][None, :], axis=0).max()) / smax
            checks.append(Check("triplet residuals ||Xv_i - s_i u_i||", worst <= tol["residual"], worst,
                                tol["residual"], f"triplets {idx}, relative to s_max"))
            method += " + triplet residuals"
        return Validation(method, checks)


def _like(block, meta):
    """Move a host block to the array type of ``meta`` (NumPy or CuPy), by NEP 35."""
    return np.asarray(block, like=meta) if type(meta) is not np.ndarray else block
