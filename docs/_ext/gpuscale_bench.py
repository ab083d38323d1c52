"""Benchmark tables generated from the stored results under ``docs/bench-*`` at build time.

``{gpuscale-bench} PATH`` reads one stored result (JSON, or the CSV table of ``gpuscale bench``;
PATH is relative to ``docs/``) and lays out a table, so a page shows the figures the scripts
wrote and no copy of them. Either a ``:view:`` made for one script's output:

``user-queries``
    what ``workflows/user_queries.py`` prints for its ``--json`` file (its own ``tables()``);
``library``
    ``gpuscale bench``'s cases (``table.csv`` or the ledger's ``cases``), GPU against CPU per size;
``groupby-grid``
    ``workflows/shape_grid.py``'s ``grid``: gpuscale's plan and time per (rows, keys) against the
    best plain-Dask way and the chunk library alone;

or, without a view, one row per item of the list at ``:rows:`` (a dotted path; by default the
file's ``rows``, ``results`` or ``cases``, the file itself where it is a list, or one row: a
record), filtered by ``:where: key=value; ...``, with one column per content line
``Header | {format}``. A format is Python's (``{median_s:.4f}``, ``{params[rows]:,}``), plus
three suffixes of the format spec: ``ms`` (seconds in milliseconds: ``{median_s:.1fms}``), ``mib``
and ``gib`` (bytes in MiB or GiB: ``{measured_peak:.0fmib}``); a dict without a spec shows as
``k=v, ...``, and a field a row lacks as ``-``.
"""

from __future__ import annotations

import csv
import json
import math
import pathlib
import string
import sys

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

DOCS = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = DOCS.parent / "workflows"


class _Missing(Exception):
    pass


class _Cells(string.Formatter):
    """``str.format`` with the ``ms`` / ``mib`` / ``gib`` suffixes, and a missing field as ``-``."""

    def get_field(self, field_name, args, kwargs):
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, IndexError, TypeError) as e:
            raise _Missing(field_name) from e

    def format_field(self, value, format_spec):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            raise _Missing(format_spec)
        for suffix, scale in (("ms", 1e3), ("mib", 2.0**-20), ("gib", 2.0**-30)):
            if format_spec.endswith(suffix):
                return format(float(value) * scale, format_spec[: -len(suffix)])
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, dict) and not format_spec:
            return ", ".join(f"{k}={v}" for k, v in value.items())
        return format(value, format_spec)

    def cell(self, template: str, row: dict) -> str:
        try:
            return self.format(template, **row)
        except _Missing:
            return "-"


CELLS = _Cells()


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return {"True": True, "False": False}.get(text, text)


def load(path: pathlib.Path):
    """A stored result: JSON as written, or a CSV table as a list of rows (numbers parsed)."""
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return json.loads(path.read_text())


def items(data, rows: str | None) -> list[dict]:
    """The list at the dotted path ``rows`` of ``data`` (``data`` itself when it is a list)."""
    for key in (rows or "").split(".") if rows else []:
        data = data[key]
    if isinstance(data, dict):
        data = next((data[k] for k in ("rows", "results", "cases") if isinstance(data.get(k), list)), [data])
    if not isinstance(data, list):
        raise ValueError(f"no list of rows at {rows!r}")
    return data


def matches(row: dict, where: str | None) -> bool:
    for cond in (where or "").split(";"):
        if cond.strip():
            key, _, want = cond.partition("=")
            if str(row.get(key.strip())) != want.strip():
                return False
    return True


def columns(content: list[str]) -> list[tuple[str, str]]:
    out = []
    for line in content:
        if line.strip():
            head, sep, template = line.partition("|")
            if not sep:
                raise ValueError(f"a column is `Header | {{format}}`, not {line!r}")
            out.append((head.strip(), template.strip()))
    return out


def plain_table(rows: list[dict], cols: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    return [h for h, _ in cols], [[CELLS.cell(t, r) for _, t in cols] for r in rows]


def library_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """GPU and CPU medians of each (workload, size) of a ``gpuscale bench`` sweep."""
    cells: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        cells.setdefault((r["workload"], r["size"]), {})[r["backend"]] = r
    body = []
    for (workload, size), by in cells.items():
        gpu, cpu = by.get("gpu", {}), by.get("cpu", {})
        g, c = gpu.get("median_s"), cpu.get("median_s")
        ratio = f"{c / g:.1f} x" if isinstance(g, float) and isinstance(c, float) else "-"
        valid = all(x.get("valid") is True for x in (gpu, cpu))
        body.append([workload, size, _seconds(g), _seconds(c), ratio, "yes" if valid else "no"])
    return ["workload", "size", "GPU median", "CPU median", "CPU / GPU", "valid"], body


def _seconds(s) -> str:
    if not isinstance(s, float):
        return "-"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def groupby_grid(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Per (rows, keys): gpuscale's plan and median against the best plain-Dask way and the chunk
    library alone on one frame (``shape_grid.py``'s sides: ``gpuscale ...``, ``plain, WAY``,
    ``cudf alone`` / ``pandas alone``)."""
    cells: dict[tuple[int, int], list[dict]] = {}
    for r in rows:
        cells.setdefault((r["rows"], r["keys"]), []).append(r)
    body = []
    for (n, k), sides in cells.items():
        ours = next(s for s in sides if s["side"].startswith("gpuscale"))
        plain = [s for s in sides if s["side"].startswith("plain")]
        alone = next((s for s in sides if s["side"].endswith(" alone")), None)
        best = min(plain, key=lambda s: s["median_s"]) if plain else None
        agree = all(s.get("agrees", True) for s in sides)
        body.append(
            [
                f"{n:,}",
                f"{k:,}",
                str(ours.get("partitions", "-")),
                str(ours.get("plan", "-")),
                f"{ours['median_s']:.4f}",
                f"{best['median_s']:.4f} ({best['side'].removeprefix('plain, ')})" if best else "-",
                f"{alone['median_s']:.4f}" if alone else "-",
                f"{ours['median_s'] / alone['median_s']:.2f}" if alone else "-",
                f"{ours['median_s'] / best['median_s']:.2f}" if best else "-",
                "all agree" if agree else "NO",
            ]
        )
    head = ["rows", "keys", "partitions", "plan", "gpuscale, s", "best plain Dask, s (way)"]
    return head + ["library alone, s", "/ alone", "/ plain", "answers"], body


def table_node(head: list[str], body: list[list[str]]) -> nodes.table:
    table = nodes.table(classes=["gpuscale-bench"])
    group = nodes.tgroup(cols=len(head))
    table += group
    group += [nodes.colspec(colwidth=1) for _ in head]
    thead, tbody = nodes.thead(), nodes.tbody()
    group += [thead, tbody]
    for part, rows in ((thead, [head]), (tbody, body)):
        for cells in rows:
            row = nodes.row()
            for text in cells:
                row += nodes.entry("", nodes.paragraph(text=text))
            part += row
    return table


def user_queries_text(data: dict) -> str:
    """What ``workflows/user_queries.py`` prints for this data: its own ``tables()``."""
    sys.path.insert(0, str(WORKFLOWS))
    try:
        import user_queries
    finally:
        sys.path.remove(str(WORKFLOWS))
    return user_queries.tables(data)[0].strip("\n")


class BenchTable(SphinxDirective):
    """A table of one stored result (see the module's docstring)."""

    required_arguments = 1
    has_content = True
    option_spec = {"view": directives.unchanged, "rows": directives.unchanged, "where": directives.unchanged}

    def run(self):
        path = DOCS / self.arguments[0]
        self.env.note_dependency(str(path))
        try:
            data = load(path)
            view = self.options.get("view")
            if view == "user-queries":
                text = user_queries_text(data)
                return [nodes.literal_block(text, text, language="text")]
            rows = [r for r in items(data, self.options.get("rows")) if matches(r, self.options.get("where"))]
            if view == "library":
                head, body = library_table(rows)
            elif view == "groupby-grid":
                head, body = groupby_grid(rows)
            elif view is None:
                head, body = plain_table(rows, columns(self.content))
            else:
                raise ValueError(f"no view {view!r}: user-queries, library or groupby-grid")
        except (OSError, ValueError, KeyError, StopIteration) as e:
            raise self.error(f"gpuscale-bench {self.arguments[0]}: {e!r}") from e
        if not body:
            raise self.error(f"gpuscale-bench {self.arguments[0]}: no rows")
        return [table_node(head, body)]


def setup(app):
    app.add_directive("gpuscale-bench", BenchTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
