"""gpuscale.dataframe.groupby_agg: results match pandas for every plan; the plan follows the
family's budget; bad column / aggregation names are one-line UserErrors."""

from __future__ import annotations

import contextlib
import dataclasses

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import futures_of

from gpuscale import UserError, backends
from gpuscale.routes import dataframe as gdf

SPEC = {"x": ["max", "mean"], "y": ["count", "sum", "min"]}


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    n = 2000
    pdf = pd.DataFrame(
        {
            "key": rng.integers(0, 50, n),
            "k2": rng.integers(0, 4, n),
            "x": rng.random(n),
            "y": rng.integers(0, 100, n),
            "s": rng.choice(["a", "b", "c"], n),
        }
    )
    pdf.loc[::13, "x"] = np.nan
    return pdf


@pytest.fixture
def ddf(frame):
    return dd.from_pandas(frame, npartitions=4)


def check_matches_pandas(res, pdf, by, spec):
    got = res.result.compute().sort_index()
    ref = pdf.groupby(by).agg(spec).sort_index()
    pd.testing.assert_frame_equal(got, ref, check_dtype=False, check_exact=False, rtol=1e-12)


@pytest.mark.parametrize("split_out, strategy", [(1, "tree"), (3, "shuffle")])
def test_explicit_split_out_matches_pandas(frame, ddf, split_out, strategy):
    res = gdf.groupby_agg(ddf, "key", SPEC, split_out=split_out)
    assert res.decision.numbers["split_out"] == split_out
    assert res.decision.value == strategy
    assert res.result.npartitions == split_out
    assert "set by you" in res.decision.rule
    check_matches_pandas(res, frame, "key", SPEC)


def test_auto_plan_under_budget_is_one_partition(frame, ddf):
    res = gdf.groupby_agg(ddf, "key", SPEC)
    p = res.decision
    assert p.numbers["split_out"] == 1 and res.result.npartitions == 1
    assert p.value in ("tree", "per-worker")
    assert (
        p.numbers["result_bytes"]
        <= p.numbers["budget_bytes"]
        == backends.select("cpu").family.knobs.split_out_budget_bytes
    )
    assert p.numbers["groups_source"].startswith("estimated")
    assert 40 <= p.numbers["groups"] <= 60  # nunique_approx of 50 keys
    assert "split_out=1" in p.rule
    check_matches_pandas(res, frame, "key", SPEC)


def test_tree_plan_when_groups_are_few_per_partition(frame, ddf):
    # 4 groups in partitions of ~500 rows: aggregating each partition first shrinks the data
    res = gdf.groupby_agg(ddf, "k2", SPEC)
    assert res.decision.value == "tree" and res.decision.numbers["split_out"] == 1
    check_matches_pandas(res, frame, "k2", SPEC)


def test_per_worker_plan_when_groups_are_many(frame, ddf):
    # 50 groups per ~500-row partition (10%): each worker concatenates, aggregates once
    res = gdf.groupby_agg(ddf, "key", SPEC, groups=50, rows=len(frame))
    assert res.decision.value == "per-worker"
    assert res.decision.numbers["groups_source"] == "given"
    check_matches_pandas(res, frame, "key", SPEC)
    # no cluster: one worker, one task aggregating everything (no partials), sorted by key
    # when asked (pandas' default), with pandas' own columns and dtypes
    res = gdf.groupby_agg(ddf, "key", SPEC, groups=50, rows=len(frame), sort=True)
    graph = dict(res.result.__dask_graph__())
    ours = [k for k in graph if str(k[0] if isinstance(k, tuple) else k).startswith("gpuscale-groupby")]
    funcs = {
        v[0] if isinstance(v, tuple) else getattr(v, "func", None) for k, v in graph.items() if k in ours
    }
    assert gdf._whole in funcs
    assert not any("partial" in str(k) for k in ours)
    got = res.result.compute()
    assert got.index.is_monotonic_increasing
    ref = frame.groupby("key").agg(SPEC)
    pd.testing.assert_frame_equal(got, ref, check_exact=False, rtol=1e-12)


def test_multi_column_keys(frame, ddf):
    for split_out in (1, 2, "auto"):
        res = gdf.groupby_agg(ddf, ["key", "k2"], SPEC, split_out=split_out)
        check_matches_pandas(res, frame, ["key", "k2"], SPEC)


def test_non_decomposable_aggregations_use_the_tree(frame, ddf):
    spec = {"x": ["std", "var"], "y": ["first", "last"]}
    res = gdf.groupby_agg(ddf, "key", spec, groups=50, rows=len(frame))
    assert res.decision.value == "tree"
    check_matches_pandas(res, frame, "key", spec)


@pytest.fixture
def tiny_budget_family():
    cpu = backends.select("cpu").family
    fam = dataclasses.replace(
        cpu,
        name="test-tiny",
        names=("test-tiny",),
        knobs=dataclasses.replace(cpu.knobs, split_out_budget_bytes=256),
    )
    backends.register(fam)
    yield fam
    backends.unregister("test-tiny")


def test_small_budget_splits_the_result(frame, ddf, tiny_budget_family):
    p = gdf.choose_groupby(ddf, "key", SPEC, family=tiny_budget_family)
    assert p.value == "shuffle" and p.numbers["split_out"] > 1
    assert p.numbers["result_bytes"] > p.numbers["budget_bytes"] == 256
    assert "test-tiny budget" in p.rule
    # the same frame with the real cpu family stays in one partition
    assert (
        gdf.choose_groupby(ddf, "key", SPEC, family=backends.select("cpu").family).numbers["split_out"] == 1
    )
    res = gdf.groupby_agg(ddf, "key", SPEC, family=tiny_budget_family)
    assert res.result.npartitions == p.numbers["split_out"]
    check_matches_pandas(res, frame, "key", SPEC)


def test_split_out_must_be_positive(ddf):
    with pytest.raises(UserError, match="split_out must be >= 1"):
        gdf.choose_groupby(ddf, "key", SPEC, split_out=0)


def test_unknown_groupby_column_lists_columns(ddf):
    with pytest.raises(UserError, match=r"\['nokey'\].*choose from: key, k2, x, y, s"):
        gdf.groupby_agg(ddf, "nokey", SPEC)


def test_unknown_aggregated_column_lists_columns(ddf):
    with pytest.raises(UserError, match=r"\['z'\].*choose from: key, k2, x, y, s"):
        gdf.groupby_agg(ddf, "key", {"z": "sum"})


def test_unknown_aggregation_lists_aggregations(ddf):
    with pytest.raises(UserError, match=r"unknown aggregation\(s\) \['median'\]") as e:
        gdf.groupby_agg(ddf, "key", {"x": ["max", "median"]})
    for a in gdf.AGGREGATIONS:
        assert a in str(e.value)


def test_mean_of_string_column(ddf, frame):
    with pytest.raises(UserError, match="column 's'.*not numeric.*count/min/max"):
        gdf.groupby_agg(ddf, "key", {"s": "mean"})
    # what the message suggests works
    res = gdf.groupby_agg(ddf, "key", {"s": ["count", "max"]})
    check_matches_pandas(res, frame, "key", {"s": ["count", "max"]})


# ---------------------------------------------------------------------------------------
# On a distributed cluster: the per-worker plan groups persisted partitions by worker
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("split_out", ["auto", 1, 3])
def test_on_distributed_cluster(cpu_session, frame, split_out):
    ddf = cpu_session.client.persist(dd.from_pandas(frame, npartitions=6))
    res = gdf.groupby_agg(ddf, "key", SPEC, split_out=split_out)
    if split_out == "auto":
        assert res.decision.value == "per-worker"
        # one partial per worker holding data, covering every partition once
        from distributed import wait

        wait(ddf)
        keys = ddf.__dask_keys__()
        groups = gdf._worker_groups(ddf, keys)
        assert sorted(i for g in groups for i in g) == list(range(6))
        assert len(groups) <= 2
        from distributed import futures_of

        who = cpu_session.client.who_has(ddf)
        held = {f.key[1]: who[f.key][0] for f in futures_of(ddf)}  # partition -> worker
        assert len(set(held.values())) == 2 and len(groups) == 2
        assert max(len(g) for g in groups) == 3  # balanced: 6 partitions, 2 workers
        owners = [max({held[i] for i in g}, key=[held[i] for i in g].count) for g in groups]
        assert len(set(owners)) == 2  # one group per worker, each reading mostly its own data
        for g, w in zip(groups, owners):
            mine = sum(1 for h in held.values() if h == w)
            assert sum(1 for i in g if held[i] == w) == min(mine, 3)
        # partials on two workers, combined: the same columns and dtypes as pandas (and as
        # the one-worker task)
        ref = frame.groupby("key").agg(SPEC)
        got = res.result.compute().sort_index()
        pd.testing.assert_frame_equal(got, ref, check_exact=False, rtol=1e-12)
    check_matches_pandas(res, frame, "key", SPEC)


def test_merge_and_sort_routes_one_task_on_one_single_thread_worker(cpu_session):
    """merge / sort_values / set_index: one task (the library's own call) when one worker with
    one thread is the whole cluster, Dask's way otherwise (cpu_session: 2 workers); the rows
    equal pandas' either way."""
    import gpuscale

    rng = np.random.default_rng(0)
    left = pd.DataFrame({"key": rng.permutation(2_000), "x": np.arange(2_000)})
    right = pd.DataFrame({"key": rng.integers(0, 3_000, 1_500), "y": rng.random(1_500)})
    ref = left.merge(right, on="key").sort_values(["key", "y"]).reset_index(drop=True)
    with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as one:
        for client_plan, session in (("one task", one), ("dask", cpu_session)):
            with session.client.as_current():
                dl = dd.from_pandas(left, npartitions=3)
                dr = dd.from_pandas(right, npartitions=2)
                m = gdf.merge(dl, dr, "key")
                assert m.decision.value == client_plan, m.decision.rule
                got = m.result.compute().sort_values(["key", "y"]).reset_index(drop=True)
                pd.testing.assert_frame_equal(got, ref, check_dtype=False)
                s = gdf.sort(dl, "key")
                assert s.decision.value == client_plan
                assert s.result.compute()["key"].tolist() == sorted(left["key"])
                i = gdf.sort(dl, "key", index=True)
                out = i.result.compute()
                assert (
                    i.decision.value == client_plan
                    and out.index.is_monotonic_increasing
                    and len(out) == len(left)
                )
                assert (out["x"].to_numpy() == left.set_index("key").loc[out.index, "x"].to_numpy()).all()


@contextlib.contextmanager
def _one_thread_worker_frames(seed: int, keys: int, rows: int):
    """A CPU session of one worker with one thread, and two frames persisted on it: (session,
    left, right, their Dask frames). ``left`` has ``rows`` rows of ``keys`` keys; ``right`` one
    row per key."""
    from distributed import wait

    import gpuscale

    rng = np.random.default_rng(seed)
    left = pd.DataFrame({"key": rng.integers(0, keys, rows), "x": rng.random(rows)})
    right = pd.DataFrame({"key": np.arange(keys), "y": rng.random(keys)})
    with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as s, s.client.as_current():
        dl, dr = s.client.persist([dd.from_pandas(left, npartitions=3), dd.from_pandas(right, npartitions=2)])
        wait([dl, dr])
        yield s, left, right, dl, dr


def test_a_one_task_route_runs_one_task_no_alias():
    """The per-worker groupby, merge and sort over persisted frames on one single-thread
    worker: persisting the result runs exactly one task (``dd.from_graph``'s alias from the
    frame's key to the task's was one more task, a scheduling round each run), and the answer
    equals pandas'."""
    from distributed import get_task_stream, wait

    with _one_thread_worker_frames(1, 500, 5_000) as (s, left, right, dl, dr):
        routes = {
            "groupby": gdf.groupby_agg(dl, "key", {"x": "sum"}, groups=500, threads=1).result,
            "merge": gdf.merge(dl, dr, "key").result,
            "sort": gdf.sort(dl, "key").result,
        }
        for name, result in routes.items():
            with get_task_stream(client=s.client) as ts:
                done = s.client.persist(result)
                wait(done)
            assert len(ts.data) == 1, (name, [t["key"] for t in ts.data])
        got = routes["groupby"].compute()
        want = left.groupby("key").agg({"x": "sum"})
        np.testing.assert_allclose(got.sort_index().to_numpy().ravel(), want.to_numpy().ravel())
        assert len(routes["merge"].compute()) == len(left.merge(right, on="key"))
        assert routes["sort"].compute()["key"].tolist() == sorted(left["key"])


def test_a_one_task_route_is_submitted_with_its_wrappers_and_its_answer():
    """The runner persists a one-task route's frame over futures through ``client.submit``
    (no expression sent for the scheduler to make a graph of): the scheduler holds one task,
    running :func:`gpuscale._dask_compat._apply` with the finishing wrapper inside it, and the
    answer is pandas'. A frame over lazy inputs is left to Dask's persist."""
    from gpuscale import _dask_compat
    from gpuscale.runs import runner

    with _one_thread_worker_frames(2, 300, 4_000) as (s, left, right, dl, dr):
        route = gdf.groupby_agg(dl, "key", {"x": ["sum", "max"]}, groups=300, threads=1).result
        wrapped = _dask_compat.finished_by(route, _tagged)
        _, out = runner.timed(
            s.client, s.family, lambda: {"g": wrapped, "m": gdf.merge(dl, dr, "key").result}
        )
        for name, frame in out.items():
            (future,) = futures_of(frame)
            funcs = s.client.run_on_scheduler(_run_spec_func, future.key)
            assert funcs == "_apply", (name, funcs)
        got = out["g"].compute()
        assert got.attrs.get("finished") is True
        want = left.groupby("key").agg({"x": ["sum", "max"]})
        pd.testing.assert_frame_equal(got.sort_index(), want, check_names=False)
        assert len(out["m"].compute()) == len(left.merge(right, on="key"))
        lazy = gdf.merge(dd.from_pandas(left, npartitions=2), dr, "key").result
        assert _dask_compat.submitted(lazy, s.client) is None
        assert len(runner.persist(s.client, lazy).compute()) == len(left.merge(right, on="key"))
        # a Delayed answers every attribute (``.expr.submitted`` too): it must still be persisted
        import dask

        _, held = runner.timed(s.client, s.family, lambda: {"d": dask.delayed(len)(list(range(7)))})
        assert futures_of(held["d"]) and held["d"].compute() == 7


def test_a_one_task_route_persisted_while_its_last_result_is_held_gives_a_new_result():
    """Dask hands back a live expression of the same name instead of making a new one: the
    submitted frame of a one-task route is named by its own future, so persisting the route
    again while an earlier result is held (an earlier repeat's, an earlier run's) gives a
    frame over the new future, not the earlier frame with the new future dropped."""
    from gpuscale.runs import runner

    with _one_thread_worker_frames(1, 300, 4_000) as (s, left, right, dl, dr):

        def build():
            return gdf.groupby_agg(dl, "key", {"x": "sum"}, groups=300, threads=1).result

        _, first = runner.timed(s.client, s.family, build)
        _, second = runner.timed(s.client, s.family, build)
        ((held,), (new,)) = futures_of(first), futures_of(second)
        assert new is not held and new.status == "finished"
        pd.testing.assert_frame_equal(second.compute(), first.compute())


def _run_spec_func(key, dask_scheduler=None):
    spec = dask_scheduler.tasks[key].run_spec
    return getattr(getattr(spec, "func", None), "__name__", repr(spec))


def test_the_gpu_family_synchronizes_a_one_task_route_inside_its_task():
    """The GPU family wraps a one-task route's output task with its device synchronize (no
    round trip to every worker after the wait); frames of other shapes are left to that round
    trip. Built only (no GPU here): the task is (synchronize, (the route's task))."""
    from gpuscale.backends import gpu, registry

    fam = next(f for f in registry.families() if f.name == "gpu")
    df = dd.from_pandas(pd.DataFrame({"key": [1, 2, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]}), npartitions=2)
    route = gdf.groupby_agg(df, "key", {"x": "sum"}, groups=2, family=fam, threads=1)
    assert route.decision.value == "per-worker"
    wrapped = fam.synchronized(route.result)
    (key,) = wrapped.__dask_keys__()
    task = dict(wrapped.__dask_graph__())[key]
    assert task[0] is gpu._synced and task[1][0] in (gdf._whole, gdf._combine), task
    # the nested task runs as one (checked here with a host function in the synchronize's place)
    from gpuscale import _dask_compat

    got = _dask_compat.finished_by(route.result, _tagged).compute()
    assert got.attrs.get("finished") is True
    pd.testing.assert_frame_equal(got, route.result.compute(), check_like=True)
    assert fam.synchronized(df.groupby("key").x.sum()) is None
    import dask

    assert fam.synchronized(dask.delayed(len)([1])) is None  # a Delayed answers every attribute


def _tagged(frame):
    frame.attrs["finished"] = True
    return frame


def test_sort_is_dasks_default_and_asked_for_sorts_every_plan(frame, ddf):
    """``sort`` as in Dask's groupby: the default leaves the groups in the aggregation's order
    (the same groups and values as pandas'), True sorts them on every one-partition plan, and a
    split result cannot be sorted (one line with the fix)."""
    import dataclasses

    for groups in (50, 5):  # per-worker (many groups per partition) and tree (few)
        base = gdf.groupby_agg(ddf, "key", SPEC, groups=groups, rows=len(frame))
        for plan in {base.decision.value, "tree", "per-worker"}:
            forced = dataclasses.replace(
                base.decision, value=plan, numbers={**base.decision.numbers, "split_out": 1}
            )
            check_matches_pandas(gdf.groupby_agg(ddf, "key", SPEC, plan=forced), frame, "key", SPEC)
            got = gdf.groupby_agg(ddf, "key", SPEC, plan=forced, sort=True).result.compute()
            assert got.index.is_monotonic_increasing, plan
            pd.testing.assert_frame_equal(got, frame.groupby("key").agg(SPEC), check_exact=False, rtol=1e-12)
    with pytest.raises(UserError, match="sort=True needs the result in one partition"):
        gdf.groupby_agg(ddf, "key", SPEC, split_out=2, sort=True)
    from distributed import wait

    import gpuscale

    with gpuscale.session(backend="cpu", workers=2, threads_per_worker=1) as s, s.client.as_current():
        held = s.client.persist(ddf)
        wait(held)
        for sort in (None, True):  # two workers: partials combined on one
            res = gdf.groupby_agg(held, "key", SPEC, groups=50, rows=len(frame), threads=1, sort=sort)
            assert res.decision.value == "per-worker"
            graph = dict(res.result.__dask_graph__())
            assert any("partial" in str(k) for k in graph), "expected one partial per worker"
            check_matches_pandas(res, frame, "key", SPEC)
            if sort:
                assert res.result.compute().index.is_monotonic_increasing
