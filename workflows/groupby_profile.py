"""Where a one-worker groupby's time goes: client, scheduler round trips, and the work itself.

The ``groupby`` row of ``bench_vs_peer.py`` times gpuscale's route end to end (graph built,
submitted, run, device synchronized); this script splits that time so a change can be aimed at
the part that costs:

* round trips: an empty task (submit -> result), ``client.run`` (what the device synchronize
  costs), the scheduler lookup of where the blocks live;
* client: building the route's graph, the ``persist`` call;
* the work, timed inside one task with the device synchronized between steps: concatenating
  the partitions, the partial aggregation, the combine, and the library's own one-call
  ``groupby(...).agg(...)`` (sorted and not) on the same frame;
* end to end: gpuscale's route as it ships, beside ``client.submit`` of the library's one call
  on the partitions' futures (the floor of any Dask route on one worker).

    python workflows/groupby_profile.py --backend gpu --gpus 0            # 100 M rows, 1 M keys
    python workflows/groupby_profile.py --backend cpu --rows 400000 --keys 10000 --json p.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import dask.dataframe as dd
import harness
from distributed import futures_of, wait

import gpuscale
from gpuscale.routes import dataframe as gdf
from gpuscale.runs import runner
from gpuscale.workloads import _frames
from gpuscale.workloads.groupby import AGG, make_partition


def _sync():
    try:
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
    except ImportError:  # no device: nothing to wait for
        pass


def _steps(parts, by, spec):
    """The route's steps on one worker, each timed with the device synchronized."""
    from dask.dataframe.dispatch import concat

    out = {}
    _sync()
    t = time.perf_counter()
    frame = concat(list(parts))
    _sync()
    out["concat"] = time.perf_counter() - t
    t = time.perf_counter()
    p = gdf._partial([frame], by, spec)
    _sync()
    out["partial (sort=False)"] = time.perf_counter() - t
    t = time.perf_counter()
    gdf._combine([p], by, spec)
    _sync()
    out["combine (one partial)"] = time.perf_counter() - t
    for sort in (True, False):
        t = time.perf_counter()
        frame.groupby(by[0], sort=sort).agg(spec)
        _sync()
        out[f"library one call, sort={sort}"] = time.perf_counter() - t
    t = time.perf_counter()
    frame.groupby(by[0], sort=False).agg(spec).sort_index()
    _sync()
    out["library one call, sort=False, then sort_index"] = time.perf_counter() - t
    t = time.perf_counter()
    gdf._combine([gdf._partial(list(parts), by, spec)], by, spec)
    _sync()
    out["several workers' path, on one (concat + partial + combine)"] = time.perf_counter() - t
    t = time.perf_counter()
    gdf._whole(list(parts), by, spec)
    _sync()
    out["one worker's task (concat + one call)"] = time.perf_counter() - t
    return out


def _noop():
    return 0


def _median(f, n):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, "auto", gpus=True)
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", dest="json_path", default=None)
    a = ap.parse_args(argv)
    opts = {"gpus": a.gpus} if a.gpus else {"workers": 1}
    rows: dict[str, float] = {}
    with gpuscale.session(a.backend, **opts) as s:
        fam, client = s.family, s.client
        n = a.partitions
        args = _frames.partition_args(a.rows, n, fam.array_module, fam.dataframe_module, a.keys, 0)
        meta = make_partition((0, 0, 0, fam.array_module, fam.dataframe_module, a.keys, 0))
        df = client.persist(dd.from_map(make_partition, args, meta=meta, enforce_metadata=False))
        wait(df)
        spec = gdf._normalize_agg(df, ["key"], AGG)
        parts = futures_of(df)
        baseline = runner.task_count(client)

        # round trips
        rows["empty task, submit -> result"] = _median(
            lambda: client.submit(_noop, pure=False).result(), a.rounds * 4
        )
        rows["client.run (the device synchronize's round trip)"] = _median(
            lambda: fam.synchronize(client), a.rounds * 4
        )
        keys = df.__dask_keys__()
        from gpuscale.routes import locality

        rows["where the blocks live (who_has)"] = _median(
            lambda: locality.blocks_by_worker(df, keys), a.rounds * 4
        )
        # client side of the route
        rows["client: groupby_agg(...) builds the graph"] = _median(
            lambda: gdf.groupby_agg(df, "key", AGG, groups=a.keys, rows=a.rows), a.rounds * 4
        )

        def persist_parts():
            r = gdf.groupby_agg(df, "key", AGG, groups=a.keys, rows=a.rows).result
            runner.settle(client, baseline)
            t0 = time.perf_counter()
            out = client.persist(r)
            t1 = time.perf_counter()
            wait(out)
            t2 = time.perf_counter()
            fam.synchronize(client)
            t3 = time.perf_counter()
            return t1 - t0, t2 - t1, t3 - t2

        split = [persist_parts() for _ in range(a.rounds + 1)][1:]
        for i, label in enumerate(
            ("client: persist call", "submit -> result in memory", "device synchronize")
        ):
            rows[f"route end to end: {label}"] = statistics.median(x[i] for x in split)

        # the work inside one task
        steps = [
            client.submit(_steps, parts, ["key"], spec, pure=False).result() for _ in range(a.rounds + 1)
        ][1:]
        for k in steps[0]:
            rows[f"in the task: {k}"] = statistics.median(x[k] for x in steps)

        # end to end, through runner.timed (what bench_vs_peer and the runner time)
        def route():
            return gdf.groupby_agg(df, "key", AGG, groups=a.keys, rows=a.rows).result

        def one_submit():
            # the floor of any Dask route on one worker: the library's one call as one task on
            # the futures, no collection around it
            fut = client.submit(gdf._whole, parts, ["key"], spec, pure=False)
            wait(fut)
            return fut

        def timed_submit():
            t0 = time.perf_counter()
            fut = one_submit()
            fam.synchronize(client)
            return time.perf_counter() - t0, fut

        for label, run in (
            ("gpuscale groupby_agg (as shipped)", lambda: runner.timed(client, fam, route)),
            ("client.submit of the one-call task on the futures", timed_submit),
        ):
            ts = []
            for _ in range(a.rounds + 1):
                runner.settle(client, baseline)
                t, out = run()
                ts.append(t)
                del out
            rows[f"end to end: {label}"] = statistics.median(ts[1:])
        device = s.spec.describe() if hasattr(s.spec, "describe") else fam.name

    width = max(len(k) for k in rows)
    print(
        f"groupby profile: {a.rows:,} rows, {a.keys:,} keys, {a.partitions} partitions, "
        f"{fam.name} family, medians of {a.rounds}"
    )
    for k, v in rows.items():
        print(f"  {k:<{width}}  {v * 1e3:9.3f} ms")
    if a.json_path:
        harness.write(
            a.json_path,
            "groupby_profile",
            {
                "rows": a.rows,
                "keys": a.keys,
                "partitions": a.partitions,
                "family": fam.name,
                "device": str(device),
                "seconds": rows,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
