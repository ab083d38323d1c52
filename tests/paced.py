"""A workload of real work whose tasks can be made slower by a known fraction, as a change of
code would: each task sorts its block, then sleeps ``SLOWDOWN`` x the time the sort took
(set on the workers with ``client.run(set_slowdown, 0.12)``: about 10 % slower; the run's
parameters stay the same, so its records pair)."""

from __future__ import annotations

import time

import dask.array as da
import numpy as np

import gpuscale

SLOWDOWN = {"value": 0.0}


def set_slowdown(value: float) -> None:
    SLOWDOWN["value"] = value


def sorted_block(block: np.ndarray) -> np.ndarray:
    t0 = time.perf_counter()
    out = np.sort(block)
    if SLOWDOWN["value"]:
        time.sleep(SLOWDOWN["value"] * (time.perf_counter() - t0))
    return out


def generate(p):
    return da.random.default_rng(p.seed).random(p.rows, chunks=p.rows // p.blocks)


def validate(result, x, p):
    got = result.compute()
    return bool(np.all(np.diff(got.reshape(p.blocks, -1), axis=1) >= 0)) and got.shape == (p.rows,)


@gpuscale.workload(
    "paced",
    params={"rows": 1_200_000, "blocks": 4, "seed": 0},
    generate=generate,
    validate=validate,
    replace=True,
)
def paced(x, p, ctx):
    """Sort each block, slowed by a known fraction."""
    return x.map_blocks(sorted_block, dtype=x.dtype)
