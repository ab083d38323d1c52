"""Rendering: rich tables for the terminal, HTML for notebooks. No computation here."""
from __future__ import annotations

import html
import json
from typing import Any

from dask.utils import format_bytes
from rich.markup import escape
from rich.table import Table


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s")


def result_table(r) -> Table:
    t = Table(title=f"gpuscale {r.workload} on {r.family} ({r.backend}), {r.protocol}",
              show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    valid = "[green]valid[/green]" if r.valid else "[red bold]INVALID[/red bold]"
    t.add_row("result", f"{valid}  ({r.validation.get('method', '')})")
    t.add_row("median / min", f"{_fmt_s(r.median_s)} / {_fmt_s(r.min_s)}  over {len(r.times_s)} repeat(s)")
    t.add_row("times", ", ".join(_fmt_s(x) for x in r.times_s))
    t.add_row("warm-up", ", ".join(_fmt_s(x) for x in r.warmup_s) or "-")
    t.add_row("start-up / generate / validate",
              f"{_fmt_s(r.startup_s)} / {_fmt_s(r.generate_s)} / {_fmt_s(r.validate_s)}")
    t.add_row("params", ", ".join(f"{k}={v}" for k, v in r.params.items()))
    t.add_row("backend", escape(r.backend_reason))
    running = r.cluster.get("running", {})
    t.add_row("cluster", f"{r.cluster.get('cls')}: {running.get('workers', r.cluster.get('workers'))} "
              f"worker(s), {running.get('threads', '?')} thread(s)")
    for name, c in r.choices.items():
        rule = (f"  [dim]({c['source']}: {escape(c['rule'])})[/dim]" if c.get("rule")
                else f"  [dim]({c['source']})[/dim]")
        t.add_row(f"  {name}", f"{escape(str(c['value']))}{rule}")
    route = r.info.get("route")
    if route:
        t.add_row("  svd route", escape(f"{route['name']}: {route['reason']}"))
    for c in r.validation.get("checks", []):
        mark = "[green]ok[/green]" if c["ok"] else "[red]FAIL[/red]"
        val = "" if c.get("value") is None else f" {c['value']:.3g}" if isinstance(c["value"], float) else f" {c['value']}"
        lim = "" if c.get("limit") is None else f" (limit {c['limit']})"
        t.add_row("  check", f"{mark} {escape(c['name'] + val + lim)}")
    if getattr(r, "trace", None):
        t.add_row("trace", f"{escape(r.trace)}  [dim](gpuscale trace summarize DIR)[/dim]")
    if r.path:
        t.add_row("record", r.path)
    return t


def result_html(r) -> str:
    rows = [("workload", r.workload), ("backend", f"{r.backend} → {r.family}"), ("protocol", r.protocol),
            ("valid", "✅" if r.valid else "❌ INVALID"), ("median", _fmt_s(r.median_s)),
            ("times", ", ".join(_fmt_s(x) for x in r.times_s)),
            ("params", ", ".join(f"{k}={v}" for k, v in r.params.items())),
            ("choices", "; ".join(f"{k}={v['value']} ({v['source']})" for k, v in r.choices.items())),
            ("record", r.path or "(not written)")]
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>"
                   f"{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table><caption>gpuscale result</caption>{body}</table>"


def session_html(s) -> str:
    """A session in a notebook: the dashboard as a link, and the worker / thread counts asked
    of the scheduler at render time (never raising: a lost scheduler shows as unreachable)."""
    link = s.dashboard_link
    workers = threads = "-"
    scheduler = "-"
    if s.client is not None:
        scheduler = getattr(s.client.scheduler, "address", "-")
        if str(s.client.status) != "running":
            workers = f"? (client {s.client.status})"
        else:
            try:
                ws = s.client.scheduler_info(n_workers=-1)["workers"]
                workers, threads = str(len(ws)), str(sum(w.get("nthreads", 0) for w in ws.values()))
            except Exception as e:  # noqa: BLE001 - a repr must not raise
                workers = f"? (scheduler unreachable: {type(e).__name__})"
    dash = f"<a href='{html.escape(link)}' target='_blank'>{html.escape(link)}</a>" if link else "(closed)"
    rows = [("backend", f"{s.selection.requested} → {s.family.name}"), ("cluster", s.spec.cls),
            ("protocol", s.spec.protocol), ("scheduler", scheduler), ("workers", workers),
            ("threads", threads), ("dashboard", None)]
    body = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>"
                   f"{html.escape(str(v)) if v is not None else dash}</td></tr>" for k, v in rows)
    return f"<table><caption>gpuscale session</caption>{body}</table>"


def spec_table(spec, resolved, selection) -> Table:
    t = Table(title=f"cluster spec ({selection.reason})", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    d = spec.model_dump(mode="json")
    for key in ("cls", "family", "protocol", "scheduler", "workers", "threads_per_worker", "memory_limit",
                "gpus", "transports", "rmm", "pre_import", "dashboard_address"):
        v = d.get(key)
        if key == "memory_limit" and d.get("memory_limit_bytes"):
            v = f"{v} ({format_bytes(d['memory_limit_bytes'])} per worker)"
        if v is not None and v != [] and v != {}:
            t.add_row(key, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
    for note in spec.notes:
        t.add_row("note", escape(note))
    if resolved.profile:
        t.add_row("profile", resolved.profile)
    changed = {k: v for k, v in resolved.sources.items() if v != "default"}
    if changed:
        t.add_row("from", ", ".join(f"{k}: {v}" for k, v in sorted(changed.items())))
    return t


def info_table(info: dict[str, Any]) -> Table:
    t = Table(title="gpuscale info", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    cpu = info["hardware"]["cpu"]
    t.add_row("CPU", f"{cpu['model']}, {cpu['usable_cores']} usable of {cpu['cores']} cores")
    t.add_row("memory", format_bytes(cpu["memory_bytes"]))
    gpus = info["hardware"]["gpus"]
    if not gpus:
        t.add_row("GPUs", "none visible")
    for g in gpus:
        peers = ", ".join(map(str, g["nvlink_peers"])) or "none"
        t.add_row(f"GPU {g['index']}", f"{g['name']}, {format_bytes(g['memory_bytes'])}, NVLink peers: {peers}")
    gd = info.get("gpu_dashboard")
    if gd:
        t.add_row("GPU dashboard", escape(gd["message"]) if gd["available"]
                  else f"[dim]{escape(gd['message'])}[/dim]")
    for mod, st in info["stacks"].items():
        t.add_row(mod, (st["version"] or "installed") if st["importable"] else "[dim]not installed[/dim]")
    for fam in info["backends"]:
        t.add_row(f"backend {fam['name']}", ("[green]usable[/green]: " if fam["usable"] else "[dim]unusable[/dim]: ")
                  + escape(fam["why"]))
    for name, v in info["versions"].items():
        if name in ("dask", "distributed", "numpy", "pandas", "gpuscale", "python"):
            t.add_row(name, str(v))
    return t


def workloads_table(items: list[dict]) -> Table:
    t = Table(title="gpuscale workloads", title_justify="left")
    t.add_column("workload", style="bold")
    t.add_column("kind")
    t.add_column("parameters (default)")
    for w in items:
        params = "\n".join(escape(f"--{k} ({v['default']})"
                                   + (f" {{{'|'.join(map(str, v['choices']))}}}" if v.get("choices") else "")
                                   + f": {v['help']}") for k, v in w["params"].items())
        t.add_row(f"{w['name']}\n[dim]{w['description']}[/dim]", w["collection"], params)
    return t


# ---------------------------------------------------------------------------------------
# Traces (gpuscale.trace): summarize, compare, index.html
# ---------------------------------------------------------------------------------------
def _fmt_bytes(x) -> str:
    if x is None:
        return "-"
    return f"{int(x)} B" if int(x) < 1024 else f"{format_bytes(int(x))} ({int(x)} B)"


def _fmt_bw(x) -> str:
    return "-" if x is None else f"{format_bytes(int(x))}/s"


def _share(x: float, wall: float) -> str:
    return f"{x / wall * 100:.1f}%" if wall else "-"


def trace_summary_rows(s) -> list[tuple[str, str]]:
    """(label, text) rows of a trace summary (``gpuscale.trace.Summary``), shared by the table
    and index.html."""
    what = s.workload or "user code"
    rows = [("run", f"{what} on {s.family or s.backend or '?'} ({s.backend or '-'}), {s.protocol or '-'}, "
                    f"{s.workers} worker(s), {s.threads} thread(s)"),
            ("result record id", s.result_id or "-"),
            ("wall", _fmt_s(s.wall_s)),
            ("  compute", f"{_fmt_s(s.compute_s)} ({_share(s.compute_s, s.wall_s)})"),
            ("  transfer", f"{_fmt_s(s.transfer_s)} ({_share(s.transfer_s, s.wall_s)})"),
            ("  idle + overhead", f"{_fmt_s(s.idle_s)} ({_share(s.idle_s, s.wall_s)})"),
            ("task thread time", f"{_fmt_s(s.task_thread_s)} in {s.tasks} task(s), "
                                 f"utilization {s.utilization * 100:.1f}%"),
            ("bytes moved", f"{_fmt_bytes(s.bytes_moved)} in {s.transfers} transfer(s), "
                            f"bandwidth {_fmt_bw(s.bandwidth_bytes_per_s)}, "
                            f"in flight {s.transfer_share * 100:.1f}% of wall")]
    if s.p2p_bytes_sent:
        rows.append(("P2P bytes sent", _fmt_bytes(s.p2p_bytes_sent)))
    for g in s.top_task_groups:
        rows.append((f"  group {g['name']}", f"{_fmt_s(g['seconds'])} ({g['share'] * 100:.1f}%), {g['tasks']} task(s)"))
    for p in s.pairs:
        rows.append((f"  {p.get('source_name') or p['source']} -> {p.get('destination_name') or p['destination']}",
                     f"{_fmt_bytes(p['bytes'])}, {p['transfers']} transfer(s), {_fmt_bw(p['bandwidth_bytes_per_s'])}"))
    for addr, m in s.memory.items():
        text = f"host peak {_fmt_bytes(m.get('host_peak_bytes'))}"
        if "gpu_peak_bytes" in m:
            text += f", GPU peak {_fmt_bytes(m['gpu_peak_bytes'])}"
        rows.append((f"  memory {m.get('name', addr)}", text))
    for p in s.phases:
        rows.append((f"  phase {'  ' * p.get('depth', 0)}{p['name']}",
                     f"at {_fmt_s(p['start_s'])}, {_fmt_s(p['duration_s'])}"))
    for n in s.notes:
        rows.append(("note", n))
    return rows


def trace_summary_table(s, path: str | None = None) -> Table:
    t = Table(title=f"gpuscale trace{f' {escape(path)}' if path else ''}", show_header=False,
              title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for k, v in trace_summary_rows(s):
        t.add_row(escape(k), escape(v))
    return t


def _cmp_value(x, unit: str) -> str:
    if x is None:
        return "-"
    if unit == "s":
        return _fmt_s(x)
    if unit == "bytes":
        return _fmt_bytes(x)
    if unit == "bytes/s":
        return _fmt_bw(x)
    if unit == "ratio":
        return f"{x * 100:.1f}%"
    return str(x)


def trace_compare_table(c: dict[str, Any]) -> Table:
    t = Table(title="gpuscale trace compare (ratio = B / A)", title_justify="left")
    t.add_column("", style="bold")
    t.add_column(f"A: {escape(c['a'])}")
    t.add_column(f"B: {escape(c['b'])}")
    t.add_column("B / A")
    for key, (va, vb) in c["about"].items():
        t.add_row(key, escape(str(va if va is not None else "-")), escape(str(vb if vb is not None else "-")), "")
    for r in c["rows"]:
        t.add_row(r["label"], _cmp_value(r["a"], r["unit"]), _cmp_value(r["b"], r["unit"]),
                  "-" if r["ratio"] is None else f"{r['ratio']:.3f}x")
    return t


def trace_index_html(summary: dict[str, Any]) -> str:
    """index.html of a trace folder: links to every file and the summary's rows (static)."""
    from .trace import Summary
    s = Summary.model_validate(summary)
    titles = {"performance_report": "Dask performance report",
              "trace": "task stream as a Chrome / Perfetto trace (open in ui.perfetto.dev or chrome://tracing)",
              "comm": "communication matrix (bytes and bandwidth per worker pair)",
              "summary": "summary (schema gpuscale.trace, version 1)"}
    links = "".join(f"<li><a href='{html.escape(f)}'>{html.escape(f)}</a>: {html.escape(titles.get(k, k))}</li>"
                    for k, f in s.files.items() if k != "index")
    rows = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in trace_summary_rows(s))
    title = f"gpuscale trace: {html.escape(s.workload or 'user code')}"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<h1>{title}</h1><ul>{links}</ul><table>{rows}</table></body></html>\n")
