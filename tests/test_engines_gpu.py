"""Under the GPU family a session runs the user's Dask DataFrame collections on cudf-polars, on
its GPU worker, and answers in cuDF as dask-cudf would; what does not translate, or what
cudf-polars cannot run, runs on Dask with the reason."""

from __future__ import annotations

import pathlib
import sys

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

import gpuscale
from gpuscale import machine

pytestmark = pytest.mark.gpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflows"))
import queries  # noqa: E402
from queries import tpch  # noqa: E402
from test_engines import (  # noqa: E402
    LEFT,
    ORDERED,
    SNIPPETS,
    _csv_tables,
    _dask_answer,
    _same,
    write_csv,
)

CUDF_CANNOT = {"groupby-by-series"}
"""Snippets dask-cudf cannot build (its groupby by a Series of another expression raises): the
session builds them on the host, and Dask runs them."""


@pytest.fixture(scope="module")
def gpu_session():
    with gpuscale.session(backend="gpu", gpus=[0]) as s:  # one GPU on a machine of several too
        yield s


@pytest.fixture(scope="module")
def csv_files(tmp_path_factory) -> dict[str, str]:
    return write_csv(tmp_path_factory.mktemp("csv"))


@pytest.fixture(scope="module")
def tpch_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tpch")
    tpch.make(folder, 0.01)
    return folder


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    from test_engines import RIGHT

    root = tmp_path_factory.mktemp("tables")
    out = {}
    for name, frame in (("left", LEFT), ("right", RIGHT)):
        (root / name).mkdir()
        for i in range(0, len(frame), 4):
            frame.iloc[i : i + 4].to_parquet(root / name / f"part.{i // 4}.parquet", index=False)
        out[name] = str(root / name)
    return out


@pytest.mark.parametrize("q", [q.name for q in tpch.QUERIES])
def test_every_tpch_query_runs_on_cudf_polars_on_the_gpu_worker(gpu_session, tpch_data, q):
    (query,) = [x for x in tpch.QUERIES if x.name == q]
    before = len(gpu_session.queries)
    out = query.dask({t: dd.read_parquet(queries.table_path(tpch_data, t)) for t in tpch.TABLES})
    got = out.compute()
    assert type(got).__module__.partition(".")[0] in ("cudf", "numpy", "builtins"), type(got)
    want = query.reference({t: pd.read_parquet(queries.table_path(tpch_data, t)) for t in tpch.TABLES})
    assert queries.same_answer(got, queries.to_pandas(want)) is None
    engines = [(e["engine"], e["rule_id"]) for e in gpu_session.queries[before:]]
    assert engines == [("polars-gpu", "engine.polars-gpu")], engines
    (executor,) = [e["executor"] for e in gpu_session.queries[before:]]
    assert executor.startswith("in-memory (engine.in-memory"), executor


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_a_translated_collection_gives_dask_cudfs_answer(gpu_session, files, name):
    def make():
        return SNIPPETS[name](dd.read_parquet(files["left"]), dd.read_parquet(files["right"]))

    coll = make()
    before = len(gpu_session.queries)
    got = coll.compute()
    want = _dask_answer(make)
    (q,) = gpu_session.queries[before:]
    expected = (
        ("dask", "engine.untranslatable") if name in CUDF_CANNOT else ("polars-gpu", "engine.polars-gpu")
    )
    assert (q["engine"], q["rule_id"]) == expected, q["why"]
    if hasattr(want, "to_pandas"):
        assert type(got) is type(want)
        got, want = got.to_pandas(), want.to_pandas()
    _same(got, want, name in ORDERED)


CSV_NUMBERS = {
    "filter-groupby": lambda df: df[df.x > 1].groupby("g").y.sum(),
    "agg-dates": lambda df: df.groupby("g").agg({"x": "mean", "t": "max"}),
}
"""Snippets over a CSV read of numbers and dates (no text column)."""


@pytest.mark.parametrize("name", list(CSV_NUMBERS))
def test_a_read_csv_of_numbers_and_dates_runs_on_cudf_polars_with_dask_cudfs_answer(
    gpu_session, csv_files, name
):
    def make():
        return CSV_NUMBERS[name](
            dd.read_csv(csv_files["left"], usecols=["g", "x", "y", "t"], parse_dates=["t"])
        )

    coll = make()
    before = len(gpu_session.queries)
    got = coll.compute()
    want = _dask_answer(make)
    (q,) = gpu_session.queries[before:]
    assert (q["engine"], q["rule_id"]) == ("polars-gpu", "engine.polars-gpu"), q["why"]
    assert type(got) is type(want)
    _same(got.to_pandas(), want.to_pandas(), False)


def test_a_read_csv_with_text_columns_runs_on_dask_under_cudf(gpu_session, csv_files):
    df = _csv_tables(csv_files)[0]
    before = len(gpu_session.queries)
    got = df[df.g == 1].s.count().compute()
    assert int(got) == 4
    (q,) = gpu_session.queries[before:]
    assert (q["engine"], q["rule_id"]) == ("dask", "engine.untranslatable")
    assert "read_csv: text column 'k' under cuDF's reader" in q["why"], q["why"]


def test_a_read_csv_with_keywords_cudf_polars_does_not_read_alike_runs_on_dask(gpu_session, csv_files):
    df = dd.read_csv(csv_files["left"], na_values=["fig"])
    before = len(gpu_session.queries)
    got = df[df.g == 1].s.count().compute()
    assert int(got) == 3  # "fig" is missing, as cuDF reads it
    (q,) = gpu_session.queries[before:]
    assert (q["engine"], q["rule_id"]) == ("dask", "engine.untranslatable")
    assert "read_csv: keyword 'na_values'" in q["why"], q["why"]


def test_what_does_not_translate_runs_on_dask_in_cudf(gpu_session, files):
    df = dd.read_parquet(files["left"])
    got = df.groupby("g").y.apply(lambda s: s.sum() * 2, meta=("y", "int64")).compute()
    assert type(got).__module__.startswith("cudf")
    assert gpu_session.queries[-1]["rule_id"] == "engine.untranslatable"


def test_explain_under_the_gpu_family_names_cudf_polars(gpu_session, files):
    df = dd.read_parquet(files["left"])
    e = gpu_session.explain(df[df.x > 2].groupby("g").y.sum())
    assert (e["engine"], e["rule_id"]) == ("polars-gpu", "engine.polars-gpu")
    assert e["numbers"]["capacity_bytes"] == machine.gpus()[0]["memory_bytes"]  # the session's one GPU


def test_a_persisted_translated_frame_stays_on_the_gpu_worker(gpu_session, files):
    df = dd.read_parquet(files["left"])
    p = df[df.x > 2].persist()
    assert dask.is_dask_collection(p) and gpu_session.queries[-1]["engine"] == "polars-gpu"
    got = p.y.compute()
    assert sorted(got.to_pandas().tolist()) == sorted(LEFT[LEFT.x > 2].y.tolist())
