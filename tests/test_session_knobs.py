"""A session applies its family's Dask DataFrame settings to all the work in its block, the
user's own code included (gpuscale/backends/session_knobs.py): real LocalClusters, real
merges, the shuffle read off the tasks the scheduler ran."""

from __future__ import annotations

import dataclasses

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.utils import key_split
from distributed import get_task_stream

import gpuscale
from gpuscale import api, backends
from gpuscale.backends import cpu, host_collections, session_knobs

LEFT = pd.DataFrame({"k": np.arange(4000) % 997, "a": np.arange(4000.0)})
RIGHT = pd.DataFrame({"k": np.arange(997), "b": np.arange(997.0) * 2})
SMALL = {"workers": 2, "threads_per_worker": 1, "engine": "dask"}
"""A small cluster whose blocks run user code on Dask (the route these knobs tune)."""


def _user_merge(s) -> set[str]:
    """A merge as a user writes it inside the block; returns the task prefixes the scheduler
    ran, after checking the answer against pandas."""
    left = dd.from_pandas(LEFT, npartitions=4)
    right = dd.from_pandas(RIGHT, npartitions=3)
    with get_task_stream(s.client) as ts:
        got = left.merge(right, on="k").compute()
    want = LEFT.merge(RIGHT, on="k")
    pd.testing.assert_frame_equal(
        got.sort_values(["k", "a"]).reset_index(drop=True),
        want.sort_values(["k", "a"]).reset_index(drop=True),
    )
    return {key_split(t["key"]) for t in ts.data}


def _tasks_shuffle(prefixes: set[str]) -> bool:
    return "split-taskshuffle" in prefixes and "hash-join-transfer" not in prefixes


@pytest.fixture
def tasks_family():
    """The CPU family whose shuffle knob is the task shuffle (what the GPU family has)."""
    fam = dataclasses.replace(
        cpu.FAMILY,
        name="cputasks",
        names=("cputasks",),
        auto_priority=-1,
        knobs=dataclasses.replace(cpu.FAMILY.knobs, shuffle_method="tasks"),
    )
    backends.register(fam)
    yield fam
    backends.unregister(fam.name)


def test_a_user_merge_in_the_block_shuffles_with_the_family_method(tasks_family):
    with gpuscale.session(backend="cputasks", **SMALL) as s:
        assert dask.config.get("dataframe.shuffle.method") == "tasks"
        assert _tasks_shuffle(_user_merge(s))
        shuffle = s.applied["shuffle_method"]
        assert shuffle.rule_id == "shuffle.family" and shuffle.source == "family"
    assert dask.config.get("dataframe.shuffle.method", None) is None  # scoped to the block


def test_the_cpu_family_leaves_user_merges_to_dask():
    with gpuscale.session(backend="cpu", **SMALL) as s:
        prefixes = _user_merge(s)
        assert "hash-join-transfer" in prefixes  # Dask's P2P, as plain Dask on this cluster
        shuffle = s.applied["shuffle_method"]
        assert shuffle.value is None and shuffle.rule_id == "shuffle.dask-default"


def test_the_setting_and_your_dask_config_override_the_family(tasks_family):
    with gpuscale.session(backend="cputasks", shuffle_method="p2p", **SMALL) as s:
        assert "hash-join-transfer" in _user_merge(s)
        assert (s.applied["shuffle_method"].value, s.applied["shuffle_method"].source) == ("p2p", "flag")
        with dask.config.set({"dataframe.shuffle.method": "disk"}):  # a call's own config still wins
            assert dask.config.get("dataframe.shuffle.method") == "disk"
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        d = api.explain("merge", backend="cputasks", **{"cluster_settings": SMALL})
    shuffle = d["explained"]["session"]["shuffle_method"]
    assert (shuffle["value"], shuffle["source"], shuffle["rule_id"]) == (
        "p2p",
        "dask.config",
        "shuffle.yours",
    )


def test_explain_and_the_record_name_the_session_shuffle(tasks_family, tmp_path):
    d = api.explain("merge", backend="cputasks", cluster_settings=SMALL)
    planned = d["explained"]["session"]["shuffle_method"]
    assert (planned["value"], planned["rule_id"], planned["dask_key"]) == (
        "tasks",
        "shuffle.family",
        "dataframe.shuffle.method",
    )
    with gpuscale.session(backend="cputasks", **SMALL) as s:
        r = s.run("merge", rows=20_000, repeat=1, warmup=0, results_dir=str(tmp_path))
    assert r.valid
    assert r.explained["session"]["shuffle_method"] == planned


@pytest.mark.gpu
def test_a_user_merge_in_a_gpu_session_shuffles_on_the_device():
    """The GPU family's task shuffle reaches a merge the user writes in the block: cuDF
    partitions, no P2P transfer tasks, pandas' answer."""
    pytest.importorskip("dask_cudf")
    with gpuscale.session(backend="gpu", engine="dask") as s:
        shuffle = s.applied["shuffle_method"]
        assert shuffle.value == "tasks" and shuffle.rule_id == "shuffle.family"
        left = dd.from_dict({"k": LEFT.k.to_numpy(), "a": LEFT.a.to_numpy()}, npartitions=4)
        right = dd.from_dict({"k": RIGHT.k.to_numpy(), "b": RIGHT.b.to_numpy()}, npartitions=3)
        merged = left.merge(right, on="k")
        assert type(merged._meta).__module__.startswith("cudf")
        with get_task_stream(s.client) as ts:
            got = merged.compute().to_pandas()
        prefixes = {key_split(t["key"]) for t in ts.data}
    assert _tasks_shuffle(prefixes), prefixes
    want = LEFT.merge(RIGHT, on="k")
    pd.testing.assert_frame_equal(
        got.sort_values(["k", "a"]).reset_index(drop=True),
        want.sort_values(["k", "a"]).reset_index(drop=True),
        check_dtype=False,
    )


def test_a_trace_of_user_code_shows_its_shuffle_and_merge_time_and_the_applied_knob(tasks_family, tmp_path):
    """``s.trace`` of a user's merge: the summary adds up shuffle and merge task time, names the
    shuffle the session applied, and the rendered summary shows both."""
    from gpuscale.trace import load
    from gpuscale.trace.render import summary_rows

    with gpuscale.session(backend="cputasks", **SMALL) as s:
        with s.trace(str(tmp_path / "t")):
            _user_merge(s)
    summary = load(tmp_path / "t")
    ops = summary.operations
    assert ops["shuffle"]["tasks"] > 0 and ops["merge"]["tasks"] > 0 and ops["read"]["tasks"] > 0
    assert sum(o["tasks"] for o in ops.values()) == summary.tasks
    assert any("dataframe.shuffle.method = tasks" in n and "shuffle.family" in n for n in summary.notes)
    rows = dict(summary_rows(summary))
    assert "  shuffle" in rows and "  merge" in rows


def _chain(frames: dict[str, dd.DataFrame]) -> dd.DataFrame:
    """Five merges as a user chains them (TPC-H-shaped: a filter, then join after join)."""
    n = frames["n"][frames["n"].r < 3]
    j = frames["c"].merge(n, left_on="cn", right_on="nk")
    j = j.merge(frames["o"], left_on="ck", right_on="oc").merge(frames["l"], left_on="ok", right_on="lo")
    j = j.merge(frames["s"], left_on=["ls", "cn"], right_on=["sk", "sn"])
    return j.assign(rev=j.price * (1 - j.disc)).groupby("name").rev.sum()


def _chain_tables() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(7)
    return {
        "n": pd.DataFrame({"nk": np.arange(10), "r": np.arange(10) % 5, "name": list("abcdefghij")}),
        "c": pd.DataFrame({"ck": np.arange(300), "cn": np.arange(300) % 10}),
        "o": pd.DataFrame({"ok": np.arange(2000), "oc": rng.integers(0, 300, 2000)}),
        "l": pd.DataFrame(
            {
                "lo": rng.integers(0, 2000, 8000),
                "ls": rng.integers(0, 40, 8000),
                "price": rng.random(8000),
                "disc": rng.random(8000) / 10,
            }
        ),
        "s": pd.DataFrame({"sk": np.arange(40), "sn": np.arange(40) % 10}),
    }


def _pandas_merges_while_planning(tables) -> tuple[int, pd.Series]:
    """(how many pandas merges Dask ran in the client to plan :func:`_chain`, its answer),
    counted by cProfile: every merge metadata computation is one pandas merge."""
    import cProfile
    import pstats

    frames = {k: dd.from_pandas(v, npartitions=2) for k, v in tables.items()}
    prof = cProfile.Profile()
    prof.enable()
    try:
        planned = _chain(frames).optimize()
    finally:
        prof.disable()
    merges = sum(
        calls
        for (file, _, name), (calls, *_) in pstats.Stats(prof).stats.items()
        if name == "merge" and "pandas" in file and file.endswith("frame.py")
    )
    return merges, planned.compute()


def test_user_merges_in_the_block_share_their_metadata():
    """A chain of five user merges: Dask computes each merge's metadata again for every
    expression its optimizer makes; in a session one computation serves each pair of schemas,
    the answer unchanged (rule ``merge-meta.cached``)."""
    tables = _chain_tables()
    plain, want = _pandas_merges_while_planning(tables)
    with gpuscale.session(backend="cpu", **SMALL) as s:
        applied = s.applied["merge_meta"]
        assert (applied.value, applied.rule_id, applied.extra["dask_key"]) == (
            "cached",
            "merge-meta.cached",
            None,
        )
        cached, got = _pandas_merges_while_planning(tables)
    assert plain >= 15 and cached <= plain // 2, (plain, cached)
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index())
    again, _ = _pandas_merges_while_planning(tables)
    assert again == plain  # scoped to the block


def test_merge_metadata_left_to_dask_by_the_setting():
    tables = _chain_tables()
    plain, _ = _pandas_merges_while_planning(tables)
    with gpuscale.session(backend="cpu", merge_meta="dask", **SMALL) as s:
        applied = s.applied["merge_meta"]
        assert (applied.value, applied.source, applied.rule_id) == ("dask", "flag", "merge-meta.dask")
        assert _pandas_merges_while_planning(tables)[0] == plain
    d = api.explain("merge", backend="cpu", cluster_settings=SMALL)
    assert d["explained"]["session"]["merge_meta"]["rule_id"] == "merge-meta.cached"


def test_merges_that_differ_in_any_schema_detail_keep_their_own_metadata():
    """Merges alike but for a dtype, a column or index name, the join's kind or its suffixes:
    each gets the metadata Dask computes for it outside a session, in any order."""
    base = pd.DataFrame({"k": np.arange(6), "v": np.arange(6.0)})
    other = pd.DataFrame({"k": np.arange(3), "v": np.arange(3.0)})
    variants = [
        (base, other, {"on": "k"}),
        (base, other.astype({"k": "int32"}), {"on": "k"}),
        (base, other.astype({"v": "float32"}), {"on": "k"}),
        (base, other.astype({"v": "category"}), {"on": "k"}),
        (base, other.rename(columns={"v": "w"}), {"on": "k"}),
        (base, other, {"on": "k", "how": "left"}),
        (base, other, {"on": "k", "suffixes": ("_l", "_r")}),
        (base.set_index("k"), other.set_index("k"), {"left_index": True, "right_index": True}),
        (base.rename_axis("i"), other, {"on": "k"}),
    ]

    def metas():
        return [
            dd.from_pandas(a, npartitions=2).merge(dd.from_pandas(b, npartitions=1), **kw)._meta
            for a, b, kw in variants
        ]

    want = metas()
    with gpuscale.session(backend="cpu", **SMALL):
        got = metas() + metas()  # the second time from the cache
    for i, meta in enumerate(got):
        w = want[i % len(want)]
        assert list(meta.columns) == list(w.columns) and meta.dtypes.equals(w.dtypes), variants[i % len(want)]
        assert meta.index.name == w.index.name and meta.index.dtype == w.index.dtype


LATE_IMPORT = """
import sys
if __name__ == "__main__":
    import gpuscale
    with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as s:
        assert "dask.dataframe" not in sys.modules, "the session imported dask.dataframe"
        sys.path.insert(0, {tests!r})
        import test_session_knobs as t  # imports dask.dataframe, in the block
        cached, got = t._pandas_merges_while_planning(t._chain_tables())
    plain, want = t._pandas_merges_while_planning(t._chain_tables())
    assert plain >= 15 and cached <= plain // 2, (plain, cached)
    t.pd.testing.assert_series_equal(got.sort_index(), want.sort_index())
    print("ok", plain, cached)
"""


def test_a_session_shares_merge_metadata_with_dask_dataframe_imported_inside_its_block(tmp_path):
    """The session imports no DataFrame code itself (an array block never pays for it), yet
    merges of a ``dask.dataframe`` first imported inside the block share their metadata."""
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "late_import.py"
    script.write_text(LATE_IMPORT.format(tests=str(pathlib.Path(__file__).parent)))
    p = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr[-2000:]


def _gpu_family():
    return backends.select("gpu", check=False).family


def test_a_gpu_session_reads_the_users_parquet_files_together():
    """The GPU family adds ``aggregate_files=True`` to the user's ``read_parquet`` call, and only
    where the call says nothing of partitions; gpuscale's own reads keep their keywords."""
    import sys

    fam = _gpu_family()
    here = sys._getframe(0)
    assert host_collections.family_keywords(fam, "read_parquet", {"columns": ["a"]}, here) == {
        "aggregate_files": True,
        "columns": ["a"],
    }
    for given in ({"blocksize": None}, {"aggregate_files": False}, {"filesystem": "arrow"}):
        assert host_collections.family_keywords(fam, "read_parquet", given, here) == given
    assert host_collections.family_keywords(fam, "read_csv", {}, here) == {}
    own: dict = {"__name__": "gpuscale.data.inputs"}
    exec("import sys\ndef frame():\n    return sys._getframe(0)", own)
    assert host_collections.family_keywords(fam, "read_parquet", {}, own["frame"]()) == {}


def test_the_session_names_the_keywords_it_adds_to_the_users_reads():
    fam = _gpu_family()
    settings = gpuscale.config.resolve().settings.session
    reads = session_knobs.plan(fam, settings, {})["read_parquet"]
    assert (reads.value, reads.rule_id) == ({"aggregate_files": True}, "reads.family")
    off = settings.model_copy(update={"host_collections": "off"})
    reads = session_knobs.plan(fam, off, {})["read_parquet"]
    assert (reads.value, reads.rule_id) == (None, "reads.off")
    assert "read_parquet" not in session_knobs.plan(cpu.FAMILY, settings, {})


@pytest.mark.gpu
def test_a_gpu_session_reads_several_parquet_files_as_one_partition(tmp_path):
    """Six small files: one partition in the session, six outside it; the same rows."""
    pytest.importorskip("dask_cudf")
    for i in range(6):
        LEFT.iloc[i * 100 : (i + 1) * 100].to_parquet(tmp_path / f"part.{i}.parquet", index=False)
    with dask.config.set({"dataframe.backend": "cudf"}):
        outside = dd.read_parquet(str(tmp_path))
    with gpuscale.session(backend="gpu", engine="dask"):
        inside = dd.read_parquet(str(tmp_path))
        got = inside.compute().to_pandas()
    assert (outside.npartitions, inside.npartitions) == (6, 1)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), LEFT.iloc[:600].reset_index(drop=True))
