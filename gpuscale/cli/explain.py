"""``gpuscale explain WORKLOAD``: the flags of ``gpuscale run WORKLOAD``, planning instead of
running; what it prints is :mod:`gpuscale.cli.explain_callback`, imported when it runs."""

from __future__ import annotations

import click

from .. import workloads
from .base import CONTEXT, Panelled
from .lazy import Deferred
from .run import RunGroup, workload_command


class ExplainGroup(RunGroup):
    """``gpuscale explain NAME``: the run command's flags, planning instead of running."""

    def get_command(self, ctx, name):
        cls = workloads.get(name)  # unknown: a UserError listing the names
        run_cmd = workload_command(cls)
        rules = click.Option(["--rules"], is_flag=True, help="also show the rule behind each knob's value")
        return Panelled(
            cls.name,
            callback=Deferred("explain_callback:explain_workload", cls),
            params=[*run_cmd.params, rules],
            help=f"What `gpuscale run {cls.name}` with these flags would do, starting nothing.",
            context_settings=CONTEXT,
            first_panel=run_cmd.first_panel,
        )


@click.group("explain", cls=ExplainGroup, context_settings=CONTEXT)
def explain_group():
    """Print the plan of `gpuscale run WORKLOAD [same flags]` without starting any work: the
    cluster spec, every tuned knob with its value and source (--rules: and the rule behind it),
    and the memory headroom."""
