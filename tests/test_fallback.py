"""Host fallback (gpuscale/backends/fallback.py) for real, on the CPU: a session of the test-only
device family (tests/auditfam.py: TagFrame chunks, "device" memory) on a real LocalCluster, with
TagFrame operations made to raise (``AUDITFAM_UNSUPPORTED``, in the client and the workers) as
cuDF's gaps do on a GPU. The code completes with plain Dask's answer on the CPU, and every
fallback is named in the audit (operation, file:line, partitions, bytes each way), in
``Session.fallbacks`` and by one warning; strict mode refuses in one line; the user queries
(H2O, TPC-H) make none."""

from __future__ import annotations

import contextlib
import pathlib
import sys
import warnings

import auditfam
import dask
import dask.dataframe as dd
import pandas as pd
import pytest
import snippets

import gpuscale
from gpuscale import _dask_compat
from gpuscale.backends import host_collections
from gpuscale.backends.fallback import FallbackWarning
from gpuscale.errors import UserError
from gpuscale.records import report

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflows"))  # before any worker starts: they unpickle the queries' functions
import queries  # noqa: E402

SESSION = {"workers": 2, "threads_per_worker": 1, "engine": "dask"}
"""Sessions whose user code runs on Dask: the route the host fallback serves."""
UNSUPPORTED = "rename,groupby.size,loc"


def frame():
    return dask.datasets.timeseries(
        end="2000-01-03", freq="60s", seed=1, dtypes={"id": int, "name": "string", "x": float, "y": float}
    )


def masked_size(df):
    """The user's code of the report: a mask, a rename, a groupby size."""
    return df[df.x > 0].rename(columns={"id": "ID"}).groupby("name").size()


def plain(fn):
    """``fn(frame())`` computed with plain Dask on the CPU (the session's block off, the threaded
    scheduler); ``fn`` may compute itself."""
    with (
        host_collections.scope(gpuscale.backends.select("cpu").family, "off"),
        dask.config.set(scheduler="threads"),
    ):
        out = fn(frame())
        return out.compute() if dask.is_dask_collection(out) else out


@contextlib.contextmanager
def device_session(unsupported: str = UNSUPPORTED, **kw):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(auditfam.UNSUPPORTED, unsupported)  # before the workers start: they inherit it
        auditfam.register_device()
        try:
            with gpuscale.session(backend="auditdevice", **{**SESSION, **kw}) as s:
                yield s
        finally:
            auditfam.unregister_device()


@pytest.fixture(scope="module")
def session():
    with device_session() as s:
        yield s


def test_a_chain_the_family_cannot_run_gives_the_cpu_answer_and_is_reported(session):
    want = plain(masked_size)
    with pytest.warns(FallbackWarning) as warned, session.audit(phase="chain") as a:
        df = frame()
        line = sys._getframe().f_lineno + 1
        got = masked_size(df).compute()
    assert type(got).__name__ == "TagSeries"  # back on the family
    pd.testing.assert_series_equal(pd.Series(got).sort_index(), want.sort_index(), check_names=False)
    fbs = a.summary["fallbacks"]
    assert [f["operation"] for f in fbs] == ["DataFrame.rename", "GroupBy.size"]
    site = f"{__file__}:{masked_size.__code__.co_firstlineno + 2}"
    assert all(
        f["where"] == site and f["partitions"] == df.npartitions and "TypeError" in f["error"] for f in fbs
    )
    # the rename's host result feeds the groupby on the host: copied to pandas once, back once
    assert sum(f["bytes_to_host"] for f in fbs) > 0 and fbs[-1]["bytes_to_device"] > 0
    assert fbs[0]["blocks_to_host"] == df.npartitions and fbs[0]["blocks_to_device"] == 0
    assert a.summary["clean"] and a.summary["allowed"], a.summary["foreign"]
    assert [w.filename for w in warned] == [__file__] * 2 and all("\n" not in str(w.message) for w in warned)
    assert {f["operation"] for f in session.fallbacks} >= {"DataFrame.rename", "GroupBy.size"}
    assert line  # the call is one line of the user's code
    shown = [text for label, text in report.audit_lines(a.summary) if label == "  host fallback"]
    assert len(shown) == 2 and all(site in text and "to the host" in text for text in shown)


def test_a_groupby_class_made_after_the_session_started_falls_back_too(session):
    """dask-cudf defines its groupby classes on a frame's first ``groupby``, after the session
    wrapped Dask's: a size on one still runs on the host (here Dask's own lookup finds a
    subclass made after the session started)."""
    from dask.dataframe.dask_expr import _groupby

    class LateGroupBy(_groupby.GroupBy):
        pass

    want = plain(masked_size)
    with (
        pytest.MonkeyPatch.context() as mp,
        warnings.catch_warnings(record=True),
        session.audit(phase="late") as a,
    ):
        mp.setattr(_groupby, "GroupBy", LateGroupBy)
        got = masked_size(frame()).compute()
    assert type(got).__name__ == "TagSeries"
    pd.testing.assert_series_equal(pd.Series(got).sort_index(), want.sort_index(), check_names=False)
    assert [f["operation"] for f in a.summary["fallbacks"]] == ["DataFrame.rename", "LateGroupBy.size"]
    assert a.summary["clean"], a.summary["foreign"]


def test_the_adapter_finds_dasks_classes():
    """The one module naming Dask internals still finds them (a Dask that moves them fails here)."""
    names = {cls.__name__ for cls, _ in _dask_compat.classes()}
    assert {"FrameBase", "DataFrame", "Series", "Index", "GroupBy", "SeriesGroupBy", "LocIndexer"} <= names, (
        f"dask {dask.__version__} (checked: {_dask_compat.DASK_CHECKED}) moved {names}"
    )


def test_a_fallback_result_goes_on_on_the_family(session):
    """The notebook snippet (rename, then mask and assign on the renamed frame)."""
    sn = snippets.by_name("rename_mask")
    want = plain(lambda df: sn.run("."))
    with warnings.catch_warnings(record=True), session.audit(phase="rename_mask") as a:
        got = sn.run(".")
    assert snippets.same(got, want)[0], snippets.same(got, want)[1]
    (fb,) = a.summary["fallbacks"]
    assert fb["operation"] == "DataFrame.rename" and fb["where"].startswith(snippets.__file__)
    assert fb["bytes_to_host"] > 0 and fb["bytes_to_device"] > 0
    assert a.summary["clean"]
    assert type(got).__name__ == "TagFrame"


def test_loc_falls_back_through_its_indexer(session):
    def day(df):
        return df.loc["2000-01-02", ["x", "y"]]

    want = plain(day)
    with warnings.catch_warnings(record=True), session.audit(phase="loc") as a:
        got = day(frame()).compute()
    pd.testing.assert_frame_equal(pd.DataFrame(got), want)
    (fb,) = a.summary["fallbacks"]
    assert fb["operation"] == "LocIndexer.__getitem__" and fb["bytes_to_device"] > 0


def test_a_reduction_the_family_cannot_run_gives_its_value_and_a_clean_audit():
    """The flights exercise's ``groupby(...).mean().idxmax()``: the reduction's host tasks,
    and the operations fused with the copies to the host, are the fallback's, not foreign."""

    def worst(df):
        return df[df.x > 0].reset_index().groupby("name").x.mean().idxmax()

    want = plain(worst)
    with device_session("idxmax") as s, warnings.catch_warnings(record=True):
        with s.audit(phase="idxmax") as a:
            got = worst(frame()).compute()
    assert got == want
    (fb,) = a.summary["fallbacks"]
    assert fb["operation"] == "Series.idxmax" and fb["bytes_to_host"] > 0
    assert a.summary["clean"], a.summary["foreign"]


def test_a_writer_the_family_cannot_run_writes_from_the_host_with_a_clean_audit(tmp_path):
    """The notebook's ``to_parquet(engine="pyarrow")``, which cuDF partitions refuse: the
    tasks the host write runs (Dask's own reset_index among them) are the fallback's."""
    path = str(tmp_path / "out.parquet")
    with device_session("to_parquet") as s, warnings.catch_warnings(record=True):
        with s.audit(phase="write") as a:
            frame().to_parquet(path, engine="pyarrow")
    (fb,) = a.summary["fallbacks"]
    assert fb["operation"] == "DataFrame.to_parquet" and fb["bytes_to_host"] > 0
    assert a.summary["clean"], a.summary["foreign"]
    pd.testing.assert_frame_equal(pd.read_parquet(path), plain(lambda df: df), check_freq=False)


def test_an_error_the_host_raises_too_is_the_familys_and_no_fallback(session):
    before = len(session.fallbacks)
    with pytest.raises(TypeError, match="auditfam: rename is not supported"):
        frame().rename(columns=42)  # pandas refuses it too: the family's error stands
    with pytest.raises(KeyError):  # the CPU's own error, nothing of the family's failed
        frame()[["nope"]]
    assert len(session.fallbacks) == before


def test_no_fallback_where_the_family_runs_it(session):
    before = len(session.fallbacks)
    with session.audit(phase="plain") as a:
        df = frame()
        got = df[df.x > 0].assign(z=df.x * df.y).z.sum().compute()
    assert a.summary["fallbacks"] == [] and len(session.fallbacks) == before and got != 0


def test_a_reader_the_familys_dask_backend_refuses_reads_on_the_host(tmp_path):
    """The family's Dask DataFrame backend refuses read_parquet(engine="pyarrow") (as dask-cudf
    does): Dask's pandas backend reads it and the session puts it on the family, named."""
    pdf = pd.DataFrame({"k": [1, 2, 3, 1] * 50, "x": [0.1, 0.2, 0.3, 0.4] * 50})
    pdf.to_parquet(tmp_path / "t.parquet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(auditfam.UNSUPPORTED, "")
        auditfam.register_reader()
        try:
            with (
                gpuscale.session(backend="auditreader", **SESSION) as s,
                s.audit(phase="read") as a,
                pytest.warns(FallbackWarning, match="read_parquet failed on the auditreader family"),
            ):
                df = dd.read_parquet(str(tmp_path / "t.parquet"), engine="pyarrow")
                got = df.groupby("k").x.sum().compute()
        finally:
            auditfam.unregister_reader()
    assert type(df._meta).__name__ == "TagFrame"
    pd.testing.assert_series_equal(pd.Series(got).sort_index(), pdf.groupby("k").x.sum(), check_names=False)
    (fb,) = a.summary["fallbacks"]
    assert fb["operation"] == "dask.dataframe.read_parquet" and "NotImplementedError" in fb["error"]
    assert fb["bytes_to_host"] == 0 and fb["bytes_to_device"] > 0 and fb["where"].startswith(__file__)
    assert a.summary["clean"], a.summary["foreign"]


def test_strict_refuses_in_one_line():
    with device_session(host_collections="strict") as s:
        df = s.to_backend(pd.DataFrame({"id": [1, 2, 3], "x": [0.5, 1.5, 2.5]}))
        with pytest.raises(UserError) as e:
            df.rename(columns={"id": "ID"})
    msg = str(e.value)
    assert "\n" not in msg and f"{__file__}:" in msg and "DataFrame.rename" in msg and "strict" in msg
    assert "TypeError: auditfam: rename is not supported" in msg


def test_off_leaves_dasks_error():
    with device_session(host_collections="off") as s:
        df = s.to_backend(pd.DataFrame({"id": [1, 2, 3], "x": [0.5, 1.5, 2.5]}))
        with pytest.raises(TypeError, match="rename is not supported"):
            df.rename(columns={"id": "ID"})
        assert s.fallbacks == []


# ---------------------------------------------------------------------------------------
# The user queries make no fallback (the GPU variant runs with `pytest -m gpu`)
# ---------------------------------------------------------------------------------------
def _query_data(tmp: pathlib.Path):
    out = []
    for name, scale in (("h2o-groupby", 2000), ("h2o-join", 2000), ("tpch", 0.01)):
        suite = queries.suites()[name]
        folder = tmp / name
        folder.mkdir()
        suite.make(folder, scale)
        paths = {t: queries.table_path(folder, t) for t in suite.tables}
        out.append((suite, paths, {t: pd.read_parquet(p) for t, p in paths.items()}))
    return out


def _queries_make_no_fallback(s, sets):
    bad, ran = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for suite, paths, tables in sets:
            for q in suite.queries:
                got = q.dask({t: dd.read_parquet(p) for t, p in paths.items()})
                got = dask.compute(got)[0] if dask.is_dask_collection(got) else got
                diff = queries.same_answer(got, queries.to_pandas(q.reference(tables)))
                ran += 1
                if diff:
                    bad.append(f"{suite.name} {q.name}: {diff}")
    assert ran >= 20 and not bad, bad
    assert s.fallbacks == []


def test_the_user_queries_make_no_fallback(tmp_path):
    sets = _query_data(tmp_path)
    with device_session(unsupported="") as s:
        _queries_make_no_fallback(s, sets)


@pytest.mark.gpu
def test_the_user_queries_make_no_fallback_on_a_gpu(tmp_path):
    sets = _query_data(tmp_path)
    with gpuscale.session(backend="gpu", gpus="0") as s:
        _queries_make_no_fallback(s, sets)
