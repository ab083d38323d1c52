"""``gpuscale run WORKLOAD``: one command per registered workload, its flags built from the
workload's Params and the settings' declaration. Building them imports no cluster machinery:
``gpuscale run --help`` lists every workload's command, and what a command does once its flags
are parsed is :mod:`gpuscale.cli.run_callback`, imported when it runs (:class:`~.lazy.Deferred`)."""

from __future__ import annotations

from typing import Any

import click

from .. import workloads
from ..data.inputs import FORMAT_NAMES
from .base import CONTEXT, Group, Panelled, write_panels
from .lazy import Deferred
from .options import Typed, setting_options


class RunGroup(Group):
    """``gpuscale run NAME``: one sub-command per registered workload, built from its Params."""

    def list_commands(self, ctx):
        return workloads.names()

    def get_command(self, ctx, name):
        return workload_command(workloads.get(name))  # unknown: a UserError listing the names

    def resolve_command(self, ctx, args):
        if args and args[0].startswith("-"):
            raise click.UsageError(f"give the workload first: gpuscale {self.name} WORKLOAD [OPTIONS]")
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "WORKLOAD [WORKLOAD PARAMETERS] [FLAGS]")

    def format_commands(self, ctx, formatter):
        """``--help``: the workloads (each with its own ``--help``: its parameters) and the
        flags every workload takes."""
        rows = [(name, self.get_command(ctx, name).help) for name in self.list_commands(ctx)]
        with formatter.section(f"Workloads ({ctx.command_path} WORKLOAD --help: its parameters, typed)"):
            formatter.write_dl(rows)
        write_panels(
            ctx, formatter, run_params(), "Flags every workload takes", " (flags every workload takes)"
        )


@click.group(cls=RunGroup, context_settings=CONTEXT)
def run():
    """Run a workload, validate it and record the result."""


def param_option(fname: str, field) -> click.Option:
    """One workload parameter as a flag typed from its annotation (:func:`workloads.value_kind`)."""
    flag = "--" + fname.replace("_", "-")
    desc = field.description or ""
    help_ = (
        desc
        if "default" in desc.lower() or field.default is None
        else f"{desc} (default: {field.default})".strip()
    )
    kind, values = workloads.value_kind(field.annotation)
    if kind == "bool":
        return click.Option([f"{flag}/--no-{fname.replace('_', '-')}", fname], default=None, help=help_)
    ptype = Typed(kind, values) if kind != "text" else click.STRING
    return click.Option([flag, fname], type=ptype, default=None, help=help_)


def run_params() -> list[click.Parameter]:
    """The flags every workload's ``run`` (and ``explain``) command takes: the settings' flags
    (``config.Flag``) and the run's own (``gpuscale run --help`` lists them)."""
    return [
        *setting_options("cluster", "client", "run"),
        click.Option(
            ["--trace", "trace_dir"],
            metavar="DIR",
            help="capture a trace of the run into this new or empty folder (see `gpuscale trace`)",
        ),
        click.Option(
            ["--dashboard", "dashboard"],
            is_flag=True,
            help="print the dashboard link (stderr) before the work and keep the cluster up "
            "after it until Ctrl-C",
        ),
        click.Option(["--json", "as_json"], is_flag=True, help="print exactly one JSON object on stdout"),
    ]


def workload_command(cls) -> click.Command:
    """``gpuscale run NAME`` for the workload class ``cls``: its parameters' flags, its data
    flags (:func:`data_options`) and :func:`run_params`; running it is
    :func:`gpuscale.cli.run_callback.run_workload`."""
    params = [param_option(fname, field) for fname, field in cls.Params.model_fields.items()]
    return Panelled(
        cls.name,
        callback=Deferred("run_callback:run_workload", cls),
        params=params + data_options(cls) + run_params(),
        help=f"{cls.description}.",
        context_settings=CONTEXT,
        first_panel=f"Parameters of {cls.name}",
    )


def data_options(cls) -> list[click.Option]:
    """``--input``, ``--output``, ``--overwrite``, ``--validate`` for workloads that run on the
    user's own data (``input_formats``); none for the others."""
    formats = getattr(cls, "input_formats", ())
    if not formats:
        return []
    reads = " / ".join(FORMAT_NAMES[f] for f in formats)
    writes = " / ".join(getattr(cls, "output_formats", ()))
    return [
        click.Option(
            ["--input", "input_path"],
            metavar="PATH",
            default=None,
            help=f"run on your own data: a {reads} file (or folder) instead of generated data",
        ),
        click.Option(
            ["--output", "output_path"],
            metavar="PATH",
            default=None,
            help=f"write the result to PATH ({writes}) once it validated; never over an "
            "existing file unless --overwrite",
        ),
        click.Option(
            ["--overwrite", "overwrite"],
            is_flag=True,
            default=False,
            help="let --output replace an existing file",
        ),
        click.Option(
            ["--validate", "validate"],
            type=Typed("choice", ["off", "fast", "full"]),
            default=None,
            help="validation: off, fast (identities + a sample; the default on --input) or full "
            "(recompute everything with NumPy / pandas on the host, where it fits)",
        ),
    ]


def pop_data_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The data flags' values out of a command's keyword arguments, as ``api.run``'s keywords
    (``data``, ``output``, ``overwrite``, ``validate``); only those given."""
    out = {
        "data": kwargs.pop("input_path", None),
        "output": kwargs.pop("output_path", None),
        "overwrite": bool(kwargs.pop("overwrite", False)),
        "validate": kwargs.pop("validate", None),
    }
    return {k: v for k, v in out.items() if v not in (None, False)}
