"""Traces rendered for people: the summary as rows (a rich table for ``gpuscale trace
summarize``, the folder's index.html), the comparison of two traces as a table."""

from __future__ import annotations

import html
from typing import Any

from dask.utils import format_bytes
from rich.markup import escape

from ..audit import verdict
from ..records.fit import FitTable as Table  # never cuts a value (see records.fit)
from ..records.report import _fmt_s, pairs_table
from .summary import Summary


def _fmt_bytes(x) -> str:
    if x is None:
        return "-"
    return f"{int(x)} B" if int(x) < 1024 else f"{format_bytes(int(x))} ({int(x)} B)"


def _fmt_bw(x) -> str:
    return "-" if x is None else f"{format_bytes(int(x))}/s"


def _share(x: float, wall: float) -> str:
    return f"{x / wall * 100:.1f}%" if wall else "-"


def summary_rows(s: Summary) -> list[tuple[str, str]]:
    """(label, text) rows of a trace summary (``gpuscale.trace.Summary``), shared by the table
    and index.html."""
    what = s.workload or "user code"
    rows = [
        (
            "run",
            f"{what} on {s.family or s.backend or '?'} ({s.backend or '-'}), {s.protocol or '-'}, "
            f"{s.workers} worker(s), {s.threads} thread(s)",
        ),
        ("result record id", s.result_id or "-"),
        ("wall", _fmt_s(s.wall_s)),
        ("  compute", f"{_fmt_s(s.compute_s)} ({_share(s.compute_s, s.wall_s)})"),
        ("  transfer", f"{_fmt_s(s.transfer_s)} ({_share(s.transfer_s, s.wall_s)})"),
        ("  idle + overhead", f"{_fmt_s(s.idle_s)} ({_share(s.idle_s, s.wall_s)})"),
        (
            "task thread time",
            f"{_fmt_s(s.task_thread_s)} in {s.tasks} task(s), utilization {s.utilization * 100:.1f}%",
        ),
        (
            "bytes moved",
            f"{_fmt_bytes(s.bytes_moved)} in {s.transfers} transfer(s), "
            f"bandwidth {_fmt_bw(s.bandwidth_bytes_per_s)}, "
            f"in flight {s.transfer_share * 100:.1f}% of wall",
        ),
    ]
    if s.p2p_bytes_sent:
        rows.append(("P2P bytes sent", _fmt_bytes(s.p2p_bytes_sent)))

    def timed(o) -> str:
        return f"{_fmt_s(o['seconds'])} ({o['share'] * 100:.1f}%), {o['tasks']} task(s)"

    rows += [(f"  {kind}", timed(o)) for kind, o in s.operations.items()]
    rows += [(f"  group {g['name']}", timed(g)) for g in s.top_task_groups]
    rows += [
        (
            f"  {p.get('source_name') or p['source']} -> {p.get('destination_name') or p['destination']}",
            f"{_fmt_bytes(p['bytes'])}, {p['transfers']} transfer(s), {_fmt_bw(p['bandwidth_bytes_per_s'])}",
        )
        for p in s.pairs
    ]
    for addr, m in s.memory.items():
        text = f"host peak {_fmt_bytes(m.get('host_peak_bytes'))}"
        if "gpu_peak_bytes" in m:
            text += f", GPU peak {_fmt_bytes(m['gpu_peak_bytes'])}"
        rows.append((f"  memory {m.get('name', addr)}", text))
    for p in s.phases:
        indent = "  " * p.get("depth", 0)
        rows.append((f"  phase {indent}{p['name']}", f"at {_fmt_s(p['start_s'])}, {_fmt_s(p['duration_s'])}"))
    a = getattr(s, "audit", None)
    if a:
        fam = a["expected"]["family"]
        if verdict(a) == "clean":
            text = f"clean: {a['tasks']} task output(s), none of another family than {fam}"
        elif verdict(a) == "nothing seen":
            text = "nothing seen: 0 task outputs"
        else:
            prefixes = ", ".join(sorted({f["prefix"] for f in a["foreign"]}))
            text = (
                f"{a['foreign_tasks']} task(s), {format_bytes(a['foreign_bytes'])} of another family than "
                f"{fam} in {prefixes} (gpuscale audit report DIR)"
            )
        rows.append(("backend audit", text))
    return rows + [("note", n) for n in s.notes]


def summary_table(s: Summary, path: str | None = None) -> Table:
    t = pairs_table(f"gpuscale trace{f' {escape(path)}' if path else ''}")
    for k, v in summary_rows(s):
        t.add_row(escape(k), escape(v))
    return t


def _cmp_value(x, unit: str) -> str:
    formats = {"s": _fmt_s, "bytes": _fmt_bytes, "bytes/s": _fmt_bw, "ratio": lambda v: f"{v * 100:.1f}%"}
    return "-" if x is None else formats.get(unit, str)(x)


def compare_table(c: dict[str, Any]) -> Table:
    t = Table(title="gpuscale trace compare (ratio = B / A)", title_justify="left")
    t.add_column("", style="bold")
    t.add_column(f"A: {escape(c['a'])}")
    t.add_column(f"B: {escape(c['b'])}")
    t.add_column("B / A")
    for key, (va, vb) in c["about"].items():
        t.add_row(key, *(escape(str(v if v is not None else "-")) for v in (va, vb)), "")
    for r in c["rows"]:
        t.add_row(
            r["label"],
            _cmp_value(r["a"], r["unit"]),
            _cmp_value(r["b"], r["unit"]),
            "-" if r["ratio"] is None else f"{r['ratio']:.3f}x",
        )
    return t


PHASE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def phase_timeline_svg(s: Summary, width: int = 900) -> str:
    """The phases of a trace as an inline SVG timeline (one bar per phase, one row per phase,
    x = seconds from the window's start, nested phases indented): no script, no network, so
    index.html shows it anywhere. Empty string when the trace has no phases."""
    if not s.phases:
        return ""
    label_w, row_h, top, bottom = 200, 22, 10, 34
    span = max([s.wall_s] + [p["start_s"] + p["duration_s"] for p in s.phases]) or 1.0
    plot_w = width - label_w - 20
    height = top + row_h * len(s.phases) + bottom

    def x(t: float) -> float:
        return label_w + max(0.0, t) / span * plot_w

    parts = [
        f"<svg id='phase-timeline' xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"role='img' aria-label='timeline of the phases'>",
        f"<rect x='{label_w}' y='{top}' width='{plot_w}' height='{row_h * len(s.phases)}' fill='#f7f7f7'/>",
    ]
    for i, p in enumerate(s.phases):
        y = top + i * row_h
        w = max(1.0, p["duration_s"] / span * plot_w)
        name = html.escape(p["name"])
        color = PHASE_COLORS[i % len(PHASE_COLORS)]
        parts.append(
            f"<text x='{label_w - 6}' y='{y + row_h * 0.7:.1f}' font-size='12' text-anchor='end' "
            f"font-family='sans-serif'>{'› ' * p.get('depth', 0)}{name}</text>"
        )
        parts.append(
            f"<rect class='phase' x='{x(p['start_s']):.1f}' y='{y + 3}' width='{w:.1f}' "
            f"height='{row_h - 6}' fill='{color}'><title>{name}: at {_fmt_s(p['start_s'])}, "
            f"{_fmt_s(p['duration_s'])}</title></rect>"
        )
    axis_y = top + row_h * len(s.phases)
    parts.append(f"<line x1='{label_w}' y1='{axis_y}' x2='{label_w + plot_w}' y2='{axis_y}' stroke='#333'/>")
    for k in range(6):
        t = span * k / 5
        parts.append(
            f"<line x1='{x(t):.1f}' y1='{axis_y}' x2='{x(t):.1f}' y2='{axis_y + 4}' stroke='#333'/>"
            f"<text x='{x(t):.1f}' y='{axis_y + 16}' font-size='11' text-anchor='middle' "
            f"font-family='sans-serif'>{_fmt_s(t)}</text>"
        )
    parts.append(
        f"<text x='{label_w + plot_w / 2:.1f}' y='{axis_y + 30}' font-size='12' text-anchor='middle' "
        f"font-family='sans-serif'>seconds from the start of the trace</text></svg>"
    )
    return "".join(parts)


def index_html(s: Summary) -> str:
    """index.html of a trace folder: links to every file, a timeline of the phases (inline
    SVG) and the summary's rows; static and self-contained (works offline)."""
    titles = {
        "performance_report": "Dask performance report",
        "trace": "task stream as a Chrome / Perfetto trace (open in ui.perfetto.dev or chrome://tracing)",
        "comm": "communication matrix (bytes and bandwidth per worker pair)",
        "summary": "summary (schema gpuscale.trace, version 1)",
    }
    links = "".join(
        f"<li><a href='{html.escape(f)}'>{html.escape(f)}</a>: {html.escape(titles.get(k, k))}</li>"
        for k, f in s.files.items()
        if k != "index"
    )
    rows = "".join(
        f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in summary_rows(s)
    )
    title = f"gpuscale trace: {html.escape(s.workload or 'user code')}"
    svg = phase_timeline_svg(s)
    timeline = f"<h2>Phases</h2>{svg}" if svg else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
        f"<h1>{title}</h1><ul>{links}</ul>{timeline}<table>{rows}</table></body></html>\n"
    )
