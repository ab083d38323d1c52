"""What every command shares: the help layout (sections of options, whole words), the group
that ends every failure with one line, and the output of a result (a table, or one JSON object
with ``--json``)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
import traceback
import typing
from typing import Any

import click

from .. import config, errors, interrupts
from ..errors import UserError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def emit(data: Any, as_json: bool, render: typing.Callable[[], Any]) -> None:
    """What a command shows: ``data`` as exactly one JSON object on stdout (``--json``), else
    ``render()`` (a rich renderable, from :mod:`gpuscale.records.report` or
    :mod:`gpuscale.trace.render`) on the console."""
    try:
        if as_json:
            click.echo(json.dumps(data, default=str))
        else:
            from rich.console import Console

            Console().print(render())
        sys.stdout.flush()
    except OSError as e:
        with contextlib.suppress(OSError, ValueError):  # nothing written later (Python's flush at exit) fails
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise errors.StdoutNotWritten(e) from None


def json_option(what: str = "the result"):
    """``--json``: print ``what`` as exactly one JSON object on stdout (see :func:`emit`)."""
    return click.option("--json", "as_json", is_flag=True, help=f"print {what} as one JSON object")


def reader(group, name: str, argument: str, metavar: str, what: str):
    """A command of ``group`` that reads one optional path (``argument``, shown as
    ``metavar``) and prints ``what``, or it as JSON with ``--json``."""

    def command(f):
        f = json_option(what)(f)
        f = click.argument(argument, metavar=metavar, required=False)(f)
        return group.command(name, context_settings=CONTEXT)(f)

    return command


DEBUG_ENV = "GPUSCALE_DEBUG"
debug = {"on": os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")}
"""``gpuscale --debug`` or ``GPUSCALE_DEBUG=1``: a failure shows its traceback."""

STOPPED_BY = {
    "interrupt": "stopped by Ctrl-C",
    "terminate": "stopped by SIGTERM",
    "scheduler stopped": "the scheduler was stopped (cluster down)",
}
"""Why a cluster held up (:func:`gpuscale.runs.serve.hold`) stopped, in words."""


def fail(message: str, code: int = errors.EXIT_BAD_INPUT) -> typing.NoReturn:
    with contextlib.suppress(OSError):  # a terminal that hung up takes no line
        click.echo(f"gpuscale: error: {' '.join(str(message).split())}", err=True)
    sys.exit(code)


def interrupted(e: BaseException | None = None) -> typing.NoReturn:
    """Ctrl-C / SIGTERM / SIGHUP: one line naming the signal and, for a run, the phase it
    stopped; exit 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP)."""
    interrupts.quiet_exit_logs()
    interrupts.end_child_processes(only_starting=True)
    phase = errors.phase_of(e, "")
    kept = getattr(e, "gpuscale_kept", None)
    if kept is None and phase:
        kept = "nothing was written"
    during = f" during {phase}" if phase else ""
    written = f"{kept} and " if kept is not None else ""
    fail(
        f"interrupted ({interrupts.signal_name(e)}){during}; {written}what this command started was stopped",
        interrupts.interrupt_exit_code(e),
    )


def ended(e: BaseException) -> typing.NoReturn:
    """How any exception out of a command ends the process (one place, used by every group)."""
    if isinstance(e, UserError):
        if debug["on"]:
            traceback.print_exception(e)
        fail(str(e))
    if isinstance(e, KeyboardInterrupt):
        interrupted(e)
    if isinstance(e, FileNotFoundError) and not _working_folder():
        interrupts.quiet_exit_logs()
        fail(
            "the working folder no longer exists (deleted or moved); cd to a folder that exists and "
            "run it again"
        )
    if isinstance(
        e, (errors.ClusterGone, errors.RecordNotWritten, errors.OutputNotWritten, errors.StdoutNotWritten)
    ):
        interrupts.quiet_exit_logs()
        fail(str(e), e.exit_code)
    if debug["on"]:  # anything else: one line and exit 1; --debug shows the traceback
        raise e
    interrupts.quiet_exit_logs()
    text = " ".join(str(e).split()) or "(no message)"
    if len(text) > 300:
        text = text[:300] + " ..."
    fail(
        f"unexpected {type(e).__name__}: {text}; rerun with `gpuscale --debug ...` for the traceback "
        "and report it",
        errors.EXIT_INTERNAL,
    )


def _working_folder() -> bool:
    """Whether this process's working folder still exists."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def _help_and_exit(ctx) -> typing.NoReturn:
    """A group given no command: its help on stdout, exit 0 (as ``--help``)."""
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit(0)


class Formatter(click.HelpFormatter):
    """click's help layout, wrapped at spaces only: a flag or a path (``--target-error``,
    ``./gpuscale-results``) is never split at one of its hyphens."""

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first = min(click.formatting.measure_table(rows)[0], col_max) + col_spacing
        width = max(self.width - first - 2 - self.current_indent, 10)
        wrap = textwrap.TextWrapper(width, break_on_hyphens=False, break_long_words=False)
        super().write_dl(
            [
                (term, "\b\n" + "\n".join(wrap.wrap(" ".join(text.split()))) if text else text)
                for term, text in rows
            ],
            col_max,
            col_spacing,
        )


class Context(click.Context):
    formatter_class = Formatter


PANELS: dict[str, str] = {
    "data": "Your data (instead of generated data)",
    "run": "Run and output",
    "cluster": "Backend and cluster",
    "gpu": "GPU workers and UCX",
    "running": "A cluster that is already running",
    "hosts": "Clusters on other hosts (SSH, SLURM) and TLS",
}
"""``--help``'s sections, in order after the command's own (a workload's parameters first): a
setting's flag names its section (``config.Flag.panel``), the other options are in
:data:`PANEL_OF`."""

PANEL_OF: dict[str, str] = {
    "input_path": "data",
    "output_path": "data",
    "overwrite": "data",
    "validate": "data",
    "trace_dir": "run",
    "dashboard": "run",
    "rules": "run",
    "as_json": "run",
    "collection": "cluster",
}
"""The section of each option that is not a setting's flag, by parameter name."""


def panel(param: click.Parameter) -> str | None:
    """The key of :data:`PANELS` that ``param`` is listed under (None: the command's own)."""
    setting = config.FLAGS.get(param.name or "")
    return setting.flag.panel if setting is not None else PANEL_OF.get(param.name or "")


def write_panels(ctx, formatter, params, first: str, suffix: str = "") -> None:
    """The options among ``params`` under the headings of :data:`PANELS` (their ``suffix``
    appended), the ones in no panel first under ``first``, ``--help`` last; all under ``first``
    when they would make one panel."""
    panels: dict[str, list] = {first: [], **{title: [] for title in PANELS.values()}}
    options = [p for p in params if isinstance(p, click.Option) and not p.hidden]
    for p in options:
        if "--help" not in p.opts:
            key = panel(p)
            panels[PANELS[key] if key else first].append(p.get_help_record(ctx))
    shown = [[title, rows] for title, rows in panels.items() if rows] or [[first, []]]
    if len(shown) == 1:
        shown[0][0] = first
    shown[-1][1] += [p.get_help_record(ctx) for p in options if "--help" in p.opts]
    for title, rows in shown:
        with formatter.section(title + suffix):
            formatter.write_dl(rows)


class Panelled(click.Command):
    """A command whose ``--help`` groups its options in sections (:func:`write_panels`)."""

    context_class = Context

    def __init__(self, *args, first_panel: str = "Options", **kwargs):
        super().__init__(*args, **kwargs)
        self.first_panel = first_panel

    def format_options(self, ctx, formatter):
        write_panels(ctx, formatter, self.get_params(ctx), self.first_panel)


class Group(click.Group):
    """A group whose commands end every failure with one line (also under ``dask gpuscale``);
    with no command after it (``gpuscale``, ``gpuscale run``, ``gpuscale --debug``) it shows
    its help and exits 0. Its commands (and their ``--help``) are :class:`Panelled`."""

    context_class = Context
    command_class = Panelled

    def format_commands(self, ctx, formatter):
        """``--help``: each command with the first sentence of its help, whole (click's default
        cuts it with "...")."""
        cmds = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        rows = [(name, cmd.get_short_help_str(limit=500)) for name, cmd in cmds if cmd and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx, args):
        if not args and not ctx.resilient_parsing:
            _help_and_exit(ctx)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        given = getattr(ctx, "_protected_args", None)
        if given is None:  # click < 8.2
            given = ctx.protected_args
        if not given and not ctx.args and not self.invoke_without_command:
            _help_and_exit(ctx)
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort):
            raise
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - one line, an exit code per kind
            ended(e)
