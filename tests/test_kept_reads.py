"""Inside a session the user's Parquet reads of unchanged local files are built once: a second
call returns a copy of the first collection, a changed file is read again, and Dask's own
``read_parquet`` is back when the session ends."""

from __future__ import annotations

import os

import dask.dataframe as dd
import pandas as pd
import pytest

import gpuscale
from gpuscale.backends.kept_reads import files_of


@pytest.fixture
def folder(tmp_path):
    for i in range(3):
        pd.DataFrame({"k": [i] * 4, "v": range(4)}).to_parquet(tmp_path / f"part.{i}.parquet", index=False)
    return tmp_path


def test_a_second_read_of_the_same_files_is_the_first_collection_copied(folder):
    own = dd.read_parquet
    with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as s:
        a = dd.read_parquet(str(folder))
        b = dd.read_parquet(str(folder))
        c = dd.read_parquet(str(folder), columns=["v"])
        assert b is not a and b.expr is a.expr  # nothing listed or built again
        assert c.expr is not a.expr  # other arguments: another read
        b["w"] = b.v * 2  # the user's assignment changes their copy only
        assert list(a.columns) == ["k", "v"] and list(b.columns) == ["k", "v", "w"]
        assert dd.read_parquet(str(folder)).expr is a.expr
        assert s.applied["kept_reads"].rule_id == "reads.kept"
        assert int(b.w.sum().compute()) == 2 * 3 * 6
    assert dd.read_parquet is own


def test_a_file_changed_between_reads_is_read_again(folder):
    with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1):
        before = dd.read_parquet(str(folder))
        assert len(before.compute()) == 12
        pd.DataFrame({"k": [9] * 10, "v": range(10)}).to_parquet(folder / "part.1.parquet", index=False)
        st = os.stat(folder / "part.1.parquet")
        os.utime(folder / "part.1.parquet", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        after = dd.read_parquet(str(folder))
        assert after.expr is not before.expr
        assert len(after.compute()) == 18
        pd.DataFrame({"k": [5], "v": [1]}).to_parquet(folder / "part.3.parquet", index=False)
        assert len(dd.read_parquet(str(folder)).compute()) == 19  # a file added


def test_only_local_files_are_kept(folder):
    one = folder / "part.0.parquet"
    assert [f[0] for f in files_of(str(folder))] == [str(folder / f"part.{i}.parquet") for i in range(3)]
    assert files_of(str(folder / "part.*.parquet")) == files_of(str(folder))
    assert files_of([one]) == files_of(f"file://{one}")
    assert files_of("s3://bucket/table") is None
    assert files_of(str(folder / "missing")) is None
    with open(one, "rb") as f:
        assert files_of(f) is None


@pytest.mark.gpu
def test_a_gpu_sessions_kept_read_has_the_familys_keywords_and_cudf_partitions(folder):
    """On the GPU family the reader the user calls is the host-collection wrapper (which adds
    ``aggregate_files``) over the kept read; both are given back when the session ends."""
    own = dd.read_parquet
    with gpuscale.session(backend="gpu") as s:
        a = dd.read_parquet(str(folder))
        b = dd.read_parquet(str(folder))
        assert b.expr is a.expr and type(a._meta).__module__.startswith("cudf")
        assert a.npartitions == 1  # the family's aggregate_files=True: three files read together
        assert s.applied["kept_reads"].rule_id == "reads.kept"
        got = b.groupby("k").v.sum().compute()
        assert type(got).__module__.startswith("cudf")
        assert got.to_pandas().sort_index().tolist() == [6, 6, 6]
    assert dd.read_parquet is own
