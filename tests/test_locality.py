"""Reductions over persisted blocks sum each worker's blocks where they live first."""

from __future__ import annotations

import dask.array as da
import numpy as np
from distributed import wait

import gpuscale
from gpuscale.routes import locality


def test_blocks_by_worker_follows_placement(cpu_session):
    client = cpu_session.client
    x = da.random.default_rng(1).random((4000, 20), chunks=(250, 20))
    assert locality.blocks_by_worker(x, [k[0] for k in x.__dask_keys__()]) is None  # not persisted
    x = client.persist(x)
    wait(x)
    keys = [k[0] for k in x.__dask_keys__()]
    groups = locality.blocks_by_worker(x, keys)
    assert sorted(i for g in groups for i in g) == list(range(16))
    who = client.who_has(x)
    for g in groups:  # every group is the blocks of one worker
        assert len({who[keys[i]][0] for i in g}) == 1
    assert len(groups) == len({w[0] for w in who.values()}) == 2


def test_gram_of_persisted_blocks_sums_per_worker_and_is_right(cpu_session):
    client = cpu_session.client
    x = client.persist(da.random.default_rng(2).random((6000, 30), chunks=(500, 30)))
    wait(x)
    g = gpuscale.linalg.gram(x)
    names = {k[0] if isinstance(k, tuple) else k for k in dict(g.__dask_graph__())}
    assert any(str(n).endswith("-worker") for n in names), names
    parts = [k for k in dict(g.__dask_graph__()) if isinstance(k, tuple) and str(k[0]).endswith("-worker")]
    assert len(parts) == 2
    # one-thread workers: each worker's blocks go through one task (no task per block), so the
    # sum is two scheduling rounds, not three
    assert not any(str(n).endswith("-part") for n in names), names
    assert len(dict(g.__dask_graph__())) == 2 + 1 + 12  # per worker, the sum, the 12 persisted blocks
    a = x.compute()
    np.testing.assert_allclose(g.compute(), a.T @ a, rtol=1e-12)
    s = gpuscale.linalg.svd(x).s.compute()
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-10)
    # an explicit fan-in keeps the plain tree
    g2 = gpuscale.linalg.gram(x, split_every=4)
    assert not any(str(k[0]).endswith("-worker") for k in dict(g2.__dask_graph__()) if isinstance(k, tuple))
    np.testing.assert_allclose(g2.compute(), a.T @ a, rtol=1e-12)


def test_a_worker_of_several_threads_keeps_a_task_per_block():
    """Where a worker runs tasks side by side, its blocks' products stay one task each (the
    threads share them); their sum per worker follows."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as c,
        Client(c) as client,
    ):
        x = client.persist(da.random.default_rng(3).random((4000, 10), chunks=(1000, 10)))
        wait(x)
        g = gpuscale.linalg.gram(x)
        names = [k[0] for k in dict(g.__dask_graph__()) if isinstance(k, tuple)]
        assert sum(str(n).endswith("-part") for n in names) == 4, names
        # the last sum is the Gram matrix's own task (no task copying a one-element sum)
        assert len(dict(g.__dask_graph__())) == 4 + 1 + 4, names  # parts, their sum, the persisted blocks
        a = x.compute()
        np.testing.assert_allclose(g.compute(), a.T @ a, rtol=1e-12)


def test_balance_keeps_local_blocks_and_evens_out():
    lopsided = [list(range(0, 16)), list(range(16, 28)), list(range(28, 36)), list(range(36, 40))]
    out = locality.balance(lopsided)
    assert sorted(i for g in out for i in g) == list(range(40))
    assert [len(g) for g in out] == [10, 10, 10, 10]
    for before, after in zip(lopsided, out):  # each keeps as many of its own as its share allows
        assert len(set(before) & set(after)) == min(len(before), 10)
    even = [[0, 1], [2, 3]]
    assert locality.balance(even) == even
    assert locality.balance([[0, 1, 2]]) == [[0, 1, 2]]


def test_routes_name_their_tasks_apart_for_a_lazy_collection_and_its_persisted_self(cpu_session):
    """Dask names a persisted collection like its lazy self; a route's keys over the two must
    differ, or a scheduler that still knows the old keys keeps their old tasks (found on a GPU:
    an SVD over the persisted array re-ran the lazy host-to-device conversion every repeat)."""
    import dask.dataframe as dd
    import pandas as pd

    from gpuscale.backends.convert import from_memory
    from gpuscale.routes import dataframe as gdf

    client = cpu_session.client
    x = from_memory(np.random.default_rng(3).standard_normal((3000, 8)), cpu_session.family, chunks=(700, 8))
    xp = client.persist(x)
    wait(xp)
    assert x.name == xp.name  # the hazard: Dask gives both the same name
    assert gpuscale.linalg.gram(x).name != gpuscale.linalg.gram(xp).name
    assert gpuscale.linalg.gram(xp).name == gpuscale.linalg.gram(xp).name  # still deterministic
    lazy_s = gpuscale.linalg.svd(x, route="gram").s
    held_s = gpuscale.linalg.svd(xp, route="gram").s
    assert lazy_s.name != held_s.name
    np.testing.assert_allclose(lazy_s.compute(), held_s.compute(), rtol=1e-12)

    frame = pd.DataFrame({"k": np.arange(4000) % 1000, "v": np.arange(4000.0)})
    df = dd.from_pandas(frame, npartitions=4)
    dp = client.persist(df)
    wait(dp)
    lazy_g = gdf.groupby_agg(df, "k", {"v": "sum"}, groups=1000, rows=4000)
    held_g = gdf.groupby_agg(dp, "k", {"v": "sum"}, groups=1000, rows=4000)
    assert lazy_g.decision.value == held_g.decision.value == "per-worker"
    assert lazy_g.result._name != held_g.result._name


def test_in_memory_reads_a_persisted_frame_through_its_futures(cpu_session):
    """A persisted DataFrame's keys are aliases of its futures' keys; the per-worker groupby
    reads the futures directly, so the scheduler runs no alias tasks before it."""
    import dask.dataframe as dd
    import pandas as pd
    from dask.task_spec import Alias
    from distributed import futures_of, get_task_stream

    from gpuscale.routes import dataframe as gdf

    client = cpu_session.client
    frame = pd.DataFrame({"k": np.arange(6000) % 1500, "v": np.arange(6000.0)})
    df = dd.from_pandas(frame, npartitions=6)
    assert locality.in_memory(df) is None  # lazy
    dp = client.persist(df)
    wait(dp)
    assert any(isinstance(v, Alias) for v in dict(dp.__dask_graph__()).values())  # what is avoided
    dsk, keys = locality.in_memory(dp)
    assert keys == sorted(f.key for f in futures_of(dp))
    res = gdf.groupby_agg(dp, "k", {"v": ["sum", "max"]}, groups=1500, rows=6000)
    assert res.decision.value == "per-worker"
    graph = dict(res.result.__dask_graph__())
    assert not set(dp.__dask_keys__()) & set(graph)  # the aliases are not in the route's graph
    with get_task_stream(client) as ts:
        got = res.result.compute()
    ran = {t["key"][0] if isinstance(t["key"], tuple) else t["key"] for t in ts.data}
    assert all(str(name).startswith("gpuscale-groupby") for name in ran), ran
    ref = frame.groupby("k").agg({"v": ["sum", "max"]})
    pd.testing.assert_frame_equal(got.sort_index(), ref, check_exact=False, rtol=1e-12)
