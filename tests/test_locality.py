"""Reductions over persisted blocks sum each worker's blocks where they live first."""
from __future__ import annotations

import dask.array as da
from distributed import wait
import numpy as np

import gpuscale
from gpuscale import locality


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
    a = x.compute()
    np.testing.assert_allclose(g.compute(), a.T @ a, rtol=1e-12)
    s = gpuscale.linalg.svd(x).s.compute()
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-10)
    # an explicit fan-in keeps the plain tree
    g2 = gpuscale.linalg.gram(x, split_every=4)
    assert not any(str(k[0]).endswith("-worker") for k in dict(g2.__dask_graph__()) if isinstance(k, tuple))
    np.testing.assert_allclose(g2.compute(), a.T @ a, rtol=1e-12)


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
