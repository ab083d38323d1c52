"""``fft``: the complex FFT of a 2-D random array along one axis (``dask.array.fft.fft``;
the transformed axis is one chunk, the other axis is split into lanes).

Data: ``rows`` x ``cols`` uniform [0, 1) entries; chunks hold whole lanes along ``--axis``.

Validation (tolerances by dtype on max |error| / (sqrt(N) max |x|), N the transformed
length, ``TOL``):

* small (rows x cols <= ``FULL_CHECK_ELEMENTS``): every coefficient against ``numpy.fft.fft``
  of a host copy, in float64;
* large: Parseval (sum |X|^2 = N sum |x|^2, from separate reductions); the zero-frequency
  coefficients equal the lane sums (x.sum(axis)); X v = x (F v) for a random vector v, F v by
  ``numpy.fft.fft`` on the host (one product per side checks every coefficient of every
  lane); ``SAMPLE_LANES`` random lanes recomputed with ``numpy.fft.fft`` on the host.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
from pydantic import Field, PositiveInt, field_validator

from ..backends.convert import from_memory
from ..errors import UserError
from . import Check, Context, Output, Params, Validation, Workload, _arrays, register
from ._arrays import close, host, plan_lanes, shape_check, uniform
from .base import Dtype, block_field, dtype_field, seed_field

TOL = {"float64": 1e-10, "float32": 1e-4}
SAMPLE_LANES = 4


class FFTParams(Params):
    rows: PositiveInt = Field(2_000, description="rows of the array")
    cols: PositiveInt = Field(4_096, description="columns of the array")
    axis: int = Field(
        1, description="axis to transform: 0 (down columns) or 1 (along rows); -1 and -2 count from the end"
    )
    chunk: PositiveInt | None = block_field(
        "lanes (rows for --axis 1, columns for --axis 0) per chunk", "from the backend's chunk size"
    )
    dtype: Dtype = dtype_field()
    seed: int = seed_field()

    @field_validator("axis")
    @classmethod
    def _axis_in_range(cls, v: int) -> int:
        if not -2 <= v <= 1:
            raise ValueError(f"axis {v} is out of range for a 2-D array; use 0 or 1 (or -2, -1)")
        return v % 2


@register
class FFT(Workload):
    name = "fft"
    description = "complex FFT of a 2-D array along one axis"
    collection = "array"
    Params = FFTParams

    def check(self, p) -> None:
        lanes = p.cols if p.axis == 0 else p.rows
        if p.chunk is not None and p.chunk > lanes:
            raise UserError(
                f"fft --chunk {p.chunk} is more than the {lanes} lanes across --axis {p.axis}",
                f"use --chunk <= {lanes} (or leave it out)",
            )

    def plan(self, p, ctx: Context) -> None:
        n = p.cols if p.axis == 1 else p.rows
        lanes = p.rows if p.axis == 1 else p.cols
        # a lane holds its input and its complex output
        lane_bytes = n * np.dtype(p.dtype).itemsize * 3
        plan_lanes(ctx, p.chunk, lanes, lane_bytes, "chunk")

    def estimate_bytes(self, p, ctx: Context) -> int:
        return 4 * p.rows * p.cols * np.dtype(p.dtype).itemsize

    def task_bytes(self, p, ctx: Context) -> int:
        """What the family's FFT holds beyond its block and output (``Knobs.fft_work_copies``)."""
        c = ctx.value("chunk")
        if not isinstance(c, int):
            return 0
        n = p.cols if p.axis == 1 else p.rows
        return int(ctx.family.knobs.fft_work_copies * c * n * np.dtype(p.dtype).itemsize)

    def describe_data(self, p) -> dict:
        return {
            "shape": [p.rows, p.cols],
            "dtype": p.dtype,
            "axis": p.axis,
            "source": "generated, uniform [0, 1)",
        }

    def generate(self, p, ctx: Context):
        c = ctx.value("chunk")
        chunks = (c, p.cols) if p.axis == 1 else (p.rows, c)
        return uniform(p.seed, (p.rows, p.cols), chunks, p.dtype)

    def compute(self, x, p, ctx: Context) -> Output:
        return Output({"result": da.fft.fft(x, axis=p.axis)})

    def validate(self, out: Output, x, p, ctx: Context) -> Validation:
        X = out.collections["result"]
        n = x.shape[p.axis]
        tol = TOL[p.dtype]
        checks = [shape_check(X, x.shape)]
        xmax = float(host(abs(x).max()))
        scale = np.sqrt(n) * xmax
        detail = "max |X - X_ref| / (sqrt(N) max |x|)"
        if p.rows * p.cols <= _arrays.FULL_CHECK_ELEMENTS:
            ref = np.fft.fft(host(x).astype(np.float64), axis=p.axis)
            checks.append(close("every coefficient vs numpy.fft.fft", host(X), ref, tol, detail, scale))
            return Validation("full reference (numpy.fft.fft on a host copy)", checks)
        x64 = x.astype(np.float64)
        energy_X, energy_x, dc, lane_sums = dask.compute(
            (abs(X.astype(np.complex128)) ** 2).sum(),
            (x64**2).sum(),
            X[:, 0] if p.axis == 1 else X[0, :],
            x64.sum(axis=p.axis),
        )
        energy_X, energy_x = float(host(energy_X)), float(host(energy_x))
        rel = abs(energy_X - n * energy_x) / (n * energy_x) if energy_x else abs(energy_X)
        checks.append(Check("Parseval: sum |X|^2 = N sum |x|^2", rel <= tol, rel, tol, "relative difference"))
        checks.append(close("X[0] = lane sums", host(dc), host(lane_sums), tol, detail, scale))
        # every coefficient at once: X v = x (F v) (F is symmetric) for a random v
        v = np.random.default_rng(p.seed + 6).standard_normal(n)
        vb = from_memory(v.astype(np.complex128), ctx.family, chunks=v.shape)
        fvb = from_memory(np.fft.fft(v), ctx.family, chunks=v.shape)
        if p.axis == 1:
            xv, ref_xv = dask.compute(X.astype(np.complex128) @ vb, x64 @ fvb)
        else:
            xv, ref_xv = dask.compute(vb @ X.astype(np.complex128), fvb @ x64)
        checks.append(
            close(
                "X v = x (F v) for a random v, every lane",
                host(xv),
                host(ref_xv),
                tol,
                "max |Xv - x Fv| / (sqrt(N) max |x| sum |v|)",
                scale * np.abs(v).sum(),
            )
        )
        lanes = x.shape[1 - p.axis]
        pick = np.sort(
            np.random.default_rng(p.seed + 5).choice(lanes, size=min(lanes, SAMPLE_LANES), replace=False)
        )
        lanes_at = (pick, slice(None)) if p.axis == 1 else (slice(None), pick)
        xs, Xs = dask.compute(x[lanes_at], X[lanes_at])
        ref = np.fft.fft(host(xs).astype(np.float64), axis=p.axis)
        checks.append(close(f"{len(pick)} sampled lanes vs numpy.fft.fft", host(Xs), ref, tol, detail, scale))
        return Validation(
            "Parseval + zero frequency = lane sums + X v = x (F v) + sampled lanes (numpy.fft.fft)", checks
        )
