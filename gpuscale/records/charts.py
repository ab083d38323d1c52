"""Charts of a bench table (matplotlib, Agg: ``Figure`` objects, no pyplot state, no display).

* :func:`speedup`: per workload and size, the host family's median over the device family's
  (e.g. CPU / GPU), bars on a log scale labelled with the size; only when the table holds
  both a host family and a device family (``Family.memory``).
* :func:`time_vs_size`: median time against the data size (the workload's memory estimate),
  log-log, one line per backend / protocol / workers, one panel per workload.
* :func:`spread`: every timed repeat of every case (points) with its median (a bar), log scale.

Each returns the Figure (its axes carry the labels); :func:`draw_all` writes the PNGs.
"""

from __future__ import annotations

import math
import os
import pathlib
from typing import TYPE_CHECKING

from .. import atomic, backends

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

CHARTS = {"speedup": "speedup.png", "time_vs_size": "time_vs_size.png", "spread": "spread.png"}


def _ran(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["median_s"].notna()]


def _figure(width: float, height: float) -> Figure:
    """A new Figure of ``width`` x ``height`` inches with constrained layout (matplotlib is
    imported here, on the first chart drawn)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def speedup_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """(workload, size, protocol, host family, device family, host_s, device_s, speedup): the
    fastest validated case of each side."""
    ran = _ran(frame)
    ran = ran[ran["valid"].fillna(False).astype(bool)].copy()
    memory = {fam.name: fam.memory for fam in backends.families()}
    ran["memory"] = [memory.get(f) for f in ran["family"]]
    out = []
    for (wl, size, proto), g in ran.groupby(["workload", "size", "protocol"], sort=False):
        host, dev = g[g["memory"] == "host"], g[g["memory"] == "device"]
        if host.empty or dev.empty:
            continue
        h, d = host.loc[host["median_s"].idxmin()], dev.loc[dev["median_s"].idxmin()]
        out.append(
            {
                "workload": wl,
                "size": size,
                "protocol": proto,
                "host": h["family"],
                "device": d["family"],
                "host_s": h["median_s"],
                "device_s": d["median_s"],
                "speedup": h["median_s"] / d["median_s"],
            }
        )
    import pandas as pd

    return pd.DataFrame(out)


WIDTH = 7.5
"""Inches: a chart of one row per case reads at a page's width (825 px at the 110 dpi they are
saved at); it grows downward, :data:`ROW` per case."""
ROW = 0.26


def _rows_figure(n: int) -> Figure:
    return _figure(WIDTH, 1.4 + ROW * n)


def speedup(frame: pd.DataFrame) -> Figure | None:
    rows = speedup_rows(frame)
    if rows.empty:
        return None
    fig = _rows_figure(len(rows))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]  # the first case on top
    bars = ax.barh(ys, rows["speedup"], color=["tab:green" if s >= 1 else "tab:red" for s in rows["speedup"]])
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", lw=1)
    ax.set_yticks(ys, [f"{w} {s}" for w, s in zip(rows["workload"], rows["size"])], fontsize=7)
    ax.bar_label(
        bars, labels=[f"{s:.0f}x" if s >= 10 else f"{s:.2g}x" for s in rows["speedup"]], fontsize=7, padding=2
    )
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_ylabel("workload and size")
    ax.set_xlabel(f"speedup ({rows['host'].iloc[0]} median / {rows['device'].iloc[0]} median, log scale)")
    ax.set_title("speedup per workload (right of 1: the device family is faster)", fontsize=10)
    ax.margins(x=0.12)
    return fig


def time_vs_size(frame: pd.DataFrame) -> Figure | None:
    ran = _ran(frame)
    ran = ran[ran["estimate_bytes"].notna()].copy()
    if ran.empty:
        return None
    ran["series"] = (
        ran["backend"] + " " + ran["protocol"] + " " + ran["workers"].astype("string").fillna("?") + "w"
    )
    names = list(dict.fromkeys(ran["workload"]))
    cols = min(3, len(names))
    nrows = math.ceil(len(names) / cols)
    fig = _figure(4.5 * cols, 3.6 * nrows)
    for i, wl in enumerate(names):
        ax = fig.add_subplot(nrows, cols, i + 1)
        g = ran[ran["workload"] == wl]
        for series, s in g.groupby("series", sort=False):
            s = s.sort_values("estimate_bytes")
            ax.plot(s["estimate_bytes"].astype(float), s["median_s"], marker="o", label=series)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(wl)
        ax.set_xlabel("data size (bytes, the workload's estimate)")
        ax.set_ylabel("median time (s)")
        ax.legend(fontsize=7)
    fig.suptitle("time vs size per backend (log-log)")
    return fig


def spread(frame: pd.DataFrame, records: list) -> Figure | None:
    by_name = {pathlib.Path(r.path).name: r for r in records if r.path}
    ran = _ran(frame)
    cases = [
        (row, by_name.get(pathlib.Path(row["record"]).name)) for _, row in ran.iterrows() if row["record"]
    ]
    cases = [(row, r) for row, r in cases if r is not None]
    if not cases:
        return None
    fig = _rows_figure(len(cases))
    ax = fig.add_subplot()
    ys = list(range(len(cases)))[::-1]  # the first case on top
    for y, (_, r) in zip(ys, cases):
        ax.scatter(r.times_s, [y] * len(r.times_s), s=12, color="tab:blue", alpha=0.7)
        ax.vlines(r.median_s, y - 0.3, y + 0.3, color="black")
    ax.set_xscale("log")
    ax.set_yticks(
        ys,
        [
            f"{row['workload']} {row['size']} {row['backend']} {row['protocol']} {row['workers']}w"
            for row, _ in cases
        ],
        fontsize=7,
    )
    ax.set_ylim(-0.6, len(cases) - 0.4)
    ax.set_ylabel("case")
    ax.set_xlabel("time per repeat (s, log scale); bar: median")
    ax.set_title("per-repeat spread", fontsize=10)
    return fig


def draw_all(frame: pd.DataFrame, records: list, out: str | os.PathLike) -> dict[str, pathlib.Path]:
    """Write the charts that apply to this table as PNGs under ``out``; stale ones (a chart
    that no longer applies) are removed. Returns {name: path}."""
    d = pathlib.Path(out)
    figs = {"speedup": speedup(frame), "time_vs_size": time_vs_size(frame), "spread": spread(frame, records)}
    drawn = {}
    for name, fig in figs.items():
        path = d / CHARTS[name]
        if fig is None:
            path.unlink(missing_ok=True)
            continue
        with atomic.written(path, replace=True, what="chart") as (f, _):
            fig.savefig(f, dpi=110, format="png")
        drawn[name] = path
    return drawn
