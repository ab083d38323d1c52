"""Reference tables generated from the code's own declarations at build time.

``{gpuscale-settings}`` lays out every setting of :class:`gpuscale.config.Settings` (nested
sections flattened to dotted keys), and ``{gpuscale-fields} module:Model`` the fields of one
pydantic model (the result record). Names, types, defaults and descriptions come from the
models (descriptions are their attribute docstrings), so there is no second list to keep in step.
"""
from __future__ import annotations

import importlib
import types
import typing

import annotated_types
from docutils.statemachine import StringList
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from sphinx.util.docutils import SphinxDirective

_BOUNDS = ((annotated_types.Gt, ">"), (annotated_types.Ge, ">="), (annotated_types.Lt, "<"),
           (annotated_types.Le, "<="))


def _bounds(metadata) -> str:
    out = []
    for m in metadata:
        for kind, sign in _BOUNDS:
            if isinstance(m, kind):
                out.append(f"{sign} {getattr(m, kind.__name__.lower())}")
    return " ".join(out)


def type_text(ann, metadata=()) -> str:
    """A field's type in words: ``int > 0 | null``, ``auto | tls | off``, ``list of str``."""
    origin = typing.get_origin(ann)
    if ann is type(None):
        return "null"
    if origin is typing.Annotated:
        base, *meta = typing.get_args(ann)
        return type_text(base, (*meta, *metadata))
    if origin is typing.Literal:
        return " | ".join(str(v) for v in typing.get_args(ann))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in typing.get_args(ann))
    if origin in (tuple, list):
        args = [a for a in typing.get_args(ann) if a is not Ellipsis]
        return "list of " + type_text(args[0]) if args else "list"
    if origin is dict:
        return "mapping"
    if origin is typing.Any or ann is typing.Any:
        return "any"
    name = getattr(ann, "__name__", str(ann))
    bound = _bounds(metadata)
    return f"{name} {bound}" if bound else name


def default_text(field) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    return value_text(value) if field.default is not PydanticUndefined or field.default_factory else "required"


def value_text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _is_model(ann) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def settings_rows(model: type[BaseModel], prefix: str = ""):
    """(dotted key, field) for every leaf setting, in declaration order."""
    for name, field in model.model_fields.items():
        key = prefix + name.replace("_", "-")
        if _is_model(field.annotation):
            yield from settings_rows(field.annotation, key + ".")
        else:
            yield key, field


def setting_keys() -> list[str]:
    from gpuscale import config
    return [key for key, _ in settings_rows(config.Settings)]


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _cell(text: str) -> list[str]:
    return [text] if text else [""]


def list_table(header: list[str], rows: list[list[str]], widths: str) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", f"   :widths: {widths}", "   :class: gpuscale-table", ""]
    for row in [header, *rows]:
        for i, cell in enumerate(row):
            lead = "   * - " if i == 0 else "     - "
            lines.append(lead + (cell or ""))
    return lines


def _flags() -> dict[str, str]:
    """Keyword -> the CLI flag of the same name (``memory_limit`` -> ``--memory-limit``)."""
    from gpuscale import cli
    cmd = cli.run.get_command(None, "svd")
    return {p.name: "/".join(p.opts + p.secondary_opts) for p in cmd.params if p.opts}


class SettingsTable(SphinxDirective):
    """Every setting of ``gpuscale.config.Settings``: key, type, default, description, with its
    environment variable and, where there is one, its keyword and flag."""

    has_content = False

    def run(self):
        from gpuscale import config
        keyword_of = {key: kw for kw, key in config.KEYWORDS.items()}
        flags = _flags()
        rows = []
        for key, field in settings_rows(config.Settings):
            env = "DASK_GPUSCALE__" + key.replace("-", "_").replace(".", "__").upper()
            ways = [f"env ``{env}``"]
            kw = keyword_of.get(key)
            if kw:
                ways.append(f"keyword ``{kw}``")
                if kw in flags:
                    ways.append(f"flag ``{flags[kw]}``")
            desc = _one_line(field.description)
            desc = (desc + " " if desc else "") + "(" + "; ".join(ways) + ")"
            rows.append([f"``{key}``", f"``{type_text(field.annotation, field.metadata)}``",
                         f"``{default_text(field)}``", desc])
        return self._parse(list_table(["Setting", "Type", "Default", "Description"], rows, "22 18 12 48"))

    def _parse(self, lines: list[str]):
        return self.parse_text_to_nodes("\n".join(lines))


class FieldsTable(SettingsTable):
    """The fields of one pydantic model (``module:Model``): name, type, default, description."""

    required_arguments = 1

    def run(self):
        module, _, name = self.arguments[0].partition(":")
        model = getattr(importlib.import_module(module), name)
        rows = []
        for fname, field in model.model_fields.items():
            key = field.alias or fname
            rows.append([f"``{key}``", f"``{type_text(field.annotation, field.metadata)}``",
                         f"``{default_text(field)}``", _one_line(field.description)])
        return self._parse(list_table(["Field", "Type", "Default", "Description"], rows, "20 20 12 48"))


def setup(app):
    app.add_directive("gpuscale-settings", SettingsTable)
    app.add_directive("gpuscale-fields", FieldsTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
