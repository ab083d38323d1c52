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
        # BLAS-bound array tasks release the GIL: a few threads per process. pandas groupby
        # holds the GIL for much of its work: one thread per process, one process per core.
        # A cluster for any work (cluster up, gpuscale.session() without a collection) gets
        # distributed's own split, the one plain Dask's LocalCluster() makes, so the user's own
        # code runs on the cluster it would get without gpuscale; `--for array` / `--for
        # dataframe` lay it out like `run svd` / `run groupby`.
        threads_per_worker={"array": 4, "dataframe": 1, "session": None},
        chunk_bytes=128 * MiB,
        partition_bytes=128 * MiB,
        shuffle_method=None,  # Dask's default: P2P under distributed, tasks without it
        split_out_budget_bytes=256 * MiB,
        split_every=8,
    ),
    auto_priority=0,
    spill_to="disk",
)
