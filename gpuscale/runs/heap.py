"""Python's garbage collector around timed work, in this process and on workers through
``client.run`` (docs/benchmarks/cpu.md, docs/benchmarks/fixed-cost.md): imports no gpuscale."""

from __future__ import annotations

import gc


def hold_heap() -> bool:
    """A full collection, then ``gc.freeze`` unless this process froze its heap already
    (:func:`settle_heap`); returns whether it froze (what :func:`release_heap` undoes)."""
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
    """For a worker kept up for later runs: a full collection, then ``gc.freeze`` for good
    (docs/benchmarks/fixed-cost.md)."""
    gc.collect()
    gc.freeze()
