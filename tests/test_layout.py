"""The package's structure: no import circle among gpuscale's modules.

Every ``import`` / ``from ... import`` statement counts, the ones inside functions too (a
function-level import only delays a circle to the first call), and so does
``importlib.import_module("gpuscale....")`` with a literal name. ``from pkg import name`` is an
edge to ``pkg.name`` when that is a module, else to ``pkg``. Importing ``a.b`` also runs
``a/__init__``; those implicit edges to ancestor packages are not counted (every module would
otherwise sit in a circle with the lazy top-level facade), so a package ``__init__`` must not
import what imports it back: keep shared classes in a submodule (``backends/family.py``,
``workloads/base.py``) and let ``__init__`` re-export them.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "gpuscale"


def modules(root: pathlib.Path = PKG) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, pathlib.Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (None: not gpuscale's)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in known:
            return cand
        parts.pop()
    return None


def edges(known: dict[str, pathlib.Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}, gpuscale's own modules only."""
    graph: dict[str, dict[str, int]] = {}
    for mod, path in known.items():
        is_pkg = path.name == "__init__.py"
        here = mod if is_pkg else mod.rpartition(".")[0]
        out: dict[str, int] = {}

        def add(target: str | None, line: int) -> None:
            if target and target != mod:
                out.setdefault(target, line)

        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    add(_resolve(a.name, known), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    pkg = ".".join(base + ([node.module] if node.module else []))
                else:
                    pkg = node.module or ""
                for a in node.names:
                    sub = f"{pkg}.{a.name}"
                    add(sub if sub in known else _resolve(pkg, known), node.lineno)
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                name = node.args[0].value
                if name.startswith("."):
                    level = len(name) - len(name.lstrip("."))
                    base = here.split(".")
                    name = ".".join(base[: len(base) - (level - 1)] + [name.lstrip(".")])
                add(_resolve(name, known), node.lineno)
        graph[mod] = out
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _describe(comp: list[str], graph) -> str:
    inside = set(comp)
    ties = [f"{a} -> {b} (line {graph[a][b]})" for a in comp for b in sorted(graph[a]) if b in inside]
    return "circle: " + ", ".join(comp) + "\n    " + "\n    ".join(ties)


def test_no_import_circle():
    known = modules()
    graph = edges(known)
    found = circles(graph)
    assert not found, "import circles among gpuscale's modules:\n" + "\n".join(
        _describe(c, graph) for c in found
    )


def test_the_walk_sees_function_level_imports_and_circles(tmp_path):
    """The checker itself: a circle closed only by an import inside a function is found."""
    pkg = tmp_path / "gpuscale"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n    return c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text(
        "import importlib\n\ndef g():\n    return importlib.import_module('gpuscale.a')\n"
    )
    graph = edges(modules(pkg))
    assert graph["gpuscale.b"] == {"gpuscale.sub.c": 2}
    assert circles(graph) == [["gpuscale.a", "gpuscale.b", "gpuscale.sub.c"]]
    (pkg / "sub" / "c.py").write_text("def g():\n    return 1\n")
    assert circles(edges(modules(pkg))) == []


def test_public_modules_import_as_modules():
    """Every ``gpuscale.NAME`` module and every ``gpuscale.MODULE.NAME`` that README and the user
    docs use works with ``import gpuscale.MODULE as m`` in a fresh interpreter, not only as an attribute."""
    import re
    import subprocess
    import sys

    import gpuscale

    pages = [PKG.parent / "README.md", *(PKG.parent / "docs").rglob("*.md")]
    readme = "\n".join(p.read_text() for p in pages if "_build" not in p.parts)
    used = sorted(set(re.findall(r"gpuscale\.(\w+)\.(\w+)\(", readme)))
    assert ("linalg", "svd") in used and ("dataframe", "groupby_agg") in used
    lines = [f"import gpuscale.{m} as m_{m}" for m in gpuscale._MODULES]
    lines += [f"assert callable(m_{m}.{name}), '{m}.{name}'" for m, name in used if m in gpuscale._MODULES]
    lines += ["import gpuscale", "assert gpuscale.linalg is m_linalg and gpuscale.dataframe is m_dataframe"]
    assert {m for m, _ in used} <= set(gpuscale._MODULES)
    out = subprocess.run(
        [sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr


if __name__ == "__main__":  # pragma: no cover - print today's circles
    g = edges(modules())
    for c in circles(g):
        print(_describe(c, g))
    pytest.main([__file__])


# ---------------------------------------------------------------------------------------
# The layers table of docs/concepts/architecture.md
# ---------------------------------------------------------------------------------------
ARCHITECTURE = PKG.parent / "docs" / "concepts" / "architecture.md"


def unit_of(module: str, known: dict[str, pathlib.Path]) -> str:
    """A module's unit: its folder under gpuscale/ (``cluster/``), or itself at the top."""
    parts = module.split(".")
    if len(parts) >= 2 and known[".".join(parts[:2])].name == "__init__.py":
        return parts[1] + "/"
    return parts[1] if len(parts) > 1 else "gpuscale"


def _tables(text: str) -> list[list[list[str]]]:
    """The markdown tables after the ``## Layers`` heading: each a list of rows of cells."""
    section = text.split("\n## Layers", 1)[1]
    tables, rows = [], []
    for line in section.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            tables.append(rows[1:])  # without the header
            rows = []
    return tables


def layers_table() -> dict[str, int]:
    """Unit -> its row of the layers table, counted from the top."""
    layers = _tables(ARCHITECTURE.read_text())[0]
    row = {}
    for i, (_, units) in enumerate(layers):
        for u in units.split(","):
            row[u.strip().strip("`")] = i
    return row


def unit_edges(known, graph) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for a, targets in graph.items():
        for b, line in targets.items():
            ua, ub = unit_of(a, known), unit_of(b, known)
            if ua != ub:
                out.setdefault((ua, ub), []).append(f"{a} -> {b} (line {line})")
    return out


def test_every_import_keeps_to_the_layers_table():
    known = modules()
    row = layers_table()
    units = {unit_of(m, known) for m in known}
    assert not units - set(row), f"units missing from the layers table: {sorted(units - set(row))}"
    assert not set(row) - units, f"the layers table names units that do not exist: {sorted(set(row) - units)}"
    down = {(a, b): why for (a, b), why in unit_edges(known, edges(known)).items() if row[b] > row[a]}
    assert not down, "imports down the layers table:\n" + "\n".join(
        f"{a} -> {b}: {v[:3]}" for (a, b), v in down.items()
    )


def test_the_units_import_each_other_in_no_loop():
    known = modules()
    graph: dict[str, dict[str, int]] = {}
    for a, b in unit_edges(known, edges(known)):
        graph.setdefault(a, {})[b] = 0
    assert not circles(graph), circles(graph)
