"""Command line: parse flags, call :mod:`gpuscale.api`, render with :mod:`gpuscale.records.report`
and :mod:`gpuscale.trace.render`.

The settings' flags are built from their declaration (``config.Flag``) and map one-to-one onto
API keywords (``config.KEYWORDS``); no click object reaches library code. Every failure is one
line on stderr, ``gpuscale: error: <problem>; <fix>``, with the exit code
:mod:`gpuscale.errors` defines (2 bad input, 3 a check failed, 4 the cluster went away, 5 the
record could not be written, 130 / 143 interrupted, 1 anything unexpected); no traceback unless
``gpuscale --debug`` (or ``GPUSCALE_DEBUG=1``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import typing
from typing import Any

import click

from . import config, errors
from ._version import __version__
from .errors import UserError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


def _emit(data: Any, as_json: bool, render: typing.Callable[[], Any]) -> None:
    """What a command shows: ``data`` as exactly one JSON object on stdout (``--json``), else
    ``render()`` (a rich renderable, from :mod:`gpuscale.records.report` or
    :mod:`gpuscale.trace.render`) on the console."""
    if as_json:
        click.echo(json.dumps(data, default=str))
    else:
        _console().print(render())


def json_option(what: str = "the result"):
    """``--json``: print ``what`` as exactly one JSON object on stdout (see :func:`_emit`)."""
    return click.option("--json", "as_json", is_flag=True, help=f"print {what} as one JSON object")


DEBUG_ENV = "GPUSCALE_DEBUG"
_debug = {"on": os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")}


def _fail(message: str, code: int = errors.EXIT_BAD_INPUT) -> typing.NoReturn:
    with contextlib.suppress(OSError):  # a terminal that hung up takes no line
        click.echo(f"gpuscale: error: {' '.join(str(message).split())}", err=True)
    sys.exit(code)


def _quiet() -> None:
    errors.quiet_exit_logs()


def _interrupted(e: BaseException | None = None) -> typing.NoReturn:
    """Ctrl-C / SIGTERM / SIGHUP: one line naming the signal and, for a run, the phase it
    stopped; exit 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP)."""
    _quiet()
    errors.end_child_processes(only_starting=True)
    sig = errors.signal_name(e) if e is not None else "SIGINT"
    code = errors.interrupt_exit_code(e) if e is not None else errors.EXIT_SIGINT
    phase = errors.phase_of(e, "") if e is not None else ""
    kept = getattr(e, "gpuscale_kept", None)
    if phase:
        written = kept if kept is not None else "nothing was written"
        _fail(
            f"interrupted ({sig}) during {phase}; {written} and what this command started was stopped", code
        )
    if kept is not None:
        _fail(f"interrupted ({sig}); {kept} and what this command started was stopped", code)
    _fail(f"interrupted ({sig}); what this command started was stopped", code)


def _unexpected(e: BaseException) -> typing.NoReturn:
    """Anything that is not bad input: one line and exit 1; ``--debug`` shows the traceback."""
    if _debug["on"]:
        raise e
    _quiet()
    text = " ".join(str(e).split()) or "(no message)"
    if len(text) > 300:
        text = text[:300] + " ..."
    _fail(
        f"unexpected {type(e).__name__}: {text}; rerun with `gpuscale --debug ...` for the traceback "
        "and report it",
        errors.EXIT_INTERNAL,
    )


def _ended(e: BaseException) -> typing.NoReturn:
    """How any exception out of a command ends the process (one place, used by every group)."""
    if isinstance(e, UserError):
        if _debug["on"]:
            import traceback

            traceback.print_exception(e)
        _fail(str(e))
    if isinstance(e, KeyboardInterrupt):
        _interrupted(e)
    if isinstance(e, (errors.ClusterGone, errors.RecordNotWritten, errors.OutputNotWritten)):
        _quiet()
        _fail(str(e), e.exit_code)
    _unexpected(e)


def _help_and_exit(ctx) -> typing.NoReturn:
    """A group given no command: its help on stdout, exit 0 (as ``--help``)."""
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit(0)


class Formatter(click.HelpFormatter):
    """click's help layout, wrapped at spaces only: a flag or a path (``--target-error``,
    ``./gpuscale-results``) is never split at one of its hyphens."""

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        import textwrap

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


def _panel(param: click.Parameter) -> str | None:
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
            panel = _panel(p)
            panels[PANELS[panel] if panel else first].append(p.get_help_record(ctx))
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
        except Exception as e:  # noqa: BLE001 - one line, an exit code per kind
            _ended(e)
        except KeyboardInterrupt as e:
            _ended(e)


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
        if not isinstance(value, str):
            return value
        if self.kind == "choice":
            return value
        if self.kind == "int-or-choice" and value in self.values:
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
        from . import backends

        return "[" + "|".join(backends.choices()) + "]"

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        from . import backends

        return [
            CompletionItem(n) for n in [*backends.choices(), *backends.aliases()] if n.startswith(incomplete)
        ]


class BackendOption(click.Option):
    """``--backend``, its help naming the families and their aliases as the registry has them."""

    def get_help_record(self, ctx):
        from . import backends

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


def _declaration(setting, help_: str | None = None) -> tuple[list[str], dict[str, Any]]:
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
    return [_declaration(s) for scope in scopes for s in config.FLAGS.values() if s.flag.scope == scope]


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
    decls, attrs = _declaration(config.FLAGS[name], help_)
    return click.option(*decls, **attrs)


def _split(kwargs: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """A command's keyword arguments -> (profile, the settings its flags set, by keyword); what
    is left in ``kwargs`` is the command's own (a workload's parameters)."""
    settings = {k: kwargs.pop(k) for k in config.FLAGS if k in kwargs}
    return settings.pop(config.PROFILE_FLAG, None), settings


def _set_debug(ctx, param, value):
    if value:
        _debug["on"] = True
    return value


@click.group("gpuscale", cls=Group, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="gpuscale")
@click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_set_debug,
    help=f"show the traceback of a failure (also {DEBUG_ENV}=1)",
)
def cli():
    """Run the same Dask array / DataFrame work on CPUs or GPUs by changing one flag."""


# ---------------------------------------------------------------------------------------
# run WORKLOAD
# ---------------------------------------------------------------------------------------
class RunGroup(Group):
    """``gpuscale run NAME``: one sub-command per registered workload, built from its Params."""

    def list_commands(self, ctx):
        from . import workloads

        return workloads.names()

    def get_command(self, ctx, name):
        from . import workloads

        return _workload_command(workloads.get(name))  # unknown: a UserError listing the names

    def resolve_command(self, ctx, args):
        cmd_name = args[0] if args else None
        if cmd_name and cmd_name.startswith("-"):
            raise click.UsageError("give the workload first: gpuscale run WORKLOAD [OPTIONS]")
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


@cli.group(cls=RunGroup, context_settings=CONTEXT)
def run():
    """Run a workload, validate it and record the result."""


def _param_option(fname: str, field) -> click.Option:
    """One workload parameter as a flag typed from its annotation (:func:`workloads.value_kind`)."""
    from .workloads import value_kind

    flag = "--" + fname.replace("_", "-")
    desc = field.description or ""
    help_ = (
        desc
        if "default" in desc.lower() or field.default is None
        else f"{desc} (default: {field.default})".strip()
    )
    kind, values = value_kind(field.annotation)
    if kind == "bool":
        return click.Option([f"{flag}/--no-{fname.replace('_', '-')}", fname], default=None, help=help_)
    ptype = Typed(kind, values) if kind != "text" else click.STRING
    return click.Option([flag, fname], type=ptype, default=None, help=help_)


def run_params() -> list[click.Parameter]:
    """The flags every workload's ``run`` (and ``explain``) command takes: the settings' flags
    (``config.Flag``) and the run's own (``gpuscale run --help`` lists them)."""

    @click.option(
        "--trace",
        "trace_dir",
        metavar="DIR",
        help="capture a trace of the run into this new or empty folder (see `gpuscale trace`)",
    )
    @click.option(
        "--dashboard",
        "dashboard",
        is_flag=True,
        help="print the dashboard link (stderr) before the work and keep the cluster up "
        "after it until Ctrl-C",
    )
    @click.option("--json", "as_json", is_flag=True, help="print exactly one JSON object on stdout")
    def flags():
        pass

    return [*setting_options("cluster", "client", "run"), *flags.__click_params__[::-1]]


def _workload_command(cls) -> click.Command:
    params = [_param_option(fname, field) for fname, field in cls.Params.model_fields.items()]
    params += _data_options(cls)

    def command(as_json, **kwargs):
        from . import api
        from .records import report
        from .runs import progress

        trace_dir = kwargs.pop("trace_dir", None)
        data_kw = _pop_data_options(kwargs)
        shown = []  # --dashboard shows the result before holding the cluster

        def show(r):
            shown.append(r)
            _emit(r.to_dict(), as_json, lambda: report.result_table(r))
            sys.stdout.flush()

        hooks = _dashboard_hooks(show) if kwargs.pop("dashboard", False) else {}
        profile, settings = _split(kwargs)
        wl_params = {k: v for k, v in kwargs.items() if v is not None}
        try:
            with errors.phase("the run"), progress.shown() as tracker:
                r = api.run(
                    cls.name,
                    profile=profile,
                    cluster_settings=settings,
                    trace=trace_dir,
                    progress=tracker,
                    **data_kw,
                    **hooks,
                    **wl_params,
                )
        except errors.RecordNotWritten as e:  # the measured result goes to stdout, not lost
            click.echo(e.record_json)
            sys.stdout.flush()
            raise
        except errors.OutputNotWritten as e:  # the record is written: shown as on success
            show(e.result)
            raise
        if not shown:
            show(r)
        if r.valid is False:
            unwritten = " --output was not written;" if data_kw.get("output") else ""
            click.echo(
                f"gpuscale: {cls.name} result FAILED validation;{unwritten} see the checks above / in "
                f"{r.path}",
                err=True,
            )
            sys.exit(errors.EXIT_CHECK_FAILED)

    return Panelled(
        cls.name,
        callback=command,
        params=params + run_params(),
        help=f"{cls.description}.",
        context_settings=CONTEXT,
        first_panel=f"Parameters of {cls.name}",
    )


def _data_options(cls) -> list[click.Option]:
    """``--input``, ``--output``, ``--overwrite``, ``--validate`` for workloads that run on the
    user's own data (``input_formats``); none for the others."""
    formats = getattr(cls, "input_formats", ())
    if not formats:
        return []
    from .data.inputs import FORMAT_NAMES

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


def _pop_data_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = {
        "data": kwargs.pop("input_path", None),
        "output": kwargs.pop("output_path", None),
        "overwrite": bool(kwargs.pop("overwrite", False)),
        "validate": kwargs.pop("validate", None),
    }
    return {k: v for k, v in out.items() if v not in (None, False)}


STOPPED_BY = {
    "interrupt": "stopped by Ctrl-C",
    "terminate": "stopped by SIGTERM",
    "scheduler stopped": "the scheduler was stopped (cluster down)",
    "timeout": "timed out",
}


def _dashboard_hooks(show) -> dict[str, Any]:
    """``api.run`` callbacks for ``run --dashboard``: the link on stderr before the work; after
    it, the result shown and the cluster held (:func:`gpuscale.runs.serve.hold`) until Ctrl-C,
    SIGTERM or ``cluster down``. stdout keeps only what ``show`` prints."""
    from .runs import serve

    def on_ready(s):
        link = s.dashboard_link
        click.echo(
            f"gpuscale: dashboard: {link}"
            if link
            else "gpuscale: this cluster has no dashboard (--dashboard-address is unset)",
            err=True,
        )

    def hold(s, r):
        if s.spec.kind == "existing":
            how = "Ctrl-C leaves it (the running cluster stays)"
        else:
            how = f"Ctrl-C or `gpuscale cluster down {s.client.scheduler.address}` closes it"

        def announce():  # inside the hold: a Ctrl-C from here on is the normal stop
            show(r)
            click.echo(
                f"gpuscale: the cluster stays up for the dashboard at {s.dashboard_link}; {how}", err=True
            )

        why = serve.hold(s, before=announce)
        click.echo(f"gpuscale: {STOPPED_BY.get(why, why)}; closing the cluster", err=True)

    return {"on_ready": on_ready, "hold": hold}


# ---------------------------------------------------------------------------------------
# cluster show
# ---------------------------------------------------------------------------------------
@cli.group(cls=Group, context_settings=CONTEXT)
def cluster():
    """Inspect cluster specs; start a cluster in the foreground and stop it."""


@cluster.command("show", cls=Panelled, context_settings=CONTEXT)
@setting_flags("cluster", "client")
@click.option(
    "--for",
    "collection",
    type=click.Choice(["array", "dataframe"]),
    default=None,
    help="shape the cluster for array or DataFrame work (as `run` does per workload)",
)
@json_option("the spec")
def cluster_show(as_json, collection, **kwargs):
    """Print the fully resolved cluster spec, starting nothing."""
    from . import api
    from .records import report

    profile, settings = _split(kwargs)
    resolved, selection, spec = api.configure(profile=profile, collection=collection, check=False, **settings)
    _emit(
        {
            "spec": spec.model_dump(mode="json"),
            "commands": spec.commands,
            "per_host": spec.per_host,
            "backend": selection.requested,
            "family": selection.family.name,
            "reason": selection.reason,
            "settings": resolved.settings.model_dump(mode="json", by_alias=True),
            "sources": resolved.sources,
            "profile": resolved.profile,
        },
        as_json,
        lambda: report.spec_table(spec, resolved, selection),
    )


@cluster.command("up", cls=Panelled, context_settings=CONTEXT)
@setting_flags("cluster")
@click.option(
    "--for",
    "collection",
    type=click.Choice(["array", "dataframe"]),
    default=None,
    help="shape the cluster for array or DataFrame work (as `run` does per workload)",
)
@click.option(
    "--scheduler-file",
    metavar="PATH",
    help="also write Dask's scheduler file here (removed on exit); "
    "Client(scheduler_file=PATH) and `cluster down --scheduler-file` read it",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="print scheduler address, dashboard link etc. as one JSON object on the first "
    "line of stdout (messages go to stderr)",
)
def cluster_up(as_json, scheduler_file, collection, **kwargs):
    """Start the cluster `cluster show` describes and keep it up in the foreground until
    Ctrl-C, SIGTERM or `gpuscale cluster down ADDRESS`; everything started is closed on exit."""
    from .runs import serve

    profile, settings = _split(kwargs)
    with serve.sigterm_as_interrupt():
        with serve.up(
            profile=profile, collection=collection, scheduler_file=scheduler_file, **settings
        ) as served:
            d = served.describe()
            lines = [
                f"gpuscale cluster up: {d['cls']}, {d['workers']} worker(s), {d['threads']} "
                f"thread(s), {d['protocol']}{' + TLS' if d['tls'] else ''} ({d['family']} family)",
                f"  layout          {d['workers']} worker(s) x {d['threads_per_worker']} thread(s): "
                f"{d['layout']} (the rule `gpuscale run` applies to the same flags)",
                f"  scheduler       {d['scheduler']}",
                f"  dashboard       {d['dashboard'] or '(none: --dashboard-address is unset)'}",
                f"  warmed up       {d['warm_up_s']:.1f} s (every worker imported its libraries and "
                f"ran a first small task)",
            ]
            if d["scheduler_file"]:
                lines.append(f"  scheduler file  {d['scheduler_file']}")
            if d["credentials"]:
                lines.append(f"  credentials     {d['credentials']} (TLS; readable by you only)")
            elif d["tls"]:
                lines.append(
                    "  credentials     in this process only (TLS; give --scheduler-file to share them)"
                )
            if d["scheduler_file"]:
                lines += [
                    f"  use it          gpuscale run WORKLOAD --scheduler-file {d['scheduler_file']}  |  "
                    f"gpuscale.session(scheduler_file={d['scheduler_file']!r})",
                    "  stop it         Ctrl-C, or gpuscale cluster down --scheduler-file "
                    f"{d['scheduler_file']}",
                ]
            else:
                lines += [
                    f"  use it          gpuscale run WORKLOAD --scheduler {d['scheduler']}  |  "
                    f"gpuscale.session(scheduler={d['scheduler']!r})",
                    f"  stop it         Ctrl-C, or gpuscale cluster down {d['scheduler']}",
                ]

            def announce():  # inside the hold: a Ctrl-C from here on is the normal stop
                if as_json:
                    click.echo(json.dumps(d, default=str))
                for line in lines:
                    click.echo(line, err=as_json)
                sys.stdout.flush()

            why = serve.hold(served.session, before=announce)
            click.echo(f"gpuscale: {STOPPED_BY.get(why, why)}; closing the cluster", err=True)
    click.echo("gpuscale: cluster closed", err=True)


@cluster.command("down", context_settings=CONTEXT)
@click.argument("address", required=False)
@setting_option("scheduler_file", "read the address from this scheduler file")
@setting_option(
    "credentials", "TLS credentials for a tls:// ADDRESS (default: the file beside --scheduler-file)"
)
@click.option("--timeout", help="seconds to wait for the scheduler to answer (default 3)")
@click.option("--force", is_flag=True, help="stop it even while runs are in flight (they end with exit 4)")
@setting_option(
    "trust_cluster_files",
    "use a scheduler file / credentials that another user can change (default: the "
    "setting cluster.trust-files, false)",
)
def cluster_down(address, scheduler_file, credentials, timeout, force, trust_cluster_files):
    """Stop the scheduler at ADDRESS and its workers (e.g. one `cluster up` started, which
    then exits 0); refused (exit 2) while other clients hold tasks there, unless --force."""
    from .runs import serve

    if (address is None) == (scheduler_file is None):
        raise UserError(
            "give the scheduler ADDRESS or --scheduler-file PATH (exactly one)",
            "e.g. gpuscale cluster down tcp://127.0.0.1:8786",
        )
    t = serve.DOWN_TIMEOUT_S
    if timeout is not None:
        try:
            t = float(timeout)
        except ValueError:
            t = -1.0
        if not t > 0:
            raise UserError(
                f"--timeout must be a positive number of seconds, got {timeout!r}", "e.g. --timeout 5"
            )
    if trust_cluster_files is None:
        trust_cluster_files = config.resolve().settings.cluster.trust_files
    if scheduler_file is not None:
        address = serve.address_from_file(scheduler_file, trusted=trust_cluster_files)
        if credentials is None:
            from .cluster import security

            near = security.beside(scheduler_file)
            credentials = near if near.exists() else None
    d = serve.down(address, timeout_s=t, force=force, credentials=credentials, trusted=trust_cluster_files)
    busy = d["in_flight"]
    cut = (
        f" (--force: {len(busy['clients'])} client(s) holding {busy['tasks']} task(s) were cut off)"
        if busy["clients"] or busy["processing"]
        else ""
    )
    click.echo(f"gpuscale: stopped the scheduler at {d['scheduler']} and its {d['workers']} worker(s){cut}")


# ---------------------------------------------------------------------------------------
# info, workloads
# ---------------------------------------------------------------------------------------
def gather_info() -> dict[str, Any]:
    from . import backends, machine

    fams = []
    for fam in backends.families():
        ok, why = fam.probe()
        fams.append(
            {
                "name": fam.name,
                "names": list(fam.names),
                "usable": ok,
                "why": why,
                "description": fam.description,
            }
        )
    from .cluster import protocols

    return {
        "hardware": machine.hardware(),
        "stacks": machine.stacks(),
        "backends": fams,
        "protocols": {n: protocols.get(n).available() for n in protocols.names()},
        "versions": machine.versions(),
        "gpu_dashboard": machine.gpu_dashboard(),
    }


@cli.command(context_settings=CONTEXT)
@json_option("what was found")
def info(as_json):
    """CPU, memory, GPUs and NVLink, optional stacks, backends and versions."""
    from .records import report

    data = gather_info()
    _emit(data, as_json, lambda: report.info_table(data))


@cli.command("workloads", context_settings=CONTEXT)
@json_option("the workloads")
def workloads_cmd(as_json):
    """The registered workloads with their parameters and defaults."""
    from . import workloads
    from .records import report

    items = [workloads.describe(workloads.get(n)) for n in workloads.names()]
    _emit(items, as_json, lambda: report.workloads_table(items))


# ---------------------------------------------------------------------------------------
# trace summarize / compare
# ---------------------------------------------------------------------------------------
@cli.group("trace", cls=Group, context_settings=CONTEXT)
def trace_group():
    """Read trace folders written by `run --trace DIR` or Session.trace(DIR)."""


def _results_dir() -> str:
    """The results dir of the settings (``--results-dir``'s default: ./gpuscale-results)."""
    return config.resolve(None, {}).settings.results_dir


def _latest(what: str, **need: bool):
    """The latest run's record under the results dir (``results.latest``), named in one line on
    stderr (stdout keeps only the result)."""
    from .records import results

    r = results.latest(_results_dir(), **need)
    click.echo(
        f"gpuscale: {what} of the latest run: {r.workload} on {r.family} at {r.timestamp[:19]} "
        f"(record {r.path}{f', trace {r.trace}' if need.get('with_trace') else ''})",
        err=True,
    )
    return r


@trace_group.command("summarize", context_settings=CONTEXT)
@click.argument("directory", metavar="[DIR]", required=False)
@json_option("the summary")
def trace_summarize(directory, as_json):
    """Where the time went: wall split, top task groups, bytes moved, bandwidth, memory peaks.
    Without DIR: the trace of the latest run that has one (records under the results dir)."""
    from .trace import load, render

    if directory is None:
        directory = _latest("the trace", with_trace=True).trace
    s = load(directory)
    _emit(s.model_dump(mode="json", by_alias=True), as_json, lambda: render.summary_table(s, directory))


@trace_group.command("compare", context_settings=CONTEXT)
@click.argument("dir_a", metavar="DIR_A")
@click.argument("dir_b", metavar="DIR_B")
@json_option("the comparison")
def trace_compare(dir_a, dir_b, as_json):
    """Two traces side by side (e.g. tcp vs ucx), with ratios B / A."""
    from .trace import compare, render

    c = compare(dir_a, dir_b)
    _emit(c, as_json, lambda: render.compare_table(c))


# ---------------------------------------------------------------------------------------
# audit report, explain
# ---------------------------------------------------------------------------------------
@cli.group("audit", cls=Group, context_settings=CONTEXT)
def audit_group():
    """Read the backend audit of a run: which chunk library every task's output was."""


@audit_group.command("report", context_settings=CONTEXT)
@click.argument("path", metavar="[DIR_OR_RECORD]", required=False)
@json_option("the audit")
def audit_report(path, as_json):
    """The audit of a result record (JSON) or a trace folder (its summary.json) as a table:
    task outputs by prefix with their type and bytes, chunks of another family than the
    backend's with their likely fix, and family changes (host <-> device). Without a path:
    the latest run's record (under the results dir)."""
    from . import audit
    from .records import report

    if path is None:
        path = _latest("the backend audit", with_audit=True).path
    a, label = audit.load(path)
    _emit({**a, "source": label}, as_json, lambda: report.audit_table(a, label))


class ExplainGroup(RunGroup):
    """``gpuscale explain NAME``: the run command's flags, planning instead of running."""

    def get_command(self, ctx, name):
        from . import workloads

        if name not in workloads.names():
            raise UserError(f"unknown workload '{name}'", f"use one of: {', '.join(workloads.names())}")
        cls = workloads.get(name)
        run_cmd = _workload_command(cls)
        rules = click.Option(["--rules"], is_flag=True, help="also show the rule behind each knob's value")
        return Panelled(
            cls.name,
            callback=_explain_callback(cls),
            params=[*run_cmd.params, rules],
            help=f"What `gpuscale run {cls.name}` with these flags would do, starting nothing.",
            context_settings=CONTEXT,
            first_panel=run_cmd.first_panel,
        )

    def resolve_command(self, ctx, args):
        if args and args[0].startswith("-"):
            raise click.UsageError("give the workload first: gpuscale explain WORKLOAD [OPTIONS]")
        return click.Group.resolve_command(self, ctx, args)


# run flags that do not change the plan (named in a note when given)
NOT_PLANNED = {
    "results_dir": "--results-dir",
    "input_path": "--input",
    "overwrite": "--overwrite",
    "validate": "--validate",
}


def _explain_callback(cls):
    def explain(as_json=False, trace_dir=None, output_path=None, dashboard=False, rules=False, **kwargs):
        from . import api
        from .records import report

        unused = [flag for key, flag in NOT_PLANNED.items() if kwargs.pop(key, None) not in (None, False)]
        profile, settings = _split(kwargs)
        wl_params = {k: v for k, v in kwargs.items() if v is not None}
        d = api.explain(
            cls.name,
            profile=profile,
            cluster_settings=settings,
            trace=trace_dir,
            output=output_path,
            dashboard=dashboard,
            **wl_params,
        )
        if unused:
            d["notes"].append(
                f"not used by explain: {', '.join(unused)} (the plan is for generated "
                "data and does not depend on where results go)"
            )
        _emit(d, as_json, lambda: report.explain_table(d, rules=rules))

    return explain


@cli.group("explain", cls=ExplainGroup, context_settings=CONTEXT)
def explain_group():
    """Print the plan of `gpuscale run WORKLOAD [same flags]` without starting any work: the
    cluster spec, every tuned knob with its value and source (--rules: and the rule behind it),
    and the memory headroom."""


# ---------------------------------------------------------------------------------------
# bench SPEC, results list / chart / compare
# ---------------------------------------------------------------------------------------
@cli.command("bench", context_settings=CONTEXT)
@click.argument("spec", metavar="SPEC.yaml")
@click.option(
    "--out",
    "out",
    metavar="DIR",
    default=None,
    help="the bench folder: records, table, charts, report.html (default: bench-NAME, NAME from "
    "the spec); a re-run into it skips the finished cases",
)
@json_option("the cases and what was written")
def bench_cmd(spec, out, as_json):
    """Run the sweep SPEC.yaml describes (workloads x sizes x backends x protocols x workers),
    one cluster per backend / protocol / workers, every case validated; a failing case is
    recorded and the sweep goes on. Exit 3 when a case failed or did not validate."""
    from .records import report
    from .runs import bench

    spec_obj, _ = bench.load_spec(spec)  # a bad spec: one line, exit 2, before any cluster
    folder = pathlib.Path(out or f"bench-{spec_obj.name}")
    try:
        d = bench.run(spec, folder, progress=report.sweep_progress)
    except KeyboardInterrupt as e:  # the cases that finished keep their records
        from .records import results

        done = len(results.find(folder / "records")) if (folder / "records").is_dir() else 0
        e.gpuscale_kept = (
            f"the {done} finished case(s) are kept in {folder} (a re-run skips them)"
            if done
            else "no case had finished"
        )
        raise
    bad = [c for c in d["cases"] if c.get("error")]
    summary = {
        "out": str(out or f"bench-{spec_obj.name}"),
        "ran": d["ran"],
        "skipped": d["skipped"],
        "failed": d["failed"],
        "with_error": len(bad),
        **d["outputs"],
        "cases": d["cases"],
    }
    if as_json:
        click.echo(json.dumps(summary, default=str))
    else:
        click.echo(
            f"gpuscale bench: {d['ran']} case(s) ran, {d['skipped']} skipped (finished before), "
            f"{len(bad)} with an error; report: {d['outputs']['report']}"
        )
    if bad:
        sys.exit(errors.EXIT_CHECK_FAILED)


@cli.group("results", cls=Group, context_settings=CONTEXT)
def results_group():
    """Read result records and bench folders: list, show, chart, compare."""


@results_group.command("list", context_settings=CONTEXT)
@click.argument("directory", metavar="[DIR]", required=False)
@json_option("the records")
def results_list(directory, as_json):
    """The records under DIR (default: the results dir, ./gpuscale-results), newest first, each
    named by its id (`results show ID`, `results compare ID ID`)."""
    from rich.markup import escape

    from .records import report, results

    d = directory or _results_dir()
    recs = results.find(d)
    _emit(
        [
            {
                "id": r.id,
                "path": r.path,
                "timestamp": r.timestamp,
                "workload": r.workload,
                "backend": r.backend,
                "family": r.family,
                "protocol": r.protocol,
                "median_s": r.median_s,
                "stdev_s": r.stdev_s,
                "iqr_s": r.iqr_s,
                "repeats": len(r.times_s),
                "valid": r.valid,
                "dashboard_link": r.dashboard_link,
                "dashboard_link_live": r.dashboard_link_live,
            }
            for r in recs
        ],
        as_json,
        lambda: (
            report.records_table(recs, f"{len(recs)} record(s) in {d}, newest first", d)
            if recs
            else escape(f"no records in {d} yet (`gpuscale run WORKLOAD` writes one there)")
        ),
    )


@results_group.command("show", context_settings=CONTEXT)
@click.argument("ref", metavar="ID|RECORD")
@setting_option("results_dir", "where an ID is looked up (default ./gpuscale-results)")
@json_option("the record")
def results_show(ref, results_dir, as_json):
    """One record's run summary, as `gpuscale run` showed it, with its full path: by the id
    `results list` shows (any unique start of it) or by the record file."""
    from .records import report, results

    path = results.locate(ref, results_dir or _results_dir())
    if pathlib.Path(path).is_dir():
        raise UserError(
            f"'{ref}' is a folder",
            f"give a record id or a record file (gpuscale results list {ref}: its records)",
        )
    r = results.load(path)
    r.path = str(path)
    _emit(r.to_dict(), as_json, lambda: report.result_table(r))


@results_group.command("chart", context_settings=CONTEXT)
@click.argument("directory", metavar="DIR")
@json_option("the files written")
def results_chart(directory, as_json):
    """Redraw a bench folder's table, charts (PNG) and report.html from its records."""
    from .records import folder

    d = folder.redraw(directory)
    _emit(
        d,
        as_json,
        lambda: (
            f"{d['rows']} case(s); charts: {', '.join(d['charts'].values()) or 'none'}; report: {d['report']}"
        ),
    )


@results_group.command("compare", context_settings=CONTEXT)
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@setting_option("results_dir", "where a record ID given as A or B is looked up (default ./gpuscale-results)")
@click.option(
    "--fail-if-slower",
    "fail_if_slower",
    metavar="PCT",
    default=None,
    help="exit 3 when a case of B is slower than A by more than PCT (e.g. 5%) with confidence",
)
@click.option(
    "--fail-if-inconclusive",
    "fail_if_inconclusive",
    is_flag=True,
    help="with --fail-if-slower: exit 3 also when a case is not shown to be within PCT",
)
@click.option(
    "--margin",
    metavar="PCT",
    default="5%",
    help="differences within this are 'same' when the interval shows it (default 5%)",
)
@click.option(
    "--between-run",
    "between_run",
    metavar="PCT",
    default=None,
    help="the spread between two runs of the same code, assumed where each side holds one run "
    "(default 10%; several runs a side measure it)",
)
@click.option("--confidence", default="0.95", help="confidence of the interval (default 0.95)")
@json_option("the comparison")
def results_compare(
    a, b, results_dir, fail_if_slower, fail_if_inconclusive, margin, between_run, confidence, as_json
):
    """B / A per case (two bench folders, results folders, records or record ids) with a distribution-free
    interval and a verdict: faster / slower / same / inconclusive (with the repeats or runs
    that would resolve it), and the minimum detectable effect. Exit 3 with --fail-if-slower PCT
    when some case is slower by more than PCT with confidence."""
    from .records import compare, report, results

    a, b = (results.locate(x, results_dir or _results_dir()) for x in (a, b))
    try:
        conf = float(confidence)
    except ValueError:
        raise UserError(
            f"--confidence must be a number, got {confidence!r}", "e.g. --confidence 0.95"
        ) from None
    if fail_if_inconclusive and fail_if_slower is None:
        raise UserError(
            "--fail-if-inconclusive needs --fail-if-slower PCT",
            "e.g. --fail-if-slower 5% --fail-if-inconclusive",
        )
    limit = compare.parse_pct(fail_if_slower, "--fail-if-slower") if fail_if_slower is not None else None
    spread = (
        compare.ASSUMED_BETWEEN_RUN
        if between_run is None
        else compare.parse_pct(between_run, "--between-run")
    )
    c = compare.compare(
        a,
        b,
        confidence=conf,
        margin=compare.parse_pct(margin, "--margin"),
        fail_if_slower=limit,
        fail_if_inconclusive=fail_if_inconclusive,
        between_run=spread,
    )
    _emit(c, as_json, lambda: report.compare_table(c))
    if c["failed"]:
        click.echo(
            f"gpuscale: {len(c['failed'])} case(s) failed --fail-if-slower {fail_if_slower}: "
            + "; ".join(report.gate_failure(x) for x in c["failed"]),
            err=True,
        )
        sys.exit(compare.SLOWER_EXIT)


# ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """Entry point: click usage errors become one line, exit 2; SIGTERM is an interruption
    like Ctrl-C (:func:`gpuscale.errors.sigterm_raises`: temp files are removed, the cluster
    closed); every other failure is one line too (:func:`_ended`)."""
    errors.quiet_shutdown_noise(tracker=not _debug["on"])
    try:
        with errors.sigterm_raises():
            rv = cli.main(args=argv, prog_name="gpuscale", standalone_mode=False)
    except click.exceptions.NoSuchOption as e:
        hint = f" (did you mean {', '.join(e.possibilities)}?)" if e.possibilities else ""
        cmd = e.ctx.command_path if e.ctx else "gpuscale"
        _fail(f"no such option {e.option_name}{hint}; see `{cmd} --help`")
    except click.exceptions.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "gpuscale"
        _fail(f"{e.format_message()}; see `{cmd} --help`")
    except click.exceptions.ClickException as e:
        _fail(e.format_message())
    except click.exceptions.Abort:
        _interrupted()
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - one line, an exit code per kind
        _ended(e)
    except KeyboardInterrupt as e:
        _ended(e)
    sys.exit(rv if isinstance(rv, int) else 0)
