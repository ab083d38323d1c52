"""The fixed-cost grid in ONE run: gpuscale's defaults on every shape, against plain Dask and the
library alone, and the fixed cost of a run on a warm session.

``groupby``  rows x keys (default: rows {10 M, 100 M, 400 M} x keys {10, 1 000, 1 M, rows / 2},
             max/count/mean of ``key`` as the ``groupby`` workload makes it). Per cell, on the
             same data, each side warmed once and timed ``--rounds`` times (medians):

             * gpuscale default: the data in the partitions the ``groupby`` workload's rule
               picks (no ``--partitions``), ``gpuscale.dataframe.groupby_agg`` as ``run groupby``
               calls it (the plan it picks is printed);
             * plain Dask on the same partitions, three ways: backend switched only
               (``df.groupby("key").agg(spec)``), ``split_out=1`` by hand, ``repartition(1)``
               first; the best of the three is the bar to beat;
             * the library alone (cuDF / pandas): the data in one frame on the worker, one
               ``groupby(...).agg(...)`` timed inside the task with the device synchronized;
             * ``--explore``: gpuscale's route at other partition counts, to derive the rule;
             * ``--plans``: gpuscale's route with the other one-partition plan (tree or
               per-worker), to derive the family's ``groupby_concat_min_fraction``.

             Every answer is compared with gpuscale's (every group: counts and max exact, means
             to 1e-9); a disagreement is printed in the table.
``fixed``    every workload at its smallest size (the first size of workflows/auto.yaml, the
             smallest sizes: svd 20 k rows, groupby and merge 100 k; ``--fixed-spec
             workflows/library.yaml`` for the library's first sizes) on the warm
             session (``s.run``: timed repeats of the workload's compute, medians) against Dask's
             own floor on the same cluster: ``client.submit(f, x).result()`` and a 10-chunk
             ``da.ones(...).sum().compute()``; the ratio to the submit round trip.

    python workflows/shape_grid.py --backend gpu --gpus 0 --json grid.json     # on the GPU machine
    python workflows/shape_grid.py --smoke                                      # CPU, seconds
    python workflows/shape_grid.py --parts fixed --rounds 5                     # fixed costs alone
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
import statistics
import sys
import time

import dask
import dask.array as da
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import bench_vs_peer as peer  # noqa: E402  (the measuring and checking helpers, one copy)
import harness

import gpuscale  # noqa: E402
from gpuscale.runs import runner  # noqa: E402
from gpuscale.workloads import Context  # noqa: E402
from gpuscale.workloads import get as get_workload
from gpuscale.workloads.groupby import AGG, ROW_BYTES  # noqa: E402

FULL_ROWS = (10_000_000, 100_000_000, 400_000_000)
FULL_KEYS = (10, 1_000, 1_000_000, "half")
SMOKE_ROWS = (200_000, 1_000_000)
SMOKE_KEYS = (10, 1_000, "half")
EXPLORE = (1, 2, 4, 8, 16, 32)


def default_partitions(s, rows: int) -> int:
    """The ``groupby`` workload's partition count on this session (its rule, no flag)."""
    ctx = Context(s.family, s.spec, s.client)
    cls = get_workload("groupby")
    cls().plan(cls.Params(rows=rows, keys=10), ctx)
    return int(ctx.choices["partitions"]["value"])


def groupby_cell(
    s, rows: int, keys: int, rounds: int, explore: bool, plans: bool = False, once_over_s: float | None = None
) -> list[dict]:
    parts = default_partitions(s, rows)
    df = peer._groupby_data(s, rows, keys, parts)
    threads = s.spec.threads_per_worker  # as the groupby workload plans (one-thread workers: per-worker)
    plan = gpuscale.dataframe.groupby_agg(df, "key", AGG, groups=keys, rows=rows, threads=threads).decision
    sides = {
        "gpuscale default": lambda: (
            gpuscale.dataframe.groupby_agg(df, "key", AGG, groups=keys, rows=rows, threads=threads).result
        ),
        "plain, backend switched only": lambda: df.groupby("key").agg(AGG),
        "plain, split_out=1": lambda: df.groupby("key").agg(AGG, split_out=1),
        "plain, repartition(1)": lambda: df.repartition(npartitions=1).groupby("key").agg(AGG, split_out=1),
    }
    if plans:  # gpuscale's route with the other one-partition plan, on the same data and rounds
        for other in {"tree", "per-worker"} - {plan.value}:
            forced = dataclasses.replace(plan, value=other, numbers={**plan.numbers, "split_out": 1})
            sides[f"gpuscale route, {other} plan"] = lambda forced=forced: (
                gpuscale.dataframe.groupby_agg(df, "key", AGG, plan=forced).result
            )
    res = peer.measure(s, sides, rounds, peer.frame_host, peer.frame_same, once_over_s)
    alone = _alone(s, df, rounds)
    out = [
        {
            **r,
            "partitions": parts,
            "plan": plan.value
            if r["side"] == "gpuscale default"
            else r["side"].split(", ")[1].split()[0]
            if r["side"].startswith("gpuscale route,")
            else "",
        }
        for r in res
    ]
    g = next(r for r in out if r["side"] == "gpuscale default")["median_s"]
    out.append(
        {
            "side": f"{s.family.dataframe_module} alone",
            "median_s": alone,
            "vs_gpuscale": alone / g,
            "agrees": True,
            "partitions": 1,
            "plan": "",
        }
    )
    if explore:
        for n in EXPLORE:
            if n == parts or n > rows:
                continue
            d = peer._groupby_data(s, rows, keys, n)
            pl = gpuscale.dataframe.groupby_agg(d, "key", AGG, groups=keys, rows=rows).decision
            r = peer.measure(
                s,
                {
                    "gpuscale route": lambda: (
                        gpuscale.dataframe.groupby_agg(d, "key", AGG, groups=keys, rows=rows).result
                    )
                },
                rounds,
                peer.frame_host,
                peer.frame_same,
            )[0]
            out.append(
                {
                    **r,
                    "side": f"gpuscale route, {n} partitions",
                    "vs_gpuscale": r["median_s"] / g,
                    "partitions": n,
                    "plan": pl.value,
                }
            )
    return [{"rows": rows, "keys": keys, **r} for r in out]


def _alone(s, df, rounds: int) -> float:
    one = s.client.persist(df.repartition(npartitions=1))
    runner.timed(s.client, s.family, lambda: one)
    part = one.to_delayed()[0]
    times = []
    for _ in range(rounds + 1):
        fut = s.client.compute(dask.delayed(peer._alone)([part]))
        t, res = fut.result()
        times.append(t)
        del fut, res
    return statistics.median(times[1:])


FRAME_ROWS_FULL = (10_000_000, 50_000_000)
FRAME_ROWS_SMOKE = (200_000,)
FRAME_CASES = (("merge", {}), ("shuffle", {"method": "sort_values"}), ("shuffle", {"method": "set_index"}))


def _alone_frames(parts_a, parts_b, op: str):
    """The library alone on one worker: one frame (two for merge), the operation timed inside
    the task with the device synchronized."""
    from dask.dataframe.dispatch import concat

    a = concat(list(parts_a))
    b = concat(list(parts_b)) if parts_b else None
    peer._sync_here()
    t0 = time.perf_counter()
    if op == "merge":
        out = a.merge(b, on="key", how="inner")
    elif op == "sort_values":
        out = a.sort_values("key")
    else:  # Dask's set_index sorts: the library's equivalent
        out = a.sort_values("key").set_index("key")
    peer._sync_here()
    return time.perf_counter() - t0, len(out)


def frame_ops(s, rounds: int, smoke: bool) -> list[dict]:
    """merge / sort_values / set_index: ``s.run`` (defaults) against the library alone on the
    workload's own generated data (one frame on one worker); row counts compared."""
    rows_out = []
    for rows in FRAME_ROWS_SMOKE if smoke else FRAME_ROWS_FULL:
        for name, extra in FRAME_CASES:
            params = {"rows": rows, **extra}
            rec = s.run(name, repeat=rounds, warmup=1, write=False, audit=False, **params)
            cls = get_workload(name)
            p = cls.Params(**params)
            ctx = Context(s.family, s.spec, s.client)
            wl = cls()
            wl.plan(p, ctx)
            data = wl.generate(p, ctx)
            frames = [data["left"], data["right"]] if isinstance(data, dict) else [data]
            ones = [s.client.persist(f.repartition(npartitions=1)) for f in frames]
            runner.timed(s.client, s.family, lambda: ones[0])
            parts = [o.to_delayed()[0] for o in ones]
            op = extra.get("method", "merge")
            times, n = [], None
            for _ in range(rounds + 1):
                fut = s.client.compute(
                    dask.delayed(_alone_frames)([parts[0]], [parts[1]] if len(parts) > 1 else None, op)
                )
                t, n = fut.result()
                times.append(t)
                del fut
            alone = statistics.median(times[1:])
            rows_out.append(
                {
                    "workload": name,
                    "op": op,
                    "rows": rows,
                    "median_s": rec.median_s,
                    "valid": rec.valid,
                    "partitions": rec.choices.get("partitions", {}).get("value"),
                    "alone_s": alone,
                    "vs_alone": rec.median_s / alone,
                    "alone_rows": n,
                }
            )
    return rows_out


def print_frames(rows: list[dict]) -> None:
    print("\nmerge and shuffle: gpuscale run (defaults) vs the library alone (one frame, one call)")
    head = f"{'op':12} {'rows':>12} {'gpuscale':>9} {'alone':>9} {'ratio':>6}  valid"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['op']:12} {r['rows']:>12,} {r['median_s']:>9.4f} {r['alone_s']:>9.4f} {r['vs_alone']:>6.2f} "
            " "
            f"{'yes' if r['valid'] else 'NO'}"
        )


def _interval_text(seconds) -> str:
    return "Dask's own" if seconds is None else f"{seconds:g} s"


def _echo(x):
    return x


def fixed_costs(s, rounds: int, smoke: bool, spec_path: str | None = None) -> list[dict]:
    spec_path = spec_path or pathlib.Path(__file__).parent / ("tiny.yaml" if smoke else "auto.yaml")
    spec = yaml.safe_load(pathlib.Path(spec_path).read_text())

    def round_trip(client) -> float:
        trips = []
        for _ in range(rounds * 5 + 1):
            t0 = time.perf_counter()
            client.submit(_echo, len(trips), pure=False).result()
            trips.append(time.perf_counter() - t0)
        return statistics.median(trips[1:])

    submit = round_trip(s.client)
    # Dask's own client (its 10 ms / 2 ms stream intervals) on the same cluster
    from distributed import Client

    with Client(s.client.scheduler.address, security=s.client.security, set_as_default=False) as plain:
        plain_submit = round_trip(plain)
    sums = []
    for _ in range(rounds * 2 + 1):
        t0 = time.perf_counter()
        da.ones(1000, chunks=100).sum().compute()
        sums.append(time.perf_counter() - t0)
    rows = [
        {
            "workload": "client.submit(f, x).result()",
            "size": "this session's client",
            "median_s": submit,
            "vs_submit": 1.0,
            "vs_dask_submit": submit / plain_submit,
        },
        {
            "workload": "client.submit(f, x).result()",
            "size": "a plain distributed.Client",
            "median_s": plain_submit,
            "vs_submit": plain_submit / submit,
            "vs_dask_submit": 1.0,
        },
        {
            "workload": "da.ones(1000, chunks=100).sum()",
            "size": "10 chunks",
            "median_s": statistics.median(sums[1:]),
            "vs_submit": statistics.median(sums[1:]) / submit,
            "vs_dask_submit": statistics.median(sums[1:]) / plain_submit,
        },
    ]
    for name, w in spec["workloads"].items():
        size = dict(w["sizes"][0])
        params = {**(w.get("params") or {}), **size}
        params = {k: v for k, v in params.items() if k != "partitions"}  # defaults only
        for k, vals in (w.get("grid") or {}).items():
            params[k] = vals[0]
        try:
            rec = s.run(name, repeat=max(3, rounds), warmup=1, write=False, audit=False, **params)
            split = rec.info.get("time_split") or {}
            rows.append(
                {
                    "workload": name,
                    "size": ", ".join(f"{k}={v}" for k, v in size.items()),
                    "median_s": rec.median_s,
                    "vs_submit": rec.median_s / submit,
                    "vs_dask_submit": rec.median_s / plain_submit,
                    "compute_s": split.get("compute_s"),
                    "rest_s": split.get("other_s"),
                    "tasks": split.get("tasks"),
                    "valid": rec.valid,
                }
            )
        except Exception as e:  # noqa: BLE001 - a row that fails is a row of the table
            rows.append(
                {
                    "workload": name,
                    "size": str(size),
                    "median_s": math.nan,
                    "vs_submit": math.nan,
                    "error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}",
                }
            )
    return rows


def print_grid(rows: list[dict]) -> None:
    print(
        f"\ngroupby grid ({len({(r['rows'], r['keys']) for r in rows})} cells): median seconds; "
        "ratios are gpuscale default / other"
    )
    head = (
        f"{'rows':>12} {'keys':>11} {'parts':>5} {'plan':10} {'gpuscale':>9} {'best plain':>10} {'way':24} "
        f"{'alone':>9} {'/alone':>7} {'/plain':>7}  ok"
    )
    print(head)
    print("-" * len(head))
    for cell in sorted({(r["rows"], r["keys"]) for r in rows}):
        rs = [r for r in rows if (r["rows"], r["keys"]) == cell]
        g = next(r for r in rs if r["side"] == "gpuscale default")
        plain = min((r for r in rs if r["side"].startswith("plain")), key=lambda r: r["median_s"])
        alone = next(r for r in rs if r["side"].endswith("alone"))
        ok = all(r["agrees"] for r in rs)
        bad = [f"{r['side']}: {r.get('disagreement', '')}" for r in rs if not r["agrees"]]
        print(
            f"{cell[0]:>12,} {cell[1]:>11,} {g['partitions']:>5} {g['plan']:10} {g['median_s']:>9.4f} "
            f"{plain['median_s']:>10.4f} "
            f"{(plain['side'][7:] + (' (1 run)' if plain.get('runs') == 1 else ''))[:24]:24} "
            f"{alone['median_s']:>9.4f} "
            f"{g['median_s'] / alone['median_s']:>7.2f} {g['median_s'] / plain['median_s']:>7.2f}  "
            f"{'yes' if ok else 'NO ' + '; '.join(bad)}"
        )
        for r in rs:
            if r["side"].startswith("gpuscale route,"):
                print(f"{'':>25}{r['partitions']:>5} {r['plan']:10} {r['median_s']:>9.4f}  ({r['side']})")


def print_fixed(rows: list[dict], spec: str) -> None:
    print(
        f"\nfixed cost on a warm session: each workload at the first size of {spec} (median of its "
        "timed repeats) vs Dask's submit round trip"
    )
    print(
        "(x submit: this session's own round trip; x Dask's: a plain distributed.Client's on the same "
        "cluster;"
        " compute / rest: the run's time with a task computing on some worker / the rest, medians)"
    )
    head = (
        f"{'workload':34} {'size':34} {'median s':>9} {'x submit':>9} {'x Dask':>7} {'tasks':>6} "
        f"{'compute ms':>11} {'rest ms':>8}"
    )
    print(head)
    print("-" * len(head))

    def ms(v):
        return f"{v * 1e3:.1f}" if isinstance(v, (int, float)) else "-"

    for r in rows:
        print(
            f"{r['workload']:34} {r['size'][:34]:34} {r['median_s']:>9.4f} {r['vs_submit']:>9.1f} "
            f"{r.get('vs_dask_submit', math.nan):>7.1f} "
            f"{r.get('tasks') if r.get('tasks') is not None else '-':>6} "
            f"{ms(r.get('compute_s')):>11} {ms(r.get('rest_s')):>8}"
            + (f"  {r['error']}" if r.get("error") else "")
            + ("" if r.get("valid", True) else "  INVALID")
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_cluster(ap, "cpu", gpus=True)
    ap.add_argument(
        "--for",
        dest="collection",
        default=None,
        choices=("array", "dataframe"),
        help="lay the session's cluster out for this collection, like `run groupby` does "
        "(default: a session's layout)",
    )
    ap.add_argument("--smoke", action="store_true", help="CPU-sized grid (seconds)")
    ap.add_argument("--rows", default=None, help="comma-separated row counts")
    ap.add_argument("--keys", default=None, help="comma-separated key counts ('half': rows / 2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--explore", action="store_true", help="also gpuscale's route at other partition counts")
    ap.add_argument(
        "--plans",
        action="store_true",
        help="also gpuscale's route with the other one-partition plan (tree / per-worker)",
    )
    ap.add_argument("--parts", default="groupby,frames,fixed")
    ap.add_argument(
        "--fixed-spec",
        default=None,
        help="bench YAML whose first size of each workload the fixed table runs (default: "
        "workflows/auto.yaml, every workload at its smallest size; tiny.yaml with --smoke)",
    )
    ap.add_argument(
        "--max-bytes",
        type=float,
        default=None,
        help="skip cells whose data exceeds this many bytes (default: a quarter of the workers' memory)",
    )
    ap.add_argument(
        "--once-over",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="a plain-Dask side whose warm-up takes longer is timed by that one run "
        "(so the whole grid fits one call; default 20)",
    )
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args(argv)
    rows_list = [int(x) for x in a.rows.split(",")] if a.rows else (SMOKE_ROWS if a.smoke else FULL_ROWS)
    keys_list = [
        k if k == "half" else int(k)
        for k in (a.keys.split(",") if a.keys else (SMOKE_KEYS if a.smoke else FULL_KEYS))
    ]
    kw = {"backend": a.backend}
    if a.gpus:
        kw["gpus"] = a.gpus
    if a.collection:
        kw["collection"] = a.collection
    out = {"grid": [], "frames": [], "fixed": []}
    with gpuscale.session(**kw) as s:
        mem = sum(s.family.worker_memory(s.client).values())
        limit = a.max_bytes or mem / 4
        print(
            f"{s.family.name} session: {len(s.client.scheduler_info(n_workers=-1)['workers'])} worker(s) x "
            f"{s.spec.threads_per_worker} thread(s), "
            f"{mem / 2**30:.0f} GiB; cells over {limit / 2**30:.1f} GiB of data skipped; Dask's control "
            f"streams: {_interval_text(s.spec.choices['message_interval']['value'])} "
            "(cluster.message-interval)"
        )
        out["message_interval"] = s.spec.choices["message_interval"]
        from gpuscale.cluster import messages

        out["streams"] = messages.intervals(s.client)  # read off the real streams, not the plan
        print(f"control stream intervals in force (s): {out['streams']}")
        if "groupby" in a.parts:
            for rows in rows_list:
                for k in keys_list:
                    keys = rows // 2 if k == "half" else k
                    if rows * ROW_BYTES > limit:
                        print(f"skip {rows:,} x {keys:,}: {rows * ROW_BYTES / 2**30:.1f} GiB")
                        continue
                    t0 = time.perf_counter()
                    out["grid"] += groupby_cell(s, rows, keys, a.rounds, a.explore, a.plans, a.once_over)
                    print(f"cell {rows:,} rows x {keys:,} keys: {time.perf_counter() - t0:.1f} s", flush=True)
                    if a.json_path:
                        harness.write(a.json_path, "shape_grid", out)
            print_grid(out["grid"])
        if "frames" in a.parts:
            out["frames"] = frame_ops(s, a.rounds, a.smoke)
            print_frames(out["frames"])
            if a.json_path:
                harness.write(a.json_path, "shape_grid", out)
        if "fixed" in a.parts:
            out["fixed"] = fixed_costs(s, a.rounds, a.smoke, a.fixed_spec)
            out["fixed_spec"] = a.fixed_spec or ("tiny.yaml" if a.smoke else "auto.yaml")
            print_fixed(out["fixed"], pathlib.Path(out["fixed_spec"]).name)
    if a.json_path:
        harness.write(a.json_path, "shape_grid", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
