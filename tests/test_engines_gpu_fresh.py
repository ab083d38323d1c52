"""A GPU session's first query, asked while the workers still warm cudf-polars, in a module of
its own: the session it opens is the only one on its GPU."""

from __future__ import annotations

import pathlib
import sys

import dask.dataframe as dd
import pandas as pd
import pytest

import gpuscale

pytestmark = pytest.mark.gpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflows"))
import queries  # noqa: E402
from queries import tpch  # noqa: E402


def test_a_fresh_sessions_first_query_on_the_streaming_executor_answers_as_pandas(tmp_path, monkeypatch):
    # every read counts as large beside the GPU: the plan runs in partitions, while the worker's
    # first streaming plan may still run in its warm-up thread
    from gpuscale.plan import engine

    tpch.make(tmp_path, 0.01)
    monkeypatch.setattr(engine, "IN_MEMORY_SHARE", 10**15)
    (query,) = [x for x in tpch.QUERIES if x.name == "q3"]
    with gpuscale.session(backend="gpu", gpus=[0]) as s:
        got = query.dask({t: dd.read_parquet(queries.table_path(tmp_path, t)) for t in tpch.TABLES}).compute()
        (q,) = s.queries
    assert (q["engine"], q["executor"].split(" ")[0]) == ("polars-gpu", "streaming"), q
    want = query.reference({t: pd.read_parquet(queries.table_path(tmp_path, t)) for t in tpch.TABLES})
    assert queries.same_answer(got, queries.to_pandas(want)) is None
