"""gpuscale against hand-written plain Dask, in one process, on the same cluster and data.

For SVD and groupby it times, alternating in every round:

* ``gpuscale``: exactly what ``gpuscale run`` times (the workload's ``compute`` through the
  route in gpuscale.linalg / gpuscale.dataframe, persisted, waited for, devices synchronized);
* ``plain, same algorithm``: the same algorithm written by hand with plain Dask (a one-pass
  Gram + eigvalsh for SVD; ``groupby.agg`` with the same split_out / split_every for groupby),
  so the ratio is gpuscale's overhead;
* ``plain, as users write it``: ``da.linalg.svd(x)`` and ``df.groupby(key).agg(spec)`` with
  Dask's defaults (the naive backend switch), so the ratio is what the tuning buys.

Every answer is checked against the gpuscale answer (singular values to 1e-8 relative,
groupby frames exactly / means to 1e-9). Before every timing the previous result is released
and the script waits until the scheduler has forgotten it, so no side times a cached result.
Cluster start-up and data generation are excluded (both sides share them).

    python workflows/compare_plain_dask.py                      # CPU, small sizes
    python workflows/compare_plain_dask.py --backend gpu --size large --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import sys

import dask.array as da
import harness
import numpy as np

import gpuscale
from gpuscale import workloads
from gpuscale.backends import to_host
from gpuscale.runs import runner
from gpuscale.workloads.groupby import AGG

SIZES = {
    "small": {"svd": {"rows": 400_000, "cols": 100}, "groupby": {"rows": 4_000_000, "keys": 100_000}},
    "large": {"svd": {"rows": 2_000_000, "cols": 1000}, "groupby": {"rows": 100_000_000, "keys": 1_000_000}},
}


def _eigvalsh_desc(g):
    return np.sqrt(np.maximum(np.linalg.eigvalsh(g)[::-1], 0))


def plain_svd_same(x):
    """A one-pass Gram SVD as a Dask user would write it by hand."""
    g = x.T @ x
    return g.map_blocks(_eigvalsh_desc, chunks=((x.shape[1],),), drop_axis=1, dtype=x.dtype)


def plain_svd_naive(x):
    _, s, _ = da.linalg.svd(x)
    return s


def _plain_partial(parts):
    import dask.dataframe as dd

    frame = dd.dispatch.concat(list(parts))
    g = frame.groupby("key", sort=False).agg({"int64": ["max", "count"], "float64": ["sum", "count"]})
    g.columns = ["max", "count", "sum", "n"]
    return g


def _plain_combine(partials):
    import dask.dataframe as dd

    g = (
        dd.dispatch.concat(list(partials))
        .groupby(level=0)
        .agg({"max": "max", "count": "sum", "sum": "sum", "n": "sum"})
    )
    out = g[["max", "count"]].copy()
    out["mean"] = g["sum"] / g["n"]
    import pandas as pd

    out.columns = pd.MultiIndex.from_tuples([("int64", "max"), ("int64", "count"), ("float64", "mean")])
    return out


def _plain_whole(parts):
    import dask.dataframe as dd

    return dd.dispatch.concat(list(parts)).groupby("key", sort=False).agg(AGG)


def plain_groupby_concat(df, nworkers):
    """Concatenate runs of partitions, aggregate each once, combine: by hand with dask.delayed
    (on one worker: concatenate everything and aggregate once, one task)."""
    import dask
    import dask.dataframe as dd

    parts = df.to_delayed()
    if nworkers == 1:
        return dd.from_delayed(
            [dask.delayed(_plain_whole)(parts)], verify_meta=False, meta=_plain_whole([df._meta])
        )
    size = -(-len(parts) // nworkers)
    partials = [dask.delayed(_plain_partial)(parts[i : i + size]) for i in range(0, len(parts), size)]
    return dd.from_delayed(
        [dask.delayed(_plain_combine)(partials)],
        verify_meta=False,
        meta=_plain_combine([_plain_partial([df._meta])]),
    )


def plain_groupby_same(df, plan, nworkers):
    if plan["strategy"] == "per-worker":
        return plain_groupby_concat(df, nworkers)
    kw = {"split_out": plan["split_out"], "split_every": plan["split_every"]}
    if plan["shuffle_method"]:
        kw["shuffle_method"] = plan["shuffle_method"]
    return df.groupby("key").agg(AGG, **kw)


def plain_groupby_naive(df):
    return df.groupby("key").agg(AGG)


def _host_s(x):
    return np.asarray(to_host(x.compute()), dtype=np.float64)


def _host_frame(df):
    return to_host(df.compute()).sort_index()


def _same_frames(a, b) -> bool:
    if not a.index.equals(b.index):
        return False
    exact = all((a[c].to_numpy() == b[c].to_numpy()).all() for c in [("int64", "max"), ("int64", "count")])
    m1, m2 = a[("float64", "mean")].to_numpy(), b[("float64", "mean")].to_numpy()
    return exact and bool(np.allclose(m1, m2, rtol=1e-9, atol=0))


def compare(s, name: str, params: dict, plain: dict, rounds: int, check) -> list[dict]:
    """Time gpuscale and each plain variant, alternating, on the workload's own data."""
    cls = workloads.get(name)
    wl = cls()
    p = cls.parse(params)
    ctx = workloads.Context(s.family, s.spec, s.client)
    wl.plan(p, ctx)
    _, data = runner.timed(s.client, s.family, lambda: wl.generate(p, ctx))
    baseline = runner.task_count(s.client)
    info = {}

    def gpuscale_side():
        out = wl.compute(data, p, ctx)
        info.update(out.info)
        return out.collections

    sides = {"gpuscale": gpuscale_side, **{k: (lambda f=f: f(data, info)) for k, f in plain.items()}}
    times = {k: [] for k in sides}
    answers = {}
    for r in range(rounds + 1):  # round 0 warms every side up and is not counted
        for label, build in sides.items():
            runner.settle(s.client, baseline)
            t, out = runner.timed(s.client, s.family, build)
            if r:
                times[label].append(t)
            if r == rounds:
                answers[label] = check.host(out)
            del out
    ref = answers["gpuscale"]
    rows = []
    g_med = statistics.median(times["gpuscale"])
    for label, ts in times.items():
        med = statistics.median(ts)
        rows.append(
            {
                "case": name,
                "side": label,
                "median_s": med,
                "times_s": ts,
                "ratio_to_gpuscale": med / g_med,
                "agrees": check.same(answers[label], ref),
                "params": {**params, **{k: v["value"] for k, v in ctx.choices.items()}},
                "plan": (info.get("plan") or {}).get("strategy") or info.get("route", {}).get("name"),
            }
        )
    return rows


class SvdCheck:
    @staticmethod
    def host(out):
        return _host_s(out["s"] if isinstance(out, dict) else out)

    @staticmethod
    def same(a, b) -> bool:
        return a.shape == b.shape and float(np.abs(a - b).max()) <= 1e-8 * float(b[0])


class GroupbyCheck:
    @staticmethod
    def host(out):
        return _host_frame(out["result"] if isinstance(out, dict) else out)

    same = staticmethod(_same_frames)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, "auto", protocol=True, workers=True)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (plus one warm-up round)")
    ap.add_argument("--cases", default="svd,groupby")
    ap.add_argument("--json", dest="json_path", default=None, help="also write the rows as JSON here")
    a = ap.parse_args(argv)

    cases = a.cases.split(",")
    rows: list[dict] = []
    with gpuscale.session(a.backend, a.protocol, workers=a.workers) as s:
        if "svd" in cases:
            rows += compare(
                s,
                "svd",
                SIZES[a.size]["svd"],
                {
                    "plain, same algorithm (Gram + eigvalsh)": lambda d, i: plain_svd_same(d["x"]),
                    "plain, as users write it (da.linalg.svd)": lambda d, i: plain_svd_naive(d["x"]),
                },
                a.rounds,
                SvdCheck,
            )
        if "groupby" in cases:
            rows += compare(
                s,
                "groupby",
                SIZES[a.size]["groupby"],
                {
                    "plain, same plan (by hand)": lambda d, i: plain_groupby_same(
                        d, i["plan"], len(s.client.nthreads())
                    ),
                    "plain, as users write it (groupby.agg defaults)": lambda d, i: plain_groupby_naive(d),
                },
                a.rounds,
                GroupbyCheck,
            )
        device = s.spec.cls
        family = s.family.name

    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"gpuscale vs plain Dask on {family} ({device}), size {a.size}, "
        f"median of {a.rounds} alternating rounds",
        title_justify="left",
    )
    for col in ("case", "side", "median", "vs gpuscale", "agrees"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["case"],
            r["side"],
            f"{r['median_s'] * 1e3:.1f} ms",
            f"{r['ratio_to_gpuscale']:.3f}x",
            "yes" if r["agrees"] else "NO",
        )
    Console().print(t)
    overhead = {
        r["case"]: 1 / r["ratio_to_gpuscale"] - 1 for r in rows if r["side"].startswith("plain, same")
    }
    Console().print(
        "gpuscale overhead vs the same algorithm in plain Dask: "
        + ", ".join(f"{k} {v * 100:+.1f}%" for k, v in overhead.items())
    )
    if a.json_path:
        harness.write(
            a.json_path,
            "compare_plain_dask",
            {
                "backend": a.backend,
                "family": family,
                "size": a.size,
                "rows": rows,
                "versions": gpuscale.machine.versions() if hasattr(gpuscale, "machine") else {},
            },
        )
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
