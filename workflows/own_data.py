"""Your own data, notebook style: data made on the CPU, switched with ``s.to_backend``, then the
tuned SVD and groupby routes, the runner on that data, and a trace of it all.

What a data scientist would type in a notebook, one cell per step:

1. NumPy matrix and pandas frame made on the host (as they would load them).
2. ``with gpuscale.session(backend=...) as s:`` and ``s.to_backend(...)`` for both.
3. ``gpuscale.linalg.svd(x)`` and ``gpuscale.dataframe.groupby_agg(df, ...)`` inside
   ``with s.trace(DIR):``, checked against NumPy / pandas on the host.
4. ``s.run("svd", data=x)`` and ``s.run("groupby", data=df, by=..., agg=...)``: timed,
   validated, recorded (the record names the data and its chunk / partition type).

Prints one table; exits 0 when every answer matched, every record is valid, the chunks had the
backend's type and the trace folder is complete.

    python workflows/own_data.py --backend gpu --trace /tmp/own-trace     # the GPU proof
    python workflows/own_data.py --backend cpu --rows 20000 --workers 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
import pandas as pd

import gpuscale
from gpuscale.data.inputs import type_name
from gpuscale.routes import dataframe as gdf
from gpuscale.routes import linalg


def chunk_type(collection) -> str:
    """The type of one computed block / partition (what the workers hold)."""
    import dask

    first = (
        collection.to_delayed().ravel()[0] if hasattr(collection, "blocks") else collection.to_delayed()[0]
    )
    return type_name(dask.compute(first)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--rows", type=int, default=2_000_000, help="matrix rows and frame rows")
    ap.add_argument("--cols", type=int, default=200)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--trace", default=None, help="new or empty folder for the trace (default: a temp dir)")
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--json", dest="json_path", default=None)
    a = ap.parse_args(argv)

    import tempfile

    trace_dir = a.trace or tempfile.mkdtemp(prefix="gpuscale-own-data-")
    rng = np.random.default_rng(0)
    # 1. host data, as loaded by the user (ragged row blocks on purpose below)
    matrix = rng.standard_normal((a.rows, a.cols))
    sales = pd.DataFrame(
        {
            "store": rng.integers(0, a.keys, a.rows),
            "price": rng.random(a.rows) * 100,
            "qty": rng.integers(1, 10, a.rows),
        }
    )
    ref_s = np.linalg.svd(matrix, compute_uv=False)
    ref_g = sales.groupby("store").agg({"price": ["mean", "max"], "qty": ["sum"]})

    rows: list[dict] = []
    with gpuscale.session(backend=a.backend, workers=a.workers) as s:
        # 2. switch what the user has to the session's backend
        x = s.to_backend(matrix, chunks=(a.rows // 7 + 1, a.cols))  # ragged last block
        df = s.to_backend(sales, npartitions=8)
        types = {"array chunks": chunk_type(x), "frame partitions": chunk_type(df)}
        # 3. the routes on the user's collections, traced
        with s.trace(trace_dir) as t:
            res = linalg.svd(x)
            s_got = np.asarray(gpuscale.backends.to_host(res.s.compute()))
            g = gdf.groupby_agg(df, "store", {"price": ["mean", "max"], "qty": "sum"})
            g_got = gpuscale.backends.to_host(g.result.compute()).sort_index()
        svd_err = float(np.abs(s_got - ref_s).max() / ref_s[0])
        gb_ok = bool(
            len(g_got) == len(ref_g)
            and (g_got[("qty", "sum")].to_numpy() == ref_g[("qty", "sum")].to_numpy()).all()
            and np.allclose(
                g_got[("price", "mean")].to_numpy(), ref_g[("price", "mean")].to_numpy(), rtol=1e-12
            )
            and (g_got[("price", "max")].to_numpy() == ref_g[("price", "max")].to_numpy()).all()
        )
        rows.append(
            {
                "step": "linalg.svd(x) in s.trace",
                "ok": svd_err <= 1e-10,
                "detail": f"route {res.route.name}: {res.route.reason}; "
                f"max |s - numpy| / s_max = {svd_err:.2e}",
            }
        )
        rows.append(
            {
                "step": "dataframe.groupby_agg(df) in s.trace",
                "ok": gb_ok,
                "detail": f"plan {g.plan.strategy}, split_out {g.plan.split_out}; {len(g_got):,} groups "
                f"{'equal pandas' if gb_ok else 'DIFFER from pandas'}",
            }
        )
        summary = t.summary
        files = sorted(p.name for p in pathlib.Path(trace_dir).iterdir())
        complete = all(
            f in files
            for f in ("summary.json", "trace.json", "comm.json", "performance-report.html", "index.html")
        )
        rows.append(
            {
                "step": "trace folder",
                "ok": complete and summary.tasks > 0,
                "detail": f"{trace_dir}: {', '.join(files)}; {summary.tasks} tasks, "
                f"wall {summary.wall_s:.3f} s, "
                f"compute {summary.compute_s:.3f} s, transfer {summary.transfer_s:.3f} s",
            }
        )
        # 4. the runner on the user's data
        r1 = s.run("svd", data=x, results_dir=a.results_dir, repeat=3)
        r2 = s.run(
            "groupby",
            data=df,
            by="store",
            agg={"price": ["mean", "max"], "qty": "sum"},
            results_dir=a.results_dir,
            repeat=3,
        )
        for r in (r1, r2):
            d = r.data
            rows.append(
                {
                    "step": f's.run("{r.workload}", data=...)',
                    "ok": bool(r.valid),
                    "detail": f"median {r.median_s:.4f} s; {d.get('source')} {d.get('chunk_type') or ''} "
                    f"{d.get('shape') or d.get('rows')}; validation {r.validation.get('method')}; "
                    f"audit {'clean' if (r.audit or {}).get('clean') else 'NOT clean'}",
                }
            )
        family = s.family
    want = {"array chunks": family.array_module, "frame partitions": family.dataframe_module}
    for what, typ in types.items():
        rows.append(
            {
                "step": f"s.to_backend: {what}",
                "ok": typ.split(".")[0] == want[what],
                "detail": f"{typ} (the {family.name} family's is {want[what]})",
            }
        )

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    tab = Table(
        title=f"your own data on the {family.name} family ({a.rows:,} x {a.cols} matrix, "
        f"{a.rows:,}-row frame, {a.keys:,} keys)",
        title_justify="left",
    )
    for col in ("step", "ok", "detail"):
        tab.add_column(col)
    for r in rows:
        tab.add_row(escape(r["step"]), "yes" if r["ok"] else "NO", escape(r["detail"]))
    Console(width=200).print(tab)
    ok = all(r["ok"] for r in rows)
    if a.json_path:
        pathlib.Path(a.json_path).write_text(
            json.dumps(
                {
                    "family": family.name,
                    "types": types,
                    "rows": rows,
                    "trace": trace_dir,
                    "ok": ok,
                    "records": [r1.path, r2.path],
                },
                indent=2,
                default=str,
            )
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
