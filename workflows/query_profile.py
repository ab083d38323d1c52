"""Where a user query's time goes: the client's expression (build, optimize), the cluster's
tasks, and the library alone.

``user_queries.py`` times each query end to end; this script splits one warm run of chosen
queries into the parts a change can aim at, on each side asked:

* build: ``dd.read_parquet`` of the tables the query names and the user's code;
* optimize: Dask's expression optimizer (on cuDF, each merge's metadata is computed by merging
  small cuDF frames on the device);
* compute: ``dask.compute`` of the optimized expression, with ``busy`` (the tasks' own compute
  time, from distributed's task stream), the number of tasks and the three task kinds that
  took longest (the first run's);
* the library alone (``cudf``/``pandas`` side): the same code on whole frames read beforehand,
  no Dask (the floor of any Dask plan), and Polars' GPU engine on the query's SQL.

Sides (``--sides``), opened as ``user_queries.py`` opens them: ``gpuscale`` (a session of
``--backend``), ``dask`` (plain Dask: ``dask-cpu``, or ``dask-cudf`` for the GPU), ``alone`` (cuDF
or pandas alone), ``polars-gpu``, ``polars-cpu`` and ``duckdb``; and ``route``: a CPU session's
engine route split into build (the user's code, ``dd.read_parquet`` included), translate (the
Dask plan to Polars'), collect (Polars' streaming engine in this process) and answer (Dask's
answer in pandas), beside ``polars-cpu``'s hand-written plan. Data: ``user_queries.py``'s, made
when missing.

    python workflows/query_profile.py --backend gpu --data /tmp/qdata          # TPC-H SF10 + H2O 1e7
    python workflows/query_profile.py --backend cpu --smoke --json prof.json    # seconds, on a CPU
    python workflows/query_profile.py --backend cpu --sides route,polars-cpu --queries "tpch:q1,q11,q19"
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import statistics
import sys
import tempfile
import time

import dask
import harness
import queries
import user_queries
from distributed import default_client
from user_queries import Read, open_side, paths

DEFAULT_QUERIES = "tpch:q1,q3,q5,q10,q18;h2o-join:j1,j5;h2o-groupby:q1,q10"


def chosen(spec: str, sizes: dict[str, str], folder: pathlib.Path, layout: str = "multi"):
    """(suite, size, data folder, query) for ``suite:q,q;suite:q`` (data made when missing, in
    ``user_queries.py``'s folders; ``layout``: TPC-H's, ``multi`` or ``single``)."""
    out = []
    for part in spec.split(";"):
        name, _, names = part.partition(":")
        suite = queries.suites()[name]
        size = sizes[name]
        single = name == "tpch" and layout == "single"
        data = folder / (f"{name}-{size}" + ("-single" if single else ""))
        if not (data / ".complete").exists():
            data.mkdir(parents=True, exist_ok=True)
            if name == "tpch":
                suite.make(data, float(size), layout)
            else:
                suite.make(data, int(float(size)))
            (data / ".complete").write_text("")
        out += [(suite, size, data, q) for q in suite.queries if q.name in names.split(",")]
    return out


def _split(client, q, tables) -> dict[str, float]:
    """One run of ``q``, split into build, optimize and compute (tasks' busy time, count)."""
    from dask.utils import key_split
    from distributed import get_task_stream

    t0 = time.perf_counter()
    out = q.dask(Read(tables))
    t1 = time.perf_counter()
    if not dask.is_dask_collection(out):
        return {"build_s": t1 - t0, "optimize_s": 0.0, "compute_s": 0.0, "busy_s": 0.0, "tasks": 0}
    optimized = out.optimize()
    t2 = time.perf_counter()
    with get_task_stream(client) as ts:
        dask.compute(optimized)
    t3 = time.perf_counter()
    by_prefix: dict[str, float] = {}
    for d in ts.data:
        for s in d["startstops"]:
            if s["action"] == "compute":
                prefix = key_split(d["key"])
                by_prefix[prefix] = by_prefix.get(prefix, 0.0) + s["stop"] - s["start"]
    busy = sum(by_prefix.values())
    return {
        "slowest": sorted(by_prefix.items(), key=lambda kv: -kv[1])[:3],
        "build_s": t1 - t0,
        "optimize_s": t2 - t1,
        "compute_s": t3 - t2,
        "busy_s": busy,
        "tasks": len(ts.data),
    }


def dask_side(client, cases, repeat: int, warmup: int) -> dict:
    out = {}
    for suite, size, data, q in cases:
        runs = [_split(client, q, paths(suite, data)) for _ in range(warmup + repeat)][warmup:]
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "slowest"}
        row["slowest"] = runs[0]["slowest"]
        row["total_s"] = statistics.median(r["build_s"] + r["optimize_s"] + r["compute_s"] for r in runs)
        out[f"{suite.name}|{size}|{q.name}"] = row
    return out


def alone_side(module: str, cases, repeat: int, warmup: int) -> dict:
    """The user's code on whole frames of ``module`` (cudf or pandas), read before the clock."""
    lib = __import__(module)
    out = {}
    for suite, size, data, q in cases:
        out[f"{suite.name}|{size}|{q.name}"] = _alone(lib, q, paths(suite, data), repeat, warmup)
    return out


def _alone(lib, q, files: dict[str, str], repeat: int, warmup: int) -> dict:
    tables = {t: lib.read_parquet(p) for t, p in files.items()}
    try:
        times, _ = harness.bench_once(lambda: _synced(q.dask(tables)), repeat, warmup)
        return {"total_s": statistics.median(times)}
    except Exception as e:  # noqa: BLE001 - a query the library alone cannot run is a row
        return harness.error_cell(e)


def _synced(x):
    with contextlib.suppress(ImportError):
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
    return x


def route_side(cases, repeat: int, warmup: int) -> dict:
    """The CPU engine route's parts, each query's runs one after another (a query the route
    does not translate is an error row)."""
    out = {}
    for suite, size, data, q in cases:
        key = f"{suite.name}|{size}|{q.name}"
        try:
            runs = [_route_split(q, paths(suite, data)) for _ in range(warmup + repeat)][warmup:]
        except Exception as e:  # noqa: BLE001 - an untranslated query is a row
            out[key] = harness.error_cell(e)
            continue
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row["total_s"] = statistics.median(sum(r.values()) for r in runs)
        out[key] = row
    return out


def _route_split(q, tables) -> dict[str, float]:
    import polars as pl

    from gpuscale.engines import answer
    from gpuscale.engines.from_dask import Translator

    t0 = time.perf_counter()
    out = q.dask(Read(tables))
    t1 = time.perf_counter()
    if not dask.is_dask_collection(out):
        return {"build_s": t1 - t0, "translate_s": 0.0, "collect_s": 0.0, "answer_s": 0.0}
    plan = answer.plan(Translator().lower(out.expr), out._meta)
    t2 = time.perf_counter()
    (result,) = pl.collect_all([plan.lf], engine="streaming")
    t3 = time.perf_counter()
    answer.build(result, plan)
    t4 = time.perf_counter()
    return {"build_s": t1 - t0, "translate_s": t2 - t1, "collect_s": t3 - t2, "answer_s": t4 - t3}


def engine_side(name: str, cases, repeat: int, warmup: int) -> dict:
    """An engine of ``user_queries.py`` (``polars-gpu``, ``polars-cpu``, ``duckdb``) on the
    query's Polars plan or SQL."""
    out = {}
    with open_side(name) as run:
        for suite, size, data, q in cases:
            try:
                times, _ = harness.bench_once(lambda: run(q, suite, data), repeat, warmup)
                out[f"{suite.name}|{size}|{q.name}"] = {"total_s": statistics.median(times)}
            except Exception as e:  # noqa: BLE001 - a query the engine refuses is a row
                out[f"{suite.name}|{size}|{q.name}"] = harness.error_cell(e)
    return out


ENGINES = ("polars-gpu", "polars-cpu", "duckdb")
"""Sides that are another engine on the query's Polars plan or SQL (:func:`engine_side`)."""
SIDES = {
    "gpuscale": {"cpu": "gpuscale-cpu", "gpu": "gpuscale-gpu"},
    "dask": {"cpu": "dask-cpu", "gpu": "dask-cudf"},
}
"""This script's Dask sides as ``user_queries.py`` names them (it opens them)."""


def table(d: dict) -> str:
    sides = list(d["sides"])
    head = f"{'query':18s}" + "".join(f"{s:>12s}" for s in sides) + "   parts of the first side's time"
    lines = [
        "median of the warm runs, seconds; parts: a Dask side's build + optimize (client) + compute "
        "(busy: the tasks), the route's build + translate + collect + answer",
        head,
    ]
    first = sides[0]
    for key in d["sides"][first]:
        cells = [d["sides"][s].get(key, {}) for s in sides]
        row = f"{key.replace('|', ' '):18s}" + "".join(
            f"{c['total_s']:12.3f}" if "total_s" in c else f"{'E':>12s}" for c in cells
        )
        c = d["sides"][first][key]
        if "translate_s" in c:
            row += (
                f"   build {c['build_s']:.3f} translate {c['translate_s']:.3f} collect {c['collect_s']:.3f}"
                f" answer {c['answer_s']:.3f}"
            )
        if "optimize_s" in c:
            row += (
                f"   build {c['build_s']:.3f} optimize {c['optimize_s']:.3f} compute {c['compute_s']:.3f}"
                f" (busy {c['busy_s']:.3f}, {c['tasks']:.0f} tasks)"
            )
            if c.get("slowest"):
                row += " slowest: " + ", ".join(f"{k} {v:.3f}" for k, v in c["slowest"])
        lines.append(row)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="gpu")
    ap.add_argument(
        "--sides",
        default=None,
        help="comma-separated, from gpuscale, dask, alone, route, polars-gpu, polars-cpu, duckdb, or a "
        "Dask side of user_queries.py with its options (gpuscale-gpu:engine=dask)",
    )
    ap.add_argument("--queries", default=DEFAULT_QUERIES, help="suite:q,q;suite:q,... (default: %(default)s)")
    ap.add_argument("--h2o-rows", default="1e7")
    ap.add_argument("--tpch-scale", default="10")
    ap.add_argument("--tpch-layout", choices=("multi", "single"), default="multi")
    ap.add_argument("--data", default=None, help="user_queries.py's data folder (default: a temporary one)")
    ap.add_argument("--smoke", action="store_true", help="tiny data (H2O 1e4 rows, TPC-H 0.01), 1 run")
    harness.add_common(ap, repeat=3, warmup=1)
    a = ap.parse_args(argv)
    if a.smoke:
        a.h2o_rows, a.tpch_scale, a.repeat = "1e4", "0.01", 1
    default = "gpuscale,dask,alone" + (",polars-gpu" if a.backend == "gpu" else "")
    sides = (a.sides or default).split(",")
    sizes = {"tpch": a.tpch_scale, "h2o-join": a.h2o_rows, "h2o-groupby": a.h2o_rows}
    with contextlib.ExitStack() as stack:
        folder = pathlib.Path(
            a.data or stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscale-prof-"))
        )
        cases = chosen(a.queries, sizes, folder, a.tpch_layout)
        d = {"backend": a.backend, "repeat": a.repeat, "warmup": a.warmup, "sides": {}}
        for side in sides:
            if side in ENGINES:
                d["sides"][side] = engine_side(side, cases, a.repeat, a.warmup)
            elif side.split(":")[0] in SIDES or side.split(":")[0] in user_queries.SIDES:
                base, _, variant = side.partition(":")
                name = SIDES[base][a.backend] if base in SIDES else base
                with open_side(name + (f":{variant}" if variant else "")):
                    d["sides"][side] = dask_side(default_client(), cases, a.repeat, a.warmup)
            elif side == "alone":
                d["sides"][side] = alone_side(
                    "cudf" if a.backend == "gpu" else "pandas", cases, a.repeat, a.warmup
                )
            elif side == "route":
                d["sides"][side] = route_side(cases, a.repeat, a.warmup)
            else:
                raise SystemExit(
                    f"unknown side {side!r}: choose from gpuscale, dask, alone, route, polars-gpu, "
                    "polars-cpu, duckdb"
                )
    print(table(d))
    if a.json:
        harness.write(a.json, "query_profile", d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
