"""``gpuscale help [TOPIC]``: the help of a command (``gpuscale help run``), of a workload
(``gpuscale help svd``: ``gpuscale run svd --help``) or of a command's subcommand (``gpuscale
help results compare``); ``gpuscale --help`` without one."""

from __future__ import annotations

import click

from .. import workloads
from ..errors import UserError
from .base import CONTEXT


@click.command("help", context_settings=CONTEXT)
@click.argument("topic", nargs=-1)
@click.pass_context
def help_cmd(ctx, topic):
    """Help on a command or a workload: `gpuscale help run`, `gpuscale help svd`."""
    root = ctx.find_root().command
    path = list(topic)
    if path and path[0] in workloads.names():
        path = ["run", *path]
    cmd, names = root, ["gpuscale"]
    for name in path:
        sub = cmd.get_command(ctx, name) if isinstance(cmd, click.Group) else None
        if sub is None:
            known = ", ".join(root.list_commands(ctx))
            raise UserError(
                f"no command or workload named {name!r}",
                f"commands: {known}; workloads: {', '.join(workloads.names())}",
            )
        cmd, names = sub, [*names, name]
    with click.Context(cmd, info_name=" ".join(names), parent=None) as sub_ctx:
        click.echo(cmd.get_help(sub_ctx))
