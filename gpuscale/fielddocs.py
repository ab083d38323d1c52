"""Field descriptions from attribute docstrings, read from the module's source in one parse.

A settings section or the record is a pydantic model whose fields are described by the string
right under each. :func:`describe` gives the descriptions pydantic's ``use_attribute_docstrings``
would, parsing each module once (docs/benchmarks/fixed-cost.md).
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys


@functools.cache
def _docstrings(path: str) -> dict[str, dict[str, str]]:
    """{class name: {attribute: docstring}} of every class in the source file ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):  # no source shipped: no descriptions
        return {}
    found: dict[str, dict[str, str]] = {}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]  # a module's own, and theirs
    for node in classes:
        classes += [n for n in node.body if isinstance(n, ast.ClassDef)]
        found[node.name] = {
            a.target.id: inspect.cleandoc(b.value.value)
            for a, b in zip(node.body, node.body[1:])
            if isinstance(a, ast.AnnAssign)
            and isinstance(a.target, ast.Name)
            and isinstance(b, ast.Expr)
            and isinstance(b.value, ast.Constant)
            and isinstance(b.value.value, str)
        }
    return found


def describe(model: type) -> None:
    """Give each field of the pydantic ``model`` that has no description its attribute docstring."""
    path = getattr(sys.modules.get(model.__module__), "__file__", None)
    docs = _docstrings(path).get(model.__name__, {}) if path else {}
    for name, field in model.model_fields.items():
        if field.description is None and name in docs:
            field.description = docs[name]
