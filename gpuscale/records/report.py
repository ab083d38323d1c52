"""Rendering: rich tables for the terminal, HTML for notebooks. No computation here."""

from __future__ import annotations

import contextlib
import html
import itertools
import json
import os
import shlex
import sys
from typing import Any, Callable, Iterator

from dask.utils import format_bytes
from rich import box
from rich.markup import escape

from .. import _dask_compat, config
from ..audit import verdict
from .fit import FitTable as Table  # every table here fits the terminal without cutting a value
from .table import COLUMNS, brief_params, varying, workers_of


def case_line(i: int, total: int, case: dict[str, Any]) -> str | None:
    """One line per bench case: ``[3/12] ok  svd rows=20000 cpu tcp 2w  0.123 s``; a group of
    cases that cannot run here is one line, on its first case (None for the others)."""
    status = case.get("status") or "?"
    if status == "not here":
        if not case.get("group"):
            return None
        return (
            f"[{i}/{total}] not run here: {case['group']} {case['backend']} {case['protocol']} case(s): "
            f"{case.get('why', '')}"
        )
    if status == "ok" and case.get("valid") is False:
        status = "INVALID"
    what = (
        f"{case['workload']} {case.get('size', '')} {case['backend']} {case['protocol']} "
        f"{case['workers'] if case.get('workers') is not None else 'default'}w"
    )
    tail = _fmt_s(case["median_s"]) if case.get("median_s") is not None and status == "ok" else ""
    if case.get("error"):
        tail = (tail + "  " if tail else "") + case["error"]
    return f"[{i}/{total}] {status:7s} {what}  {tail}".rstrip()


@contextlib.contextmanager
def sweep_progress(description: str, total: int) -> Iterator[Callable[[dict], None]]:
    """A bench sweep's cases (:data:`gpuscale.runs.bench.CaseProgress`): on an interactive
    terminal a rich progress bar on stderr whose description names the last case, else one
    line per case on stderr (logs of long GPU runs keep every case)."""
    numbers = itertools.count(1)
    if not sys.stderr.isatty():

        def line(case):
            text = case_line(next(numbers), total, case)
            if text is not None:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()

        yield line
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task(description, total=total)

        def advance(case):
            text = case_line(next(numbers), total, case)
            if case.get("status") != "skipped" and text is not None:
                bar.console.print(escape(text))
            bar.update(
                task, advance=1, description=f"{description}: {case['workload']} {case.get('size', '')}"
            )

        yield advance


def grid(title: str, **kwargs) -> Table:
    """A table with a header row and no borders, its columns two spaces apart (the lists:
    records, comparisons, workloads, audit prefixes)."""
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        **kwargs,
    )


def pairs_table(title: str | None = None, **kwargs) -> Table:
    """A table of (label in bold, value) rows without a header."""
    t = Table(title=title, show_header=False, title_justify="left", **kwargs)
    t.add_column(style="bold")
    t.add_column()
    return t


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s")


def dashboard_text(r) -> str:
    """A record's dashboard link as it stands now (``dashboard_link_live``): live, or where it
    was during the run."""
    if r.dashboard_link_live:
        return f"{r.dashboard_link} (live)"
    if r.dashboard_link_live is False:
        return f"{r.dashboard_link} (was, during the run: its cluster has closed)"
    return f"{r.dashboard_link} (was, during the run: a running cluster's; it may still answer)"


def result_table(r) -> Table:
    t = Table(
        title=escape(f"gpuscale {r.workload} on {r.family} ({r.backend}), {r.protocol}"),
        show_header=False,
        title_justify="left",
    )
    t.add_column(style="bold", no_wrap=True)  # a knob's name stays whole, not cut inside a word
    t.add_column(ratio=1)
    if getattr(r, "foreign", False):
        t.add_row(
            "[yellow]file[/yellow]", f"[yellow]uid {r.owner}'s, not yours: its numbers are theirs[/yellow]"
        )
    valid = (
        "[green]valid[/green]"
        if r.valid
        else "[yellow]not validated[/yellow]"
        if r.valid is None
        else "[red bold]INVALID[/red bold]"
    )
    t.add_row("result", f"{valid}  ({r.validation.get('method', '')})")
    t.add_row("median / min", f"{_fmt_s(r.median_s)} / {_fmt_s(r.min_s)}  over {len(r.times_s)} repeat(s)")
    if r.repeats and r.repeats.get("mode") == "auto":
        t.add_row("repeat auto", escape(f"{r.repeats['taken']} taken, stopped: {r.repeats['why']}"))
    t.add_row("times", ", ".join(_fmt_s(x) for x in r.times_s))
    t.add_row("warm-up", ", ".join(_fmt_s(x) for x in r.warmup_s) or "-")
    split = r.info.get("time_split") or {}
    if split.get("available"):
        t.add_row(
            "median repeat",
            f"compute on workers {_fmt_s(split['compute_s'])}, transfers "
            f"{_fmt_s(split['transfer_s'])}, the rest {_fmt_s(split['other_s'])} [dim](graph, scheduling, "
            f"round trips, synchronize; {split['tasks']:.0f} task(s))[/dim]",
        )
    t.add_row("start-up", _fmt_s(r.startup_s))
    t.add_row("generate / check", f"{_fmt_s(r.generate_s)} / {_fmt_s(r.validate_s)}")
    t.add_row("params", ", ".join(f"{k}={v}" for k, v in r.params.items()))
    if r.data.get("format"):  # the user's own data (--input / data=)
        what = (
            r.data.get("shape") or f"{r.data.get('rows')} rows x {len(r.data.get('columns') or {})} columns"
        )
        t.add_row("data", escape(f"{r.data['source']} ({r.data['format']}, {what})"))
    t.add_row("backend", escape(r.backend_reason))
    running = r.cluster.get("running", {})
    t.add_row(
        "cluster",
        f"{r.cluster.get('cls')}: {running.get('workers', r.cluster.get('workers'))} "
        f"worker(s), {running.get('threads', '?')} thread(s)",
    )
    hosts = r.cluster.get("hosts") or {}
    if len(hosts) > 1 or r.cluster.get("tls"):
        t.add_row(
            "  hosts",
            escape(", ".join(f"{h} ({v['workers']} worker(s))" for h, v in hosts.items()))
            + ("  [dim](TLS)[/dim]" if r.cluster.get("tls") else ""),
        )
    for key, label in (("workers_lost", "lost during the run"), ("workers_joined", "joined during the run")):
        if r.cluster.get(key):
            t.add_row(f"  {label}", escape(", ".join(r.cluster[key])))
    if r.dashboard_link:
        t.add_row("dashboard", escape(dashboard_text(r)))
    said: dict[str, str] = {}  # a rule's text -> the first knob it was shown with
    for name, c in r.choices.items():
        text = c.get("rule")
        if text and text in said:
            rule = f"  [dim]({c['source']}: as {said[text]})[/dim]"
        elif text:
            said[text] = name
            rule = f"  [dim]({c['source']}: {escape(text)})[/dim]"
        else:
            rule = f"  [dim]({c['source']})[/dim]"
        t.add_row(f"  {name}", f"{escape(str(c['value']))}{rule}")
    route = r.info.get("route")
    if route:
        t.add_row("  svd route", escape(f"{route['name']}: {route['reason']}"))
    for c in r.validation.get("checks", []):
        mark = "[green]ok[/green]" if c["ok"] else "[red]FAIL[/red]"
        v = c.get("value")
        val = "" if v is None else f" {v:.3g}" if isinstance(v, float) else f" {v}"
        lim = "" if c.get("limit") is None else f" (limit {c['limit']})"
        t.add_row("  check", f"{mark} {escape(c['name'] + val + lim)}")
    for label, text in audit_lines(getattr(r, "audit", None)):
        t.add_row(label, text)
    if getattr(r, "trace", None):
        t.add_row("trace", f"{escape(r.trace)}  [dim](gpuscale trace summarize DIR)[/dim]")
    out = r.info.get("output")
    if out:
        text = f"{out['path']} ({out.get('holds', '')})"
        if not out.get("written"):
            text = f"{out['path']}: NOT written ({out.get('why')})"
        t.add_row("output", escape(text))
    if r.path:
        t.add_row(
            "record",
            f"{escape(r.path)}\n[bold]{r.short_id}[/bold] [dim](its id: "
            f"{escape(show_command(r.short_id, r.path))})[/dim]",
        )
    return t


def show_command(short_id: str, path: str) -> str:
    """``gpuscale results show ID``, with ``--results-dir`` where the record lies outside the
    folder the command looks in by default."""
    folder = os.path.dirname(os.path.abspath(path))
    default = os.path.abspath(os.path.expanduser(config.resolve(None, {}).settings.results_dir))
    if folder == default:
        return f"gpuscale results show {short_id}"
    return f"gpuscale results show {short_id} --results-dir {shlex.quote(folder)}"


def result_html(r) -> str:
    a = getattr(r, "audit", None)
    audit = verdict(a) if a else "-"
    if a and a["foreign_tasks"]:
        audit = (
            f"{a['foreign_tasks']} task(s) of another family than {a['expected']['family']}: "
            + "; ".join(f"{f['prefix']}: {f['fix']}" for f in a["foreign"])
        )
    rows = [
        ("workload", r.workload),
        ("backend", f"{r.backend} → {r.family}"),
        ("protocol", r.protocol),
        ("valid", "✅" if r.valid else "not validated" if r.valid is None else "❌ INVALID"),
        ("median", _fmt_s(r.median_s)),
        ("times", ", ".join(_fmt_s(x) for x in r.times_s)),
        ("params", ", ".join(f"{k}={v}" for k, v in r.params.items())),
        ("choices", "; ".join(f"{k}={v['value']} ({v['source']})" for k, v in r.choices.items())),
        ("backend audit", audit),
        *([("dashboard", dashboard_text(r))] if r.dashboard_link else []),
        ("record", r.path or "(not written)"),
    ]
    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>"
        f"{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    return f"<table><caption>gpuscale result</caption>{body}</table>"


def session_html(s) -> str:
    """A session in a notebook: the dashboard as a link, and the worker / thread counts asked
    of the scheduler at render time (never raising: a lost scheduler shows as unreachable)."""
    link = s.dashboard_link
    workers = threads = scheduler = "-"
    if s.client is not None:
        scheduler = getattr(s.client.scheduler, "address", "-")
        if str(s.client.status) != "running":
            workers = f"? (client {s.client.status})"
        else:
            try:
                ws = _dask_compat.workers(s.client)
                workers, threads = str(len(ws)), str(sum(w.get("nthreads", 0) for w in ws.values()))
            except Exception as e:  # noqa: BLE001 - a repr must not raise
                workers = f"? (scheduler unreachable: {type(e).__name__})"
    dash = f"<a href='{html.escape(link)}' target='_blank'>{html.escape(link)}</a>" if link else "(closed)"
    rows = [
        ("backend", f"{s.selection.requested} → {s.family.name}"),
        ("cluster", s.spec.cls),
        ("protocol", s.spec.protocol),
        ("scheduler", scheduler),
        ("workers", workers),
        ("threads", threads),
        ("dashboard", None),
    ]
    body = "".join(
        f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>"
        f"{html.escape(str(v)) if v is not None else dash}</td></tr>"
        for k, v in rows
    )
    return f"<table><caption>gpuscale session</caption>{body}</table>"


def spec_table(spec, resolved, selection) -> Table:
    t = pairs_table(f"cluster spec ({selection.reason})")
    d = spec.model_dump(mode="json")
    for key in (
        "cls",
        "family",
        "protocol",
        "scheduler",
        "workers",
        "threads_per_worker",
        "memory_limit",
        "gpus",
        "transports",
        "rmm",
        "pre_import",
        "dashboard_address",
        "security",
        "credentials",
    ):
        v = d.get(key)
        if key == "memory_limit" and d.get("memory_limit_bytes"):
            v = f"{v} ({format_bytes(d['memory_limit_bytes'])} per worker)"
        if v is not None and v != [] and v != {}:
            t.add_row(key, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
    for note in spec.notes:
        t.add_row("note", escape(note))
    for command in spec.commands:
        t.add_row("runs", escape(command))
    for host, e in (spec.per_host or {}).items():
        t.add_row(f"host {escape(host)}", escape("; ".join(f"{k}: {_fmt_value(v)}" for k, v in e.items())))
    if resolved.profile:
        t.add_row("profile", resolved.profile)
    changed = {k: v for k, v in resolved.sources.items() if v != "default"}
    if changed:
        t.add_row("from", ", ".join(f"{k}: {v}" for k, v in sorted(changed.items())))
    return t


def info_table(info: dict[str, Any]) -> Table:
    t = pairs_table("gpuscale info")
    cpu = info["hardware"]["cpu"]
    t.add_row("CPU", f"{cpu['model']}, {cpu['usable_cores']} usable of {cpu['cores']} cores")
    t.add_row("memory", format_bytes(cpu["memory_bytes"]))
    gpus = info["hardware"]["gpus"]
    if not gpus:
        t.add_row("GPUs", "none visible")
    for g in gpus:
        peers = ", ".join(map(str, g["nvlink_peers"])) or "none"
        t.add_row(
            f"GPU {g['index']}", f"{g['name']}, {format_bytes(g['memory_bytes'])}, NVLink peers: {peers}"
        )
    gd = info.get("gpu_dashboard")
    if gd:
        message = escape(gd["message"])
        t.add_row("GPU dashboard", message if gd["available"] else f"[dim]{message}[/dim]")
    for mod, st in info["stacks"].items():
        t.add_row(mod, (st["version"] or "installed") if st["importable"] else "[dim]not installed[/dim]")
    for fam in info["backends"]:
        usable = "[green]usable[/green]" if fam["usable"] else "[dim]unusable[/dim]"
        t.add_row(f"backend {fam['name']}", f"{usable}: {escape(fam['why'])}")
    for name, v in info["versions"].items():
        if name in ("dask", "distributed", "numpy", "pandas", "gpuscale", "python"):
            t.add_row(name, str(v))
    return t


def workloads_table(items: list[dict]) -> Table:
    t = grid("gpuscale workloads")
    t.add_column("workload", style="bold")
    t.add_column("what it does; its parameters (default)")
    for w in items:
        params = "\n".join(
            escape(
                f"--{k} ({v['default']})"
                + (f" {{{'|'.join(map(str, v['choices']))}}}" if v.get("choices") else "")
                + f": {v['help']}"
            )
            for k, v in w["params"].items()
        )
        t.add_row(
            f"{w['name']}\n[dim]{w['collection']}[/dim]",
            f"[italic]{escape(w['description'])}[/italic]\n{params}",
        )
    return t


MEMORY_VERDICT = {
    "fits": "[green]fits in memory[/green]",
    "spills": "[yellow]fits with spilling[/yellow]",
    "streams": "[yellow]streams (made block by block in every pass)[/yellow]",
    "does not fit": "[red bold]does NOT fit[/red bold]",
}


def memory_table(m: dict[str, Any], title: str) -> Table:
    """The memory check (:mod:`gpuscale.memory`): the estimate by part, the per-worker
    sum against the smallest worker, the verdict; after a run, what the workers held."""
    t = pairs_table(title)
    parts = " + ".join(f"{k} {format_bytes(v)}" for k, v in m["parts"].items())
    t.add_row("estimate", escape(f"{format_bytes(m['estimate_bytes'])}: {parts}"))
    if m.get("workers") and m.get("worker_limit_bytes"):
        held = f"+ what cannot spill {format_bytes(m['held_bytes'])} " if m.get("held_bytes") else ""
        text = (
            f"baseline {format_bytes(m['baseline_bytes'])} + working set "
            f"{format_bytes(m['working_set_bytes'])} {held}+ data {format_bytes(m['per_worker_bytes'])} "
            f"against {format_bytes(m['usable_bytes'])} in memory of {format_bytes(m['worker_limit_bytes'])} "
            f"({m['workers']} worker(s))"
        )
        t.add_row(
            "per worker", escape(text) + ": " + MEMORY_VERDICT.get(m.get("verdict"), str(m.get("verdict")))
        )
        if m.get("spill_bytes_per_worker"):
            space = m["budget"].get("spill_space")
            text = (
                f"{format_bytes(m['spill_bytes_per_worker'])} per worker to "
                f"{m['budget'].get('spill_to') or 'nowhere (this family does not spill)'}"
                + (f", {format_bytes(space)} free per worker" if space is not None else "")
            )
            t.add_row("spill", escape(text))
        t.add_row("baseline", escape(m.get("baseline_source", "")))
    t.add_row("rule", escape(m["rule"]))
    meas = m.get("measured")
    if meas and meas.get("peak_bytes"):
        device = meas.get("memory") == "device"
        ratio = f" = {meas['peak_over_estimate']:g} x the estimate" if meas.get("peak_over_estimate") else ""
        text = (
            ("device allocations' " if device else "")
            + f"peak {format_bytes(meas['peak_bytes'])} per worker{ratio}"
            + f"; spilled {format_bytes(meas['spilled_bytes'])}"
            + (" device -> host" if device else "")
        )
        t.add_row("measured", escape(text))
    if not m.get("fits", True):
        t.add_row("override", escape(m["override"]))
    return t


def audit_lines(a: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(label, rich text) rows that summarize an audit inside other tables (the run summary)."""
    if not a:
        return []
    fam = a["expected"]["family"]
    prefixes = {r["prefix"] for r in a["prefixes"]}
    kinds = ", ".join(f"{k} {n}" for k, n in a["kinds"].items() if n)
    if verdict(a) == "clean":
        head = (
            f"[green]clean[/green]: {a['tasks']} task output(s) in {len(prefixes)} prefix(es), "
            f"{format_bytes(a['bytes'])}, none of another family than {fam} ({escape(kinds)})"
        )
    elif verdict(a) == "nothing seen":
        head = "[yellow]nothing seen[/yellow]: 0 task outputs, so nothing to call clean"
    else:
        foreign = {(f["prefix"], f["type"]) for f in a["foreign"]}
        head = (
            f"[red bold]{len(foreign)} prefix(es) produced chunks of another family than {fam}[/red bold]: "
            f"{a['foreign_tasks']} task(s), {format_bytes(a['foreign_bytes'])}"
            + (" [red](strict: error)[/red]" if a.get("strict") else "")
        )

    def held(f, tail: str) -> str:
        return escape(
            f"{f['prefix']} ({f['phase']}): {f['tasks']} task(s), "
            f"{format_bytes(f['bytes'])} of {f['type']}{tail}"
        )

    rows = [("audit", head)]
    rows += [("  foreign", held(f, f"; fix: {f['fix']}")) for f in a["foreign"]]
    rows += [("  allowed", held(f, f": {f['allowed']}")) for f in a.get("allowed", [])]
    for c in a.get("conversions", []):  # collections built from host objects, converted by the session
        text = (
            f"{c['function'] or 'a collection'} at {c['where'] or '?'}: "
            f"{c['converted_blocks']} block(s) of {c['partitions'] or '?'}, "
            f"{format_bytes(c['bytes'])} of {c['from_type'] or 'host data'} "
            f"-> {c['to_module'] or '?'} on the workers (for you)" + (f": {c['why']}" if c.get("why") else "")
        )
        rows.append(("  converted", escape(text)))
    for f in a.get("fallbacks", []):  # calls the family could not run, run on the host
        text = (
            f"{f['operation']} at {f['where']}: {f['partitions']} partition(s), "
            f"{format_bytes(f['bytes_to_host'])} to the host, "
            f"{format_bytes(f['bytes_to_device'])} back ({f['error']})"
        )
        rows.append(("  host fallback", escape(text)))
    if a["transfer_count"]:
        directions: dict[str, list[int]] = {}
        for c in a["transfers"]:
            d = directions.setdefault(c["direction"], [0, 0])
            d[0] += c["count"]
            d[1] += c["bytes"]
        text = ", ".join(f"{d}: {n} ({format_bytes(b)})" for d, (n, b) in directions.items())
        rows.append(("  family changes", escape(text)))
    return rows


COUNTS = frozenset({"tasks", "bytes", "count"})
"""Columns of counts: right-aligned, never wrapped."""


def _add_columns(table, *names: str) -> None:
    for name in names:
        count = name in COUNTS
        table.add_column(name, justify="right" if count else "left", no_wrap=count)


def audit_table(a: dict[str, Any], source: str | None = None):
    """``gpuscale audit report``: the summary, every (phase, prefix, type) row, and the family
    changes."""
    from rich.console import Group

    head = pairs_table(f"gpuscale backend audit{f': {escape(source)}' if source else ''}")
    head.add_row(
        "expected", escape(f"{a['expected']['family']} family ({' / '.join(a['expected']['modules'])})")
    )
    if a.get("scope"):
        head.add_row("scope", escape(a["scope"]))
    runs = a.get("runs") or {}
    head.add_row("phases", escape(", ".join(f"{p} (x{runs.get(p, 1)})" for p in a["phases"])) or "-")
    head.add_row("workers", str(a.get("workers", "-")))
    for label, text in audit_lines(a):
        head.add_row(label, text)
    for n in a.get("notes", []):
        head.add_row("note", escape(n))
    rows = grid("task outputs by prefix")
    _add_columns(rows, "phase", "prefix", "type", "kind", "tasks", "bytes", "")
    for r in a["prefixes"]:
        mark = "ok" if r["chunk"] else "[dim]not a chunk[/dim]"
        if r.get("allowed"):
            mark = "[yellow]allowed[/yellow]"
        if r["foreign"]:
            mark = "[red bold]FOREIGN[/red bold]"
        rows.add_row(
            r["phase"],
            escape(r["prefix"]),
            escape(r["type"]),
            f"{r['kind']} ({r['family'] or '-'})",
            str(r["tasks"]),
            format_bytes(r["bytes"]),
            mark,
        )
    parts = [head, rows]
    if a["transfers"]:
        tr = grid("family changes (a task read a chunk of another family)")
        _add_columns(
            tr, "phase", "from prefix", "from type", "to prefix", "to type", "direction", "count", "bytes"
        )
        for c in a["transfers"]:
            tr.add_row(
                c["phase"],
                escape(c["from_prefix"]),
                escape(c["from_type"]),
                escape(c["to_prefix"]),
                escape(c["to_type"]),
                c["direction"],
                str(c["count"]),
                format_bytes(c["bytes"]),
            )
        parts.append(tr)
    return Group(*parts)


def _fmt_value(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int) and v >= 2**20:
        return f"{v} ({format_bytes(v)})"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) or "{}"
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "[]"
    return str(v)


PER_HOST_COLUMNS = (
    ("worker_class", "worker class"),
    ("workers", "workers"),
    ("threads_per_worker", "threads"),
    ("memory_limit", "memory limit"),
    ("rmm_pool_size", "RMM pool"),
    ("device_memory_limit", "spills device -> host above"),
    ("spilling", "spilling"),
    ("transports", "transports"),
    ("tls", "TLS"),
)


def per_host_table(per_host: dict[str, dict[str, Any]]):
    """A cluster on other hosts, host by host: what runs there and what its workers get."""
    present = [(k, title) for k, title in PER_HOST_COLUMNS if any(k in e for e in per_host.values())]
    t = grid("per host: what runs there and what its workers get")
    for title in ["host", "runs", *(title for _, title in present)]:
        t.add_column(title, overflow="fold")
    for host, e in per_host.items():
        runs = ["scheduler"] if e.get("scheduler") else []
        n = e.get("worker_entries")
        if n:
            runs.append(f"{n} worker entr{'y' if n == 1 else 'ies'}")
        cells = [
            "-" if k not in e else "on" if e[k] is True else "off" if e[k] is False else _fmt_value(e[k])
            for k, _ in present
        ]
        t.add_row(escape(host), escape(", ".join(runs)), *(escape(c) for c in cells))
    return t


def explain_table(d: dict[str, Any], rules: bool = False):
    """``gpuscale explain``: the plan, every knob with its value and source (and, with ``rules``,
    the rule behind it), the memory headroom. A knob's name is never wrapped."""
    from rich.console import Group

    spec = d["cluster"]
    head = pairs_table(
        f"gpuscale explain {escape(d['workload'])} on {d['family']} ({escape(d['backend'])}): nothing started"
    )
    head.add_row("params", escape(", ".join(f"{k}={v}" for k, v in d["params"].items())))
    head.add_row("backend", escape(d["reason"]))
    head.add_row(
        "cluster",
        escape(
            f"{spec['cls']}: {spec.get('workers')} worker(s) x "
            f"{spec.get('threads_per_worker')} thread(s), {spec['protocol']}"
        ),
    )
    run = d["run"]
    timed = f"{run['repeat']} timed repeat(s)"
    if run["repeat"] == "auto":
        auto = run["auto_repeat"]
        timed = (
            f"timed repeats until the median's relative error <= {auto['target_error'] * 100:g}% "
            f"({auto['min_repeats']}..{auto['max_repeats']} repeats, at most {auto['max_time']:g} s)"
        )
    head.add_row(
        "run",
        escape(
            f"{run['warmup']} warm-up + {timed}, memory check "
            f"{'on' if run['memory_check'] else 'off'}, strict backend "
            f"{'on' if run['strict_backend'] else 'off'}"
        ),
    )
    head.add_row("audit", escape(f"{d['audit']['scope']}; foreign chunks: {d['audit']['on_foreign_chunks']}"))
    rows = [
        (f"{scope}.{name}", _fmt_value(e["value"]), str(e["source"]), e.get("rule") or "")
        for scope, items in d["explained"].items()
        for name, e in items.items()
    ]
    knobs = Table(
        title="every knob: value, source" + ("" if rules else " (the rule behind each: --rules)"),
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    knobs.add_column("knob", no_wrap=True, min_width=max((len(r[0]) for r in rows), default=4))
    knobs.add_column("value", overflow="fold")
    knobs.add_column("source", no_wrap=True, min_width=max((len(r[2]) for r in rows), default=6))
    for name, value, source, _ in rows:
        knobs.add_row(escape(name), escape(value), escape(source))
    if rules:
        from rich.padding import Padding
        from rich.text import Text

        said = [Text("the rule behind each value", style="italic")]
        for name, _, _, rule in rows:
            if rule:
                said += [Text(name, style="bold", no_wrap=True), Padding(Text(rule), (0, 0, 0, 4))]
        knobs = Group(knobs, Text(""), *said)
    parts = [head, knobs]
    if d.get("per_host"):
        parts.append(per_host_table(d["per_host"]))
    parts.append(memory_table(d["memory"], "memory (estimate vs the planned workers)"))
    if d.get("notes"):
        notes = pairs_table(box=None)
        for n in d["notes"]:
            notes.add_row("note", escape(n))
        parts.append(notes)
    return Group(*parts)


def bench_html(title: str, frame, charts: dict[str, str]) -> str:
    """report.html of a bench folder: the charts (``<img>`` of the PNGs beside it, by relative
    name) and the tidy table."""
    imgs = "".join(
        f"<figure><img src='{html.escape(src)}' alt='{html.escape(name)}' style='max-width:100%'>"
        f"<figcaption>{html.escape(name.replace('_', ' '))}</figcaption></figure>"
        for name, src in charts.items()
    )
    cols = [c for c in COLUMNS if c not in ("case", "params", "min_s", "estimate_bytes")]
    head = "".join(f"<th>{c}</th>" for c in cols)

    def cell(c, v):
        if v is None or (isinstance(v, float) and v != v) or str(v) in ("<NA>", "nan", "None"):
            return "-"
        if c.endswith("_s"):
            return _fmt_s(float(v))
        return str(v)

    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell(c, row[c]))}</td>" for c in cols) + "</tr>"
        for _, row in frame.iterrows()
    )
    failed = int(frame["error"].fillna("").astype(bool).sum())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{len(frame)} case(s), {failed} with an error</p>"
        f"{imgs}<h2>cases</h2><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        "</body></html>"
    )


def records_table(recs: list, title: str, base: str | None = None) -> Table:
    """``gpuscale results list``: one row per record, newest first, named by its short id
    (``results show ID``; the path, relative to ``base``, in a wide terminal or ``--json``)."""
    apart = varying(r.params for r in recs)
    t = grid(escape(title))
    for col in ("id", "when (UTC)", "workload", "backend", "cluster", "median", "valid"):
        t.add_column(col, no_wrap=col not in ("when (UTC)", "workload", "backend"))
    for col in ("stdev", "repeats", "record"):
        t.add_column(col, no_wrap=col != "record", optional=True)
    for r in recs:
        t.add_row(
            r.short_id,
            r.timestamp[:16].replace("T", " "),
            escape(run_label(r.workload, r.params, apart))
            + (f" [yellow](uid {r.owner}'s file)[/yellow]" if getattr(r, "foreign", False) else ""),
            escape(backend_label(r.backend, r.family)),
            cluster_label(r.protocol, workers_of(r)),
            _fmt_s(r.median_s),
            "yes" if r.valid else "-" if r.valid is None else "[red]NO[/red]",
            _fmt_s(r.stdev_s),
            str(len(r.times_s)),
            escape(os.path.relpath(r.path, base) if base and r.path else r.path or ""),
        )
    return t


def run_label(workload: str, params: dict[str, Any], keep=()) -> str:
    """A workload with its parameters that are not at their defaults or are in ``keep`` (those
    that tell a table's rows apart): ``svd rows=2000, cols=10``."""
    return f"{workload} {brief_params(workload, params, keep)}"


def backend_label(backend: str, family: str) -> str:
    return backend if backend == family else f"{backend} ({family})"


def cluster_label(protocol: str, workers) -> str:
    return f"{protocol} {workers if workers is not None else '?'}w"


VERDICT_STYLE = {
    "faster": "green",
    "slower": "red bold",
    "same": "dim",
    "inconclusive": "yellow",
    "n/a": "yellow",
}


def compare_table(c: dict[str, Any]) -> Table:
    """``gpuscale results compare``: ratio B / A per case with its interval, verdict and the
    minimum detectable effect; the caption says whether the spread between runs is in it."""
    t = grid(
        escape(f"B / A: {c['b']} vs {c['a']} ({c['method']})"),
        caption=escape(f"between runs: {c['between_runs']}"),
        caption_justify="left",
    )
    t.add_column("case")
    for col in ("A median", "B median", "B / A", f"{int(c['confidence'] * 100)}% interval"):
        t.add_column(col, no_wrap=True)
    t.add_column("verdict")
    t.add_column("detectable", optional=True)
    apart = varying(p["params"] for p in c["cases"])
    for p in c["cases"]:
        ci = "-" if p["lo"] is None else f"{p['lo']:.3f}..{p['hi']:.3f}"
        style = VERDICT_STYLE.get(p["verdict"], "")
        case = (
            f"{run_label(p['workload'], p['params'], apart)} {backend_label(p['backend'], p['family'])} "
            f"{cluster_label(p['protocol'], p['workers'])}"
        )
        t.add_row(
            escape(case),
            _fmt_s(p["a_median_s"]),
            _fmt_s(p["b_median_s"]),
            f"{p['ratio']:.3f}",
            ci,
            f"[{style}]{escape(verdict_text(p))}[/{style}]",
            "-" if p["mde"] is None else f">= {100 * (p['mde'] - 1):.0f}% slower",
        )
    for side in ("only_a", "only_b"):
        for label in c[side]:
            t.add_row(escape(label), "", "", "", "", f"[yellow]only in {side[-1].upper()}[/yellow]", "")
    return t


def verdict_text(p: dict[str, Any]) -> str:
    """A case's verdict, and for an inconclusive one what would resolve it."""
    if p["verdict"] != "inconclusive":
        return p["verdict"]
    r = p.get("resolve")
    if r is None:
        return "inconclusive (on the margin)"
    return f"inconclusive (~{r['per_side']} {r['unit']} per side would resolve it)"


def gate_failure(p: dict[str, Any]) -> str:
    """One failed case of ``results compare --fail-if-slower``, for the one-line error."""
    ci = "no interval" if p["lo"] is None else f"interval {p['lo']:.3f}..{p['hi']:.3f}"
    what = "slower" if p["gate"] == "slower" else verdict_text({**p, "verdict": "inconclusive"})
    return f"{p['workload']} {p['size']} {p['backend']} B/A {p['ratio']:.3f} ({ci}): {what}"
