"""Command line: parse flags, call :mod:`gpuscale.api`, render with :mod:`gpuscale.records.report`
and :mod:`gpuscale.trace.render`.

Each command is a module of this package (:data:`COMMANDS`), imported when the command runs or
its own help is shown (:mod:`.lazy`); ``gpuscale --help`` imports none of them. What they share
is in :mod:`.base` (help layout, groups, output, failures) and :mod:`.options` (flag types, the
settings' flags).

The settings' flags are built from their declaration (``config.Flag``) and map one-to-one onto
API keywords (``config.KEYWORDS``); no click object reaches library code. Every failure is one
line on stderr, ``gpuscale: error: <problem>; <fix>``, with the exit code
:mod:`gpuscale.errors` defines (2 bad input, 3 a check failed, 4 the cluster went away, 5 the
record could not be written, 130 / 143 interrupted, 1 anything unexpected); no traceback unless
``gpuscale --debug`` (or ``GPUSCALE_DEBUG=1``).
"""

from __future__ import annotations

import sys

import click

from .. import interrupts
from .._version import __version__
from .base import CONTEXT, DEBUG_ENV, debug, ended, fail, interrupted
from .lazy import LazyGroup

COMMANDS: dict[str, tuple[str, str]] = {
    "audit": (
        "audit:audit_group",
        "Read the backend audit of a run: which chunk library every task's output was.",
    ),
    "bench": (
        "bench:bench_cmd",
        "Run the sweep SPEC.yaml describes (workloads x sizes x backends x protocols x workers), one "
        "cluster per backend / protocol / workers, every case validated; a failing case is recorded "
        "and the sweep goes on.",
    ),
    "cluster": ("cluster:cluster", "Inspect cluster specs; start a cluster in the foreground and stop it."),
    "explain": (
        "explain:explain_group",
        "Print the plan of `gpuscale run WORKLOAD [same flags]` without starting any work: the cluster "
        "spec, every tuned knob with its value and source (--rules: and the rule behind it), and the "
        "memory headroom.",
    ),
    "help": ("help:help_cmd", "Help on a command or a workload: `gpuscale help run`, `gpuscale help svd`."),
    "info": ("info:info", "CPU, memory, GPUs and NVLink, optional stacks, backends and versions."),
    "results": (
        "results:results_group",
        "Read result records and bench folders: list, show, chart, compare.",
    ),
    "run": ("run:run", "Run a workload, validate it and record the result."),
    "trace": (
        "trace:trace_group",
        "Read trace folders written by `run --trace DIR` or Session.trace(DIR).",
    ),
    "workloads": ("workloads:workloads_cmd", "The registered workloads with their parameters and defaults."),
}
"""The commands: name -> (``"MODULE:NAME"`` of the command in this package, the first sentence
of its help, which ``gpuscale --help`` lists without importing the module)."""


def _set_debug(ctx, param, value):
    if value:
        debug["on"] = True
    return value


@click.group("gpuscale", cls=LazyGroup, commands_by_path=COMMANDS, context_settings=CONTEXT)
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


def main(argv: list[str] | None = None) -> None:
    """Entry point: click usage errors become one line, exit 2; SIGTERM is an interruption
    like Ctrl-C (:func:`gpuscale.interrupts.sigterm_raises`: temp files are removed, the cluster
    closed); every other failure is one line too (:func:`.base.ended`)."""
    interrupts.quiet_shutdown_noise(tracker=not debug["on"])
    try:
        with interrupts.sigterm_raises():
            rv = cli.main(args=argv, prog_name="gpuscale", standalone_mode=False)
    except click.exceptions.NoSuchOption as e:
        hint = f" (did you mean {', '.join(e.possibilities)}?)" if e.possibilities else ""
        cmd = e.ctx.command_path if e.ctx else "gpuscale"
        fail(f"no such option {e.option_name}{hint}; see `{cmd} --help`")
    except click.exceptions.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "gpuscale"
        fail(f"{e.format_message().rstrip('.')}; see `{cmd} --help`")
    except click.exceptions.ClickException as e:
        fail(e.format_message())
    except click.exceptions.Abort:
        interrupted()
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - one line, an exit code per kind
        ended(e)
    sys.exit(rv if isinstance(rv, int) else 0)
