"""Figures of the package's code, for a maintainer comparing two versions of it.

    python workflows/code_figures.py [PACKAGE_DIR]      (default: gpuscale)

Prints: lines, prose words per 1000 lines (docstrings and comments), functions over 60
lines, and imports of the package's own modules made inside functions (lazy GPU imports are
imports of other packages, so they do not count).
"""

from __future__ import annotations

import argparse
import ast
import io
import pathlib
import sys
import tokenize

LONG = 60


def _words(text: str) -> int:
    return sum(1 for w in text.split() if any(c.isalpha() for c in w))


def figures(root: pathlib.Path) -> dict[str, float]:
    lines = prose = long_functions = own_inner_imports = 0
    package = root.name
    for path in sorted(root.rglob("*.py")):
        src = path.read_text()
        lines += src.count("\n")
        tree = ast.parse(src)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (
                isinstance(body, list)
                and body
                and isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            ):
                doc = ast.get_docstring(node, clean=False)
                prose += _words(doc or "")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > LONG:
                    long_functions += 1
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (
                        inner.level or (inner.module or "").split(".")[0] == package
                    ):
                        own_inner_imports += 1
                    elif isinstance(inner, ast.Import) and any(
                        a.name.split(".")[0] == package for a in inner.names
                    ):
                        own_inner_imports += 1
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                prose += _words(tok.string.lstrip("#"))
    return {
        "lines": lines,
        "prose_words_per_kloc": round(prose * 1000 / max(lines, 1)),
        "functions_over_60_lines": long_functions,
        "own_imports_inside_functions": own_inner_imports,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "package", nargs="?", type=pathlib.Path, default=pathlib.Path(__file__).parents[1] / "gpuscale"
    )
    root = ap.parse_args().package
    if not (root / "__init__.py").is_file():
        sys.exit(f"code_figures: {root} is not a Python package; give a folder holding __init__.py")
    for k, v in figures(root).items():
        print(f"{k:32} {v}")
