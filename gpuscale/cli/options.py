"""Flags: their types (checked where they are given, shown in ``--help``) and the settings'
flags, built from their one declaration (``config.Flag``) and mapped one-to-one onto API
keywords (``config.KEYWORDS``)."""

from __future__ import annotations

import typing
from typing import Any

import click

from .. import backends, config
from ..errors import UserError


class Typed(click.ParamType):
    """A flag's type (INTEGER, FLOAT, a choice, INTEGER|auto): ``--help`` shows it and values
    are converted to it. A value that does not convert is passed on as given, so the check
    that decides (the parameter model, or the settings schema) answers with its one-line error
    naming the flag and the fix."""

    KINDS = {"int": ("INTEGER", int), "float": ("FLOAT", float)}

    def __init__(self, kind: str, values: list | None = None):
        self.kind, self.values = kind, list(values or [])
        self.name = {"choice": "choice", "int-or-choice": "integer"}.get(kind, kind)

    def get_metavar(self, param, ctx=None) -> str:
        if self.kind == "choice":
            return "[" + "|".join(map(str, self.values)) + "]"
        if self.kind == "int-or-choice":
            return "|".join(["INTEGER", *map(str, self.values)])
        return self.KINDS[self.kind][0]

    def convert(self, value, param, ctx):
        if not isinstance(value, str) or self.kind == "choice" or value in self.values:
            return value
        try:
            return self.KINDS.get(self.kind, self.KINDS["int"])[1](value)
        except ValueError:
            return value

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [CompletionItem(str(v)) for v in self.values if str(v).startswith(incomplete)]


class BackendName(click.ParamType):
    """``--backend``: shown as the families (``[auto|cpu|gpu]``), completed with their aliases
    too; the value is passed on as given and :func:`gpuscale.backends.select` decides what it
    means (an unknown name: its one-line error listing the names)."""

    name = "backend"

    def get_metavar(self, param, ctx=None) -> str:
        return "[" + "|".join(backends.choices()) + "]"

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [
            CompletionItem(n) for n in [*backends.choices(), *backends.aliases()] if n.startswith(incomplete)
        ]


class BackendOption(click.Option):
    """``--backend``, its help naming the families and their aliases as the registry has them."""

    def get_help_record(self, ctx):
        self.help = f"which backend family runs the work: {backends.vocabulary()}"
        return super().get_help_record(ctx)


class Whole(Typed):
    """A whole-number flag checked where it is given (``--warmup``, ``--repeat``): anything but
    a whole number >= ``minimum`` (or one of ``values``) is a one-line error naming the flag."""

    def __init__(self, minimum: int, values: list | None = None):
        super().__init__("int-or-choice" if values else "int", values)
        self.minimum = minimum

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if isinstance(v, str) and v.strip().lower() in self.values:
            return v.strip().lower()
        flag = param.opts[0] if param is not None else "the value"
        n = v if isinstance(v, int) else None
        if self.values and (n is None or n < self.minimum):
            words = " or ".join(map(str, self.values))
            raise UserError(
                f"{flag} must be a whole number >= {self.minimum} or {words}, got {v!r}",
                f"e.g. {flag} 5 or {flag} {self.values[0]}",
            )
        if n is None:
            raise UserError(f"{flag} must be a whole number, got {v!r}", f"e.g. {flag} 3")
        if n < self.minimum:
            raise UserError(
                f"{flag} must be >= {self.minimum}, got {n}", f"e.g. {flag} {max(self.minimum, 3)}"
            )
        return n


INT, FLOAT = Typed("int"), Typed("float")


def declaration(setting, help_: str | None = None) -> tuple[list[str], dict[str, Any]]:
    """The click declaration of a setting's flag (``config.Flag``): its options and attributes
    (``cls``: the option class)."""
    flag = setting.flag
    attrs: dict[str, Any] = {"help": (flag.help if help_ is None else help_) or None}
    if flag.metavar:
        attrs["metavar"] = flag.metavar
    opts = list(setting.opts)
    if flag.kind == "pair":
        opts = ["/".join(opts)]
        attrs["default"] = None  # not given: the setting's layers decide
    elif flag.kind == "switch":
        attrs.update(is_flag=True, default=None, **({} if flag.value is True else {"flag_value": flag.value}))
    elif flag.kind == "backend":
        attrs.update(cls=BackendOption, type=BackendName())
    elif flag.kind == "choice":
        attrs["type"] = click.Choice([str(v) for v in typing.get_args(setting.field.annotation)])
    elif flag.kind in ("int", "float"):
        attrs["type"] = {"int": INT, "float": FLOAT}[flag.kind]
    elif flag.kind == "count":
        attrs["type"] = Whole(0)
    elif flag.kind == "repeat":
        attrs["type"] = Whole(1, ["auto"])
    return [*opts, setting.name], attrs


def _declarations(scopes: tuple[str, ...]) -> list[tuple[list[str], dict[str, Any]]]:
    return [declaration(s) for scope in scopes for s in config.FLAGS.values() if s.flag.scope == scope]


def setting_options(*scopes: str) -> list[click.Option]:
    """The flags of the settings whose ``Flag.scope`` is one of ``scopes``, scope by scope, each
    in declaration order (``cluster``: every command that builds a cluster; ``client``: those
    that may use a running one by its scheduler file; ``run``: run and explain)."""
    return [attrs.pop("cls", click.Option)(decls, **attrs) for decls, attrs in _declarations(scopes)]


def setting_flags(*scopes: str) -> typing.Callable:
    """A decorator adding :func:`setting_options` to a command."""

    def decorate(f):
        for decls, attrs in reversed(_declarations(scopes)):
            f = click.option(*decls, **attrs)(f)
        return f

    return decorate


def setting_option(name: str, help_: str) -> typing.Callable:
    """A decorator adding the flag of the setting ``name`` (its parameter name) with a command's
    own help."""
    decls, attrs = declaration(config.FLAGS[name], help_)
    return click.option(*decls, **attrs)


def split(kwargs: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """A command's keyword arguments -> (profile, the settings its flags set, by keyword); what
    is left in ``kwargs`` is the command's own (a workload's parameters)."""
    settings = {k: kwargs.pop(k) for k in config.FLAGS if k in kwargs}
    return settings.pop(config.PROFILE_FLAG, None), settings


def workload_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a workload command's flags in ``kwargs`` give :func:`gpuscale.api.run` and
    :func:`gpuscale.api.explain`: ``profile`` and ``cluster_settings`` (:func:`split`), and the
    workload's parameters given on the command line (those not None)."""
    profile, settings = split(kwargs)
    return {
        "profile": profile,
        "cluster_settings": settings,
        **{k: v for k, v in kwargs.items() if v is not None},
    }
