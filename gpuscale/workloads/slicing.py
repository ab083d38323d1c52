"""``slice``: a strided copy ``x[::step, ::col_step]`` of a 2-D random array, materialized in
new contiguous chunks (not views of the old ones).

Data: ``rows`` x ``cols`` uniform [0, 1) entries in square chunks.

Validation (exact: a copy changes no value):

* the result's shape is (ceil(rows / step), ceil(cols / col_step));
* small (rows x cols <= ``FULL_CHECK_ELEMENTS``): every element against NumPy's slice of a
  host copy;
* large: ``SAMPLES`` random elements of the result against the source elements at
  (i * step, j * col_step), fetched by point indexing (``vindex``) from the source.
"""

from __future__ import annotations

import math

import dask
import numpy as np
from pydantic import Field, PositiveInt

from ..errors import UserError
from . import Check, Context, Output, Params, Validation, Workload, _arrays, register
from ._arrays import SAMPLES, UniformMatrix, host, shape_check
from .base import Dtype, block_field, dtype_field, seed_field


class SliceParams(Params):
    rows: PositiveInt = Field(20_000, description="rows of the array")
    cols: PositiveInt = Field(5_000, description="columns of the array")
    step: PositiveInt = Field(3, description="take every step-th row")
    col_step: PositiveInt = Field(1, description="take every col-step-th column")
    chunk: PositiveInt | None = block_field()
    dtype: Dtype = dtype_field()
    seed: int = seed_field()


def _copy(block):
    return block.copy()


def _exact(name: str, got, ref) -> Check:
    got, ref = np.asarray(got), np.asarray(ref)
    bad = int((got != ref).sum()) if got.shape == ref.shape else -1
    return Check(name, bad == 0, bad, 0, "mismatching elements (-1: shapes differ)")


@register
class Slice(UniformMatrix, Workload):
    name = "slice"
    description = "strided copy x[::step, ::col-step] into new chunks"
    collection = "array"
    COPIES = 2
    Params = SliceParams

    def check(self, p) -> None:
        if p.step > p.rows:
            raise UserError(
                f"slice --step {p.step} is larger than --rows {p.rows}", f"use --step <= {p.rows}"
            )
        if p.col_step > p.cols:
            raise UserError(
                f"slice --col-step {p.col_step} is larger than --cols {p.cols}", f"use --col-step <= {p.cols}"
            )

    def compute(self, x, p, ctx: Context) -> Output:
        return Output({"result": x[:: p.step, :: p.col_step].map_blocks(_copy, dtype=x.dtype)})

    def validate(self, out: Output, x, p, ctx: Context) -> Validation:
        y = out.collections["result"]
        checks = [shape_check(y, (math.ceil(p.rows / p.step), math.ceil(p.cols / p.col_step)))]
        if not checks[0].ok:
            return Validation("shape", checks)
        if p.rows * p.cols <= _arrays.FULL_CHECK_ELEMENTS:
            checks.append(_exact("every element vs numpy slice", host(y), host(x)[:: p.step, :: p.col_step]))
            return Validation("full reference (NumPy slice of a host copy), exact", checks)
        rng = np.random.default_rng(p.seed + 3)
        i = rng.integers(0, y.shape[0], SAMPLES)
        j = rng.integers(0, y.shape[1], SAMPLES)
        got, ref = dask.compute(y.vindex[i, j], x.vindex[i * p.step, j * p.col_step])
        checks.append(_exact(f"{SAMPLES} sampled elements vs the source", host(got), host(ref)))
        return Validation("shape + sampled elements against the source (vindex), exact", checks)
