"""Where a run's fixed cost goes: one round trip split into its hops, at several stream intervals.

The smallest runs cost a few Dask round trips each. This script times the hops of
``client.submit(f, x).result()`` from timestamps taken on one host (one clock): the client's
submit call, the task's start and end inside the worker, the moment the client learns the
result is in memory, and the moment ``result()`` has it. It also times a chain of dependent
tasks (one worker -> scheduler -> worker hop each), plain Dask's ``da.ones(1000,
chunks=100).sum()``, and gpuscale runs at their smallest sizes; all at every interval asked
for, set on every batched stream of the running cluster (client, scheduler, workers).

    python workflows/round_trip.py --backend gpu --gpus 0 --intervals dask,0.002,0.0005,0
    python workflows/round_trip.py --backend cpu --intervals 0.002,0 --runs groupby:rows=100000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import dask.array as da
import harness
from distributed import Client

import gpuscale
from gpuscale.cluster import messages


def _stamp(x):
    t = time.time()
    return x, t, time.time()


def _next(prev):
    return prev + 1


def _set_scheduler(seconds: float, dask_scheduler=None) -> None:
    for s in list(dask_scheduler.stream_comms.values()) + list(dask_scheduler.client_comms.values()):
        s.interval = seconds


def set_everywhere(client, seconds: float | None) -> None:
    """Every batched stream of the running cluster at ``seconds`` (None: Dask's own)."""
    d = messages.DASK_DEFAULTS
    client.scheduler_comm.interval = d["client -> scheduler"] if seconds is None else seconds
    client.run_on_scheduler(_set_scheduler, d["scheduler -> worker"] if seconds is None else seconds)
    messages.apply_workers(client, d["worker -> scheduler"] if seconds is None else seconds)
    if seconds is None:  # the scheduler -> client stream has its own default
        client.run_on_scheduler(
            messages._scheduler_to_client, client_id=client.id, seconds=d["scheduler -> client"]
        )


def hops(client, n: int) -> dict:
    rows = []
    for i in range(n + 1):
        done = threading.Event()
        seen = {}
        t0 = time.time()
        f = client.submit(_stamp, i, pure=False)
        t1 = time.time()
        f.add_done_callback(lambda _f: (seen.setdefault("t", time.time()), done.set()))
        _, start, end = f.result()
        t4 = time.time()
        done.wait(5)
        rows.append(
            {
                "submit_call": t1 - t0,
                "to_task_start": start - t0,
                "task": end - start,
                "task_end_to_client_knows": seen.get("t", t4) - end,
                "knows_to_result": t4 - seen.get("t", t4),
                "total": t4 - t0,
            }
        )
    rows = rows[1:]
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def chain(client, length: int, n: int) -> float:
    times = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        f = client.submit(_next, 0, pure=False)
        for _ in range(length - 1):
            f = client.submit(_next, f, pure=False)
        f.result()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def ones_sum(n: int) -> float:
    times = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        da.ones(1000, chunks=100).sum().compute()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_cluster(ap, "cpu", gpus=True)
    ap.add_argument("--intervals", default="dask,0.002,0", help="'dask' or seconds, comma-separated")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument(
        "--runs",
        default="groupby:rows=10000000,keys=1000;svd:rows=200000,cols=1000;"
        "map_overlap:n=4000;stencil:n=4000;merge:rows=2000000",
        help="gpuscale runs 'workload:k=v,k=v;...' timed at every interval ('' for none)",
    )
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args(argv)
    kw = {"backend": a.backend}
    if a.gpus:
        kw["gpus"] = a.gpus
    runs = []
    for item in filter(None, a.runs.split(";")):
        name, _, params = item.partition(":")
        runs.append(
            (
                name,
                {
                    k: int(v) if v.isdigit() else v
                    for k, v in (x.split("=") for x in filter(None, params.split(",")))
                },
            )
        )
    out = {"backend": a.backend, "rows": []}
    with gpuscale.session(**kw) as s:
        c = s.client
        print(
            f"{s.family.name}: {len(c.scheduler_info(n_workers=-1)['workers'])} worker(s) x "
            f"{s.spec.threads_per_worker} thread(s)",
            flush=True,
        )
        for wl, params in runs:  # warm every workload once first (imports, kernels, pools)
            s.run(wl, repeat=1, warmup=1, write=False, audit=False, **params)
        for iv in a.intervals.split(","):
            seconds = None if iv == "dask" else float(iv)
            set_everywhere(c, seconds)
            row = {
                "interval": iv,
                "streams": messages.intervals(c),
                "hops": hops(c, a.rounds),
                "chain_10_s": chain(c, 10, max(3, a.rounds // 4)),
                "ones_sum_s": ones_sum(max(3, a.rounds // 4)),
            }
            with Client(c.scheduler.address, security=c.security, set_as_default=False) as plain:
                plain.scheduler_comm.interval = (
                    messages.DASK_DEFAULTS["client -> scheduler"] if seconds is None else seconds
                )
                row["plain_client_hops"] = hops(plain, a.rounds)
            row["runs"] = {}
            for wl, params in runs:
                rec = s.run(wl, repeat=max(5, a.rounds // 2), warmup=1, write=False, audit=False, **params)
                split = rec.info.get("time_split") or {}
                row["runs"][f"{wl} {params}"] = {
                    "median_s": rec.median_s,
                    "valid": rec.valid,
                    **{k: split.get(k) for k in ("compute_s", "transfer_s", "other_s", "tasks")},
                }
            out["rows"].append(row)
            h = row["hops"]
            print(f"\ninterval {iv}: streams {row['streams']}")
            print("  submit -> result " + " | ".join(f"{k} {v * 1e3:.2f} ms" for k, v in h.items()))
            print(
                "  plain client     "
                + " | ".join(f"{k} {v * 1e3:.2f} ms" for k, v in row["plain_client_hops"].items())
            )
            print(
                f"  chain of 10 dependent tasks {row['chain_10_s'] * 1e3:.1f} ms; da.ones(1000, "
                "chunks=100).sum() "
                f"{row['ones_sum_s'] * 1e3:.1f} ms"
            )
            for k, v in row["runs"].items():
                print(
                    f"  {k:50} {v['median_s'] * 1e3:8.2f} ms  (compute {(v['compute_s'] or 0) * 1e3:.2f} ms, "
                    f"other {(v['other_s'] or 0) * 1e3:.2f} ms, {v['tasks']} tasks)  valid {v['valid']}"
                )
            if a.json_path:
                harness.write(a.json_path, "round_trip", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
