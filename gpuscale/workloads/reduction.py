"""``reduction``: ``sum``, ``mean`` or ``std`` of a 2-D random array, over all of it or along
one axis (Dask's tree reductions, fan-in from the backend's ``split_every``).

Data: ``rows`` x ``cols`` uniform [0, 1) entries in square chunks.

Validation (float64; tolerance by dtype on max |error| / max |reference|, ``TOL``):

* always: against moments added up on the host from per-block float64 partials (count, sum
  and sum of squares of every block, reduced along the same axis inside the block): a
  different route from Dask's reduction tree; std = sqrt(E[x^2] - E[x]^2);
* small (rows x cols <= ``FULL_CHECK_ELEMENTS``): also against NumPy on a host copy.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, PositiveInt, field_validator

from . import Context, Output, Params, Validation, Workload, _arrays, register
from ._arrays import UniformMatrix, close, host
from .base import Dtype, block_field, dtype_field, seed_field

TOL = {"float64": 1e-10, "float32": 1e-4}


class ReductionParams(Params):
    rows: PositiveInt = Field(10_000, description="rows of the array")
    cols: PositiveInt = Field(5_000, description="columns of the array")
    op: Literal["sum", "mean", "std"] = Field("sum", description="the reduction")
    axis: int | None = Field(
        None, description="reduce along 0 or 1 (-2, -1 count from the end); default: the whole array"
    )
    chunk: PositiveInt | None = block_field()
    dtype: Dtype = dtype_field()
    seed: int = seed_field()

    @field_validator("axis")
    @classmethod
    def _axis_in_range(cls, v):
        if v is not None and not -2 <= v <= 1:
            raise ValueError(
                f"axis {v} is out of range for a 2-D array; use 0 or 1 (or -2, -1), "
                "or leave it out for the whole array"
            )
        return None if v is None else v % 2


def _moments(b, axis=None):
    """(count, sum, sum of squares) of one block, in float64, stacked on a new first axis."""
    b = b.astype(np.float64)
    axes = (0, 1) if axis is None else (axis,)
    s = b.sum(axis=axes, keepdims=True)
    q = (b * b).sum(axis=axes, keepdims=True)
    n = int(np.prod([b.shape[a] for a in axes]))
    return np.stack([s * 0 + n, s, q])


def host_moments(x, axis):
    """Per-block moments, brought to the host and added up there: (count, sum, sumsq)."""
    chunks = (
        (3,),
        (1,) * x.numblocks[0] if axis in (None, 0) else x.chunks[0],
        (1,) * x.numblocks[1] if axis in (None, 1) else x.chunks[1],
    )
    parts = host(x.map_blocks(_moments, axis=axis, new_axis=0, chunks=chunks, dtype=np.float64))
    return parts.sum(axis=(1, 2) if axis is None else 1 + axis)


def from_moments(op, count, total, squares):
    mean = total / count
    if op == "sum":
        return total
    if op == "mean":
        return mean
    return np.sqrt(np.maximum(squares / count - mean * mean, 0.0))


@register
class Reduction(UniformMatrix, Workload):
    name = "reduction"
    description = "sum / mean / std of a 2-D array (all of it, or along an axis)"
    collection = "array"
    Params = ReductionParams

    def plan(self, p, ctx: Context) -> None:
        super().plan(p, ctx)
        ctx.choose_knob("split_every", "Dask's default fan-in")

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """The array; the tree's partials (per block up to three 8-byte fields per value kept
        along ``axis``); the result."""
        rows, cols = self.shape(p)
        c = ctx.value("chunk")
        c = c if isinstance(c, int) else max(rows, cols)
        br, bc = math.ceil(rows / c), math.ceil(cols / c)
        kept = {None: 1, 0: cols, 1: rows}[p.axis]  # values of the result
        per_block = {None: 1, 0: min(c, cols), 1: min(c, rows)}[p.axis]
        return {
            "inputs": rows * cols * np.dtype(p.dtype).itemsize,
            "intermediates": br * bc * per_block * 3 * 8,
            "results": kept * 8,
        }

    def task_bytes(self, p, ctx: Context) -> int:
        """One task's temporaries: two float64 blocks (std's chunk step, and the validation's
        per-block moments); 0 for sum and mean when not validated."""
        c = ctx.value("chunk")
        if not isinstance(c, int) or (p.op in ("sum", "mean") and ctx.validate == "off"):
            return 0
        rows, cols = self.shape(p)
        return 2 * min(c, rows) * min(c, cols) * 8

    def compute(self, x, p, ctx: Context) -> Output:
        fn = getattr(x, p.op)
        return Output({"result": fn(axis=p.axis, split_every=ctx.knobs.split_every)})

    def validate(self, out: Output, x, p, ctx: Context) -> Validation:
        got = host(out.collections["result"])
        tol = TOL[p.dtype]
        where = "all" if p.axis is None else f"axis {p.axis}"
        ref = from_moments(p.op, *host_moments(x, p.axis))
        checks = [close(f"{p.op} ({where}) vs per-block float64 moments", got, ref, tol)]
        method = "per-block float64 moments added up on the host"
        if p.rows * p.cols <= _arrays.FULL_CHECK_ELEMENTS:
            a = host(x).astype(np.float64)
            checks.append(close(f"{p.op} ({where}) vs numpy", got, getattr(a, p.op)(axis=p.axis), tol))
            method = "full reference (NumPy on a host copy) + " + method
        return Validation(method, checks)
