"""Under the GPU family with several GPU workers a session runs the user's Dask DataFrame
collections on cudf-polars' DaskEngine over its own client, and answers as dask-cudf would."""

from __future__ import annotations

import pathlib
import sys

import dask.dataframe as dd
import pytest
from distributed import LocalCluster

import gpuscale

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_engines import LEFT, _dask_answer, _same  # noqa: E402


def test_several_gpu_workers_run_the_plan_on_cudf_polars_dask_engine(tmp_path):
    """A running cluster of two GPU workers (both on the first GPU), joined by the session."""
    for i in range(0, len(LEFT), 4):
        LEFT.iloc[i : i + 4].to_parquet(tmp_path / f"part.{i // 4}.parquet", index=False)

    def make():
        df = dd.read_parquet(str(tmp_path))
        return df[df.x > 2].groupby("g").y.sum()

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        gpuscale.session(backend="gpu", scheduler=cluster.scheduler_address) as s,
    ):
        got = make().compute()
        (q,) = s.queries
        assert (q["engine"], q["rule_id"]) == ("polars-gpus", "engine.polars-gpus"), q["why"]
        assert "2 GPU workers" in q["why"], q["why"]
    assert type(got).__module__.startswith("cudf"), type(got)
    _same(got.to_pandas(), _dask_answer(make), False)
