"""The CPU family: NumPy arrays and pandas frames on a ``distributed.LocalCluster``."""

from __future__ import annotations

from .family import Family, Knobs

MiB = 2**20

FAMILY = Family(
    name="cpu",
    description="NumPy arrays + pandas DataFrames on distributed.LocalCluster",
    names=("cpu", "numpy", "pandas"),
    array_backend="numpy",
    dataframe_backend="pandas",
    array_module="numpy",
    dataframe_module="pandas",
    cluster_kind="local",
    knobs=Knobs(
        # BLAS releases the GIL, pandas mostly holds it; a session gets distributed's own split
        threads_per_worker={"array": 4, "dataframe": 1, "session": None},
        chunk_bytes=128 * MiB,
        partition_bytes=128 * MiB,
        shuffle_method=None,
        split_out_budget_bytes=256 * MiB,
        split_every=8,
        # the client while its cluster starts, each worker beside its start (in a thread)
        pre_import={"array": ("dask.array",), "dataframe": ("dask.dataframe",)},
        pace_bytes_per_thread_s=256 * MiB,  # rule ``memory.pace``
    ),
    auto_priority=0,
    spill_to="disk",
)
