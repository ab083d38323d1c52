"""Python's garbage collector around timed work, in this process and on workers.

A full collection, then ``gc.freeze``, before the timed repeats (docs/benchmarks/cpu.md);
``cluster up``'s warm-up freezes each worker's heap for good (docs/benchmarks/fixed-cost.md).
These run on workers through ``client.run``: this module imports nothing of gpuscale's.
"""

from __future__ import annotations

import gc


def hold_heap() -> bool:
    """A full collection, then ``gc.freeze`` unless this process froze its heap already (a
    warmed worker: :func:`settle_heap`), whose collection then only visits what came after.
    Returns whether it froze (what :func:`release_heap` undoes). Runs here and on workers."""
    owned = gc.get_freeze_count() > 0
    gc.collect()
    if owned:
        return False
    gc.freeze()
    return True


def release_heap(froze: bool | dict[str, bool] = True, dask_worker=None) -> None:
    """Undo :func:`hold_heap`'s freeze (``froze`` its answer; from ``client.run``, per worker)."""
    if isinstance(froze, dict):
        froze = dask_worker is not None and froze.get(dask_worker.address, False)
    if froze:
        gc.unfreeze()


def settle_heap() -> None:
    """For a worker kept up for later runs (``cluster up``'s warm-up): a full collection, then
    its imports and state go to the collector's permanent generation for good, so every later
    run's collection visits only what came after (docs/benchmarks/fixed-cost.md)."""
    gc.collect()
    gc.freeze()
