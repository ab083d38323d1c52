"""Reference tables generated from the code's own declarations at build time.

``{gpuscale-settings}`` lays out every setting as :data:`gpuscale.config.SETTINGS` declares it
(nested sections flattened to dotted keys, with keyword and flag), and ``{gpuscale-fields}
module:Model`` the fields of one pydantic model (the result record). Names, types, defaults and
descriptions come from the models (descriptions are their attribute docstrings), so there is no
second list to keep in step.
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

    return [s.key for s in config.SETTINGS]


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


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


def setting_facts(setting) -> str:
    """One setting's line of facts: type, default, environment variable, keyword, flag, and
    "not in a profile" where a profile may not set it (``config.Knob``)."""
    field = setting.field
    facts = [
        f"``{type_text(field.annotation, field.metadata)}``",
        _default_fact(field),
        f"env ``{setting.env}``",
    ]
    if setting.keyword:
        facts.append(f"keyword ``{setting.keyword}``")
    if setting.opts:
        facts.append(f"flag ``{'/'.join(setting.opts)}``")
    if not setting.knob.in_profile:
        facts.append("not in a profile")
    return " · ".join(facts)


def settings_lines() -> list[str]:
    """The settings reference (reST), from the declaration (``gpuscale.config.SETTINGS``), grouped
    by section."""
    from gpuscale import config

    groups: dict[str, list[tuple[str, str, str]]] = {}
    for setting in config.SETTINGS:
        section = setting.key.rpartition(".")[0] or "top level"
        groups.setdefault(section, []).append(
            (f"``{setting.key}``", setting_facts(setting), _one_line(setting.field.description))
        )
    lines: list[str] = []
    for section, items in groups.items():
        lines += [f".. rubric:: {section}", ""] + definitions(items)
    return lines


class SettingsTable(SphinxDirective):
    """Every setting of ``gpuscale.config.Settings``, grouped by section: key, type, default,
    environment variable and, where there is one, keyword and flag, then the description."""

    has_content = False

    def run(self):
        return self._parse(settings_lines())

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
