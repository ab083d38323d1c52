"""A workload whose one task takes far more memory than its worker's limit, whatever the memory
check said (``--no-memory-check``): its worker's nanny restarts it each time."""

from __future__ import annotations

import time

import dask
import numpy as np

import gpuscale


def eat(nbytes: int, seed: int) -> int:
    block = np.ones(nbytes // 8)  # touched: resident, not only reserved
    time.sleep(2)  # long enough for the memory monitor (every 100 ms) to see it
    return int(block[:1].sum()) + seed


@gpuscale.workload(
    "hungry", params={"nbytes": 600_000_000, "seed": 0}, validate=lambda result, data, p: True, replace=True
)
def hungry(data, p, ctx):
    """One task holding ``nbytes``."""
    return dask.delayed(eat)(p.nbytes, p.seed)
