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
from pydantic import BaseModel
from sphinx.util.docutils import SphinxDirective

_BOUNDS = (
    (annotated_types.Gt, ">"),
    (annotated_types.Ge, ">="),
    (annotated_types.Lt, "<"),
    (annotated_types.Le, "<="),
)


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
    """The default as YAML would write it; "required" without one, "made per record" for a
    factory that gives a new value each call (an id, a time)."""
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        first, second = field.default_factory(), field.default_factory()
        return value_text(first) if first == second else "made per record"
    return value_text(field.default)


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


def _flags() -> dict[str, str]:
    """Keyword -> the CLI flag of the same name (``memory_limit`` -> ``--memory-limit``)."""
    from gpuscale import cli

    cmd = cli.run.get_command(None, "svd")
    return {p.name: "/".join(p.opts + p.secondary_opts) for p in cmd.params if p.opts}


def _default_fact(field) -> str:
    text = default_text(field)
    return text if text in ("required", "made per record") else f"default ``{text}``"


def definitions(items: list[tuple[str, str, str]]) -> list[str]:
    """reST definition list: ``name`` / a line of facts / the description."""
    lines: list[str] = []
    for term, facts, desc in items:
        lines += [term, "   " + facts, ""]
        if desc:
            lines += ["   " + desc, ""]
    return lines


class SettingsTable(SphinxDirective):
    """Every setting of ``gpuscale.config.Settings``, grouped by section: key, type, default,
    environment variable and, where there is one, keyword and flag, then the description."""

    has_content = False

    def run(self):
        from gpuscale import config

        keyword_of = {key: kw for kw, key in config.KEYWORDS.items()}
        flags = _flags()
        groups: dict[str, list[tuple[str, str, str]]] = {}
        for key, field in settings_rows(config.Settings):
            section = key.rpartition(".")[0] or "top level"
            env = "DASK_GPUSCALE__" + key.replace("-", "_").replace(".", "__").upper()
            facts = [
                f"``{type_text(field.annotation, field.metadata)}``",
                _default_fact(field),
                f"env ``{env}``",
            ]
            kw = keyword_of.get(key)
            if kw:
                facts.append(f"keyword ``{kw}``")
                if kw in flags:
                    facts.append(f"flag ``{flags[kw]}``")
            groups.setdefault(section, []).append(
                (f"``{key}``", " · ".join(facts), _one_line(field.description))
            )
        lines: list[str] = []
        for section, items in groups.items():
            lines += [f".. rubric:: {section}", ""] + definitions(items)
        return self._parse(lines)

    def _parse(self, lines: list[str]):
        return self.parse_text_to_nodes("\n".join(lines))


class FieldsTable(SettingsTable):
    """The fields of one pydantic model (``module:Model``): name, type, default, description."""

    required_arguments = 1

    def run(self):
        module, _, name = self.arguments[0].partition(":")
        model = getattr(importlib.import_module(module), name)
        items = []
        for fname, field in model.model_fields.items():
            facts = f"``{type_text(field.annotation, field.metadata)}`` · {_default_fact(field)}"
            items.append((f"``{field.alias or fname}``", facts, _one_line(field.description)))
        return self._parse(definitions(items))


def setup(app):
    app.add_directive("gpuscale-settings", SettingsTable)
    app.add_directive("gpuscale-fields", FieldsTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
